"""The online auto-tuner in GPU plans (run with `pytest -m gpu` on a GPU host): while it
switches the selection form (thread, warp, block per window) and the windows per launch
between firings on the device, results equal the CPU backend's untuned run; the default
tuner measures only configurations of its space and reports them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from test_tuner import (  # noqa: E402, F401 - hopping_tuner is a fixture
    FORMS,
    HOPPING_BATCH,
    _nan_equal,
    _sorted,
    batches,
    hopping_tuner,
)

import mangonel  # noqa: E402
from mangonel.runtime.gpu.holistic import GpuHolistic  # noqa: E402

QUERY = (
    "SELECT k, window_start AS ws, MEDIAN(v) AS m, PERCENTILE_DISC(0.9) WITHIN GROUP "
    "(ORDER BY v) AS p, COUNT(DISTINCT v) AS d FROM s [RANGE 40 MICROSECONDS SLIDE 4 "
    "MICROSECONDS] GROUP BY k"
)


def _session(backend: str, **options) -> mangonel.Session:
    s = mangonel.Session(backend, **options)
    s.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts')")
    return s


def test_gpu_results_equal_the_cpu_while_forms_and_launches_change(hopping_tuner):  # noqa: F811
    tuned = _session("gpu").sql(QUERY)
    got = tuned.run(batches(per_batch=HOPPING_BATCH))
    metrics = tuned.metrics.tuning
    assert {c["gpu_form"] for c, _, _ in metrics.tried} == set(FORMS)
    assert len({c["windows_per_launch"] for c, _, _ in metrics.tried}) >= 2
    assert metrics.switches > 10
    holistic = tuned._runner.window_operator
    launched = {
        form: kernels.launches
        for form, kernels in holistic._select_kernels.items()
        if isinstance(kernels, GpuHolistic)
    }
    assert set(launched) == set(FORMS) and all(n > 0 for n in launched.values())
    want = _session("cpu", tuning="off").sql(QUERY).run(batches(per_batch=HOPPING_BATCH))
    assert got.num_rows > 5000
    assert _nan_equal(_sorted(got), _sorted(want))


def test_gpu_default_tuner_reports_configurations_of_its_space():
    query = _session("gpu").sql(QUERY)
    # 320 batches in memory: firings combined up to 8 batches each, about 40 firings
    query.run(batches(rows=40_000, per_batch=125))
    metrics = query.metrics.tuning
    assert metrics.state in ("exploring", "settled") and metrics.steps > 10
    assert metrics.tried, "the default tuner measured nothing in 40 firings"
    for config, cost, _ in metrics.tried:
        assert config["gpu_form"] in FORMS and cost > 0
        assert 1 <= config["windows_per_launch"] <= 4194304 // 10
    text = query.explain(analyze=True)
    assert "holistic=sorted-panes(warp-per-window, 419430 windows/launch)" in text
    assert "tuner: " in text
