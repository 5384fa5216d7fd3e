"""Choosing the backend is pure: the caller passes the GPU probe's answer (no CuPy needed)."""

from __future__ import annotations

import pytest

from mangonel.compiler.backend import choose_backend, needs_probe
from mangonel.errors import BackendUnavailableError
from mangonel.session import Session

NO_GPU = (False, "CuPy is not importable (ImportError)")
GPU = (True, "CUDA device 0 is NVIDIA H100")


def test_cpu_needs_no_probe():
    assert not needs_probe("cpu")
    assert choose_backend("cpu", None) == ("cpu", "backend='cpu' requested")


@pytest.mark.parametrize(
    ("requested", "gpu", "expected"),
    [
        ("gpu", NO_GPU, ("gpu", f"backend='gpu' requested; {NO_GPU[1]}")),
        ("gpu", GPU, ("gpu", f"backend='gpu' requested; {GPU[1]}")),
        ("auto", NO_GPU, ("cpu", f"auto: {NO_GPU[1]}")),
        ("auto", GPU, ("gpu", f"auto: {GPU[1]}")),
    ],
)
def test_the_probe_answer_decides_auto_and_explains_gpu(requested, gpu, expected):
    assert needs_probe(requested)
    assert choose_backend(requested, gpu) == expected


def test_a_missing_probe_answer_and_an_unknown_backend_are_refused():
    with pytest.raises(ValueError, match="probe"):
        choose_backend("auto", None)
    with pytest.raises(BackendUnavailableError, match="unknown backend 'tpu'"):
        choose_backend("tpu", GPU)


def test_a_cpu_session_never_probes(monkeypatch):
    calls = []
    session = Session(backend="cpu")
    monkeypatch.setattr(session, "gpu_probe", lambda: calls.append(1) or GPU)
    session.execute(
        "CREATE STREAM t (ts TIMESTAMP, x BIGINT) WITH (event_time = 'ts', watermark = '0 ms')"
    )
    assert session.sql("SELECT COUNT(*) AS n FROM t [RANGE 1 SECOND]").backend == "cpu"
    assert calls == []
    session = Session(backend="auto")
    monkeypatch.setattr(session, "gpu_probe", lambda: calls.append(1) or GPU)
    session.execute(
        "CREATE STREAM t (ts TIMESTAMP, x BIGINT) WITH (event_time = 'ts', watermark = '0 ms')"
    )
    assert session.sql("SELECT COUNT(*) AS n FROM t [RANGE 1 SECOND]").backend == "gpu"
    assert calls == [1]
