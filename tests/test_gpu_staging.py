"""GPU staging and the narrow wire format against the CPU backend (run with `pytest -m gpu` on a
GPU host; issue 12, items 2 and 4).

Batches are cut into chunks (small `chunk_rows` here, so one batch spans several), each 64-bit
column of a chunk travels as int32 offsets from the chunk's first value where the chunk's
range fits and at 8 bytes where it does not, and the kernels read both; these tests build
batches whose chunks fall on either side (event times spanning hours, keys 2^40 apart), with
disorder, NULLs and out-of-range event times, and compare the device's rows and counters
with the CPU backend's, batch by batch. The kernels' metrics show which form travelled.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from oracle import rows_close  # noqa: E402
from plans import make_plan  # noqa: E402
from sqlglot import exp  # noqa: E402
from test_window_properties import _rows  # noqa: E402

from mangonel.catalog.types import SqlType as T  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.compiler.logical import AggregateFunction as F  # noqa: E402
from mangonel.compiler.options import GpuOptions  # noqa: E402
from mangonel.runtime.local.query import LocalQuery  # noqa: E402

STAMP = pa.timestamp("us", tz="UTC")
HOUR = 3_600_000_000
AGGREGATES = [
    (F.COUNT_STAR, None),
    (F.SUM, exp.column("v")),
    (F.MIN, exp.column("v")),
    (F.MAX, exp.column("k")),
    (F.STDDEV_SAMP, exp.column("v")),
]


def _plan(size: int, slide: int, delay: int):
    return make_plan(
        [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("v", T.DOUBLE)],
        keys=("k",),
        aggregates=AGGREGATES,
        size=size,
        slide=slide,
        delay=delay,
    )


def _batch(ts, keys, values, ts_valid=None, key_valid=None, value_valid=None) -> pa.RecordBatch:
    def arrow(values, valid, arrow_type):
        mask = None if valid is None else ~np.asarray(valid, bool)
        return pa.array(values, arrow_type, mask=mask)

    return pa.RecordBatch.from_arrays(
        [
            arrow(np.asarray(ts, np.int64), ts_valid, pa.int64()).cast(STAMP),
            arrow(keys, key_valid, pa.string() if keys.dtype.kind == "U" else pa.int64()),
            arrow(np.asarray(values, np.float64), value_valid, pa.float64()),
        ],
        names=["ts", "k", "v"],
    )


def _compare(plan, batches, options: GpuOptions, lookahead: bool = False, staged_extremes=False):
    """The GPU's rows equal the CPU's batch by batch (or, with `lookahead`, over
    `LocalQuery.stream` of the list); counters equal; returns the GPU kernels' metrics.
    `staged_extremes`: the GPU's conformer must never measure event times itself (the
    staging gives them)."""
    cpu = LocalQuery(plan)
    gpu = LocalQuery(ph.with_backend(plan, "gpu", "test"), gpu_options=options)
    if staged_extremes:

        def measured_again(batch):
            raise AssertionError("the conformer read the event times again")

        gpu.window_operator.conform.event_time_extremes = measured_again
    if lookahead:
        want = [row for b in batches for row in _rows(cpu.process(b))] + _rows(cpu.finish())
        got = _rows(list(gpu.stream(batches)))
        assert len(got) == len(want) > 0
        assert rows_close(got, want)
    else:
        for position, batch in enumerate(batches):
            want, got = _rows(cpu.process(batch)), _rows(gpu.process(batch))
            assert rows_close(got, want), f"after batch {position}:\n{got}\n!=\n{want}"
        assert rows_close(_rows(gpu.finish()), _rows(cpu.finish()))
    for counter in (
        "tuples_in",
        "late_tuples_dropped",
        "null_event_time_dropped",
        "event_time_out_of_range_dropped",
        "windows_fired",
    ):
        assert getattr(gpu.metrics, counter) == getattr(cpu.metrics, counter), counter
    return gpu.window_operator.kernels.metrics


@pytest.mark.parametrize("lookahead", [False, True])
def test_narrow_chunks_in_order_and_out_of_order_equal_cpu(lookahead):
    """Event times a few seconds apart per chunk, 1000 keys, disorder up to 1 s against a
    0.3 s watermark delay and 0.2 s windows (late rows among them): every offset column of
    every chunk travels narrow (16 B/tuple)."""
    rng = np.random.default_rng(11)
    batches = []
    for b in range(6):
        rows = 30_000
        ts = 1_764_000_000_000_000 + (b * rows + np.arange(rows)) * 100
        ts = ts - rng.integers(0, 1_000_000, rows)
        batches.append(_batch(ts, rng.integers(0, 1000, rows), rng.standard_normal(rows)))
    metrics = _compare(
        _plan(200_000, 100_000, 300_000), batches, GpuOptions(chunk_rows=7_000), lookahead
    )
    assert metrics.wide_chunks == 0 and metrics.narrow_chunks > 2 * 6 * 4
    assert metrics.wire_bytes == 16 * metrics.staged_rows


def test_chunks_spanning_more_than_int32_offsets_travel_wide_and_equal_cpu():
    """A batch whose middle chunk spans 3 hours of event time (more than 2^31 us) beside
    narrow chunks: the wide chunk's event times are read as 64-bit values."""
    rng = np.random.default_rng(12)
    rows = 9_000
    ts = 1_764_000_000_000_000 + np.arange(rows) * 1000
    ts[3000:6000] = ts[3000] + np.sort(rng.integers(0, 3 * HOUR, 3000))
    ts[6000:] = ts[5999] + np.arange(3000) * 1000
    keys = rng.integers(0, 50, rows)
    batches = [_batch(ts, keys, rng.standard_normal(rows))]
    later = ts[-1] + np.arange(rows) * 1000
    batches.append(_batch(later, keys, rng.standard_normal(rows)))
    metrics = _compare(_plan(HOUR, HOUR // 4, 4 * HOUR), batches, GpuOptions(chunk_rows=3_000))
    assert metrics.wide_chunks >= 1 and metrics.narrow_chunks >= 4


def test_keys_beyond_int32_equal_cpu():
    """BIGINT keys near 2^62 but close together (narrow: offsets from the chunk's first key)
    and keys 2^40 apart (wide), NULL keys among them: same groups and rows as the CPU."""
    rng = np.random.default_rng(13)
    rows = 20_000
    ts = 1_764_000_000_000_000 + np.arange(rows) * 50
    close = (1 << 62) + rng.integers(0, 100, rows)
    far = rng.integers(0, 8, rows) * (1 << 40) - (1 << 42)
    valid = rng.random(rows) > 0.05
    batches = [
        _batch(ts, close, rng.standard_normal(rows), key_valid=valid),
        _batch(ts + rows * 50, far, rng.standard_normal(rows), key_valid=valid),
        _batch(ts + 2 * rows * 50, np.where(np.arange(rows) % 2, close, far), ts % 7),
    ]
    metrics = _compare(_plan(100_000, 20_000, 0), batches, GpuOptions(chunk_rows=5_000))
    assert metrics.wide_chunks >= 4 and metrics.narrow_chunks >= 4


def test_nulls_and_out_of_range_event_times_equal_cpu():
    """NULL event times, keys and values; event times beyond the window range of int64
    (made NULL and counted apart by the conformer, whose range check here reuses the
    staging pass's min and max); the counters match the CPU's."""
    rng = np.random.default_rng(14)
    rows = 12_000
    ts = 1_764_000_000_000_000 + np.arange(rows) * 200 - rng.integers(0, 50_000, rows)
    ts_valid = rng.random(rows) > 0.1
    batches = [
        _batch(
            ts + b * rows * 200,
            rng.integers(0, 30, rows),
            rng.standard_normal(rows),
            ts_valid=ts_valid,
            key_valid=rng.random(rows) > 0.1,
            value_valid=rng.random(rows) > 0.2,
        )
        for b in range(3)
    ]
    outside = ts + 3 * rows * 200
    outside[::1000] = np.iinfo(np.int64).max - 5  # beyond the last window that fits int64
    batches.append(_batch(outside, rng.integers(0, 30, rows), rng.standard_normal(rows)))
    cpu_check = LocalQuery(_plan(100_000, 25_000, 60_000))
    for batch in batches:
        cpu_check.process(batch)
    assert cpu_check.metrics.event_time_out_of_range_dropped == 12
    _compare(_plan(100_000, 25_000, 60_000), batches, GpuOptions(chunk_rows=4_096))


def _pinned_batch(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, object]:
    """The same batch with every column's values in page-locked memory (no NULLs allowed):
    the stager copies them as they are, and measures the event time by its own pass."""
    import cupy

    columns = [np.asarray(c.view(pa.int64()) if c.type == STAMP else c) for c in batch.columns]
    memory = cupy.cuda.alloc_pinned_memory(sum(c.nbytes for c in columns))
    arrays, offset = [], 0
    for values, column in zip(columns, batch.columns, strict=True):
        view = np.frombuffer(memory, values.dtype, len(values), offset)
        view[:] = values
        offset += values.nbytes
        buffer = pa.foreign_buffer(view.ctypes.data, view.nbytes, base=memory)
        arrays.append(pa.Array.from_buffers(column.type, len(values), [None, buffer]))
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema), memory


@pytest.mark.parametrize("lookahead", [False, True])
def test_pinned_batches_with_out_of_range_event_times_equal_cpu(lookahead):
    """Batches already in pinned memory (copied as they are, their event times' min and max
    measured by the stager's parallel pass, not the conformer's), with disorder, late rows
    and event times beyond the last window that fits int64 (clipped and counted apart)."""
    rng = np.random.default_rng(16)
    rows, batches, memories = 20_000, [], []
    for b in range(4):
        ts = 1_764_000_000_000_000 + (b * rows + np.arange(rows)) * 100
        ts = ts - rng.integers(0, 500_000, rows)
        if b == 2:
            ts[::997] = np.iinfo(np.int64).max - 5
        batch, memory = _pinned_batch(
            _batch(ts, rng.integers(0, 200, rows), rng.standard_normal(rows))
        )
        batches.append(batch)
        memories.append(memory)
    options = GpuOptions(chunk_rows=8_192)
    metrics = _compare(_plan(200_000, 50_000, 100_000), batches, options, lookahead, True)
    assert metrics.prefetches >= 4


def test_string_keys_and_default_chunks_through_the_public_api():
    """`Session(backend="gpu").sql(...).run()` over a 2.5 M-row batch (three chunks at the
    default 2^20 rows) with STRING keys and disorder, beside the CPU's result."""
    from mangonel.session import Session

    rng = np.random.default_rng(15)
    rows = 2_500_000
    ts = 1_764_000_000_000_000 + np.arange(rows) // 10 - rng.integers(0, 100_000, rows)
    keys = np.array([f"k{i}" for i in range(100)])[rng.integers(0, 100, rows)]
    batch = _batch(ts, keys, rng.standard_normal(rows))
    tables = {}
    for backend in ("cpu", "gpu"):
        session = Session(backend=backend)
        session.create_stream("s", batch.schema, event_time="ts", watermark=100_000)
        query = session.sql(
            "SELECT k, window_start, COUNT(*) AS n, SUM(v) AS total, STDDEV(v) AS sd "
            "FROM s [RANGE 10 MILLISECONDS SLIDE 5 MILLISECONDS] GROUP BY k"
        )
        tables[backend] = query.run([batch, batch.slice(0, 1000)])
    cpu, gpu = (
        tables[b].sort_by([("window_start", "ascending"), ("k", "ascending")])
        for b in ("cpu", "gpu")
    )
    assert gpu.num_rows == cpu.num_rows > 1000
    assert gpu.column("n").equals(cpu.column("n"))
    assert np.allclose(gpu.column("total").to_numpy(), cpu.column("total").to_numpy())
    assert np.allclose(
        gpu.column("sd").to_numpy(zero_copy_only=False),
        cpu.column("sd").to_numpy(zero_copy_only=False),
        equal_nan=True,
    )


def test_gpu_bench_quick_runs_on_the_public_path(tmp_path, capsys):
    """`mangonel bench --backend gpu --quick` end to end on 4 M tuples per shape (one 4 M-row
    batch, or four 1 M-row ones): both bounds printed, one row per quick shape with tuples/s,
    result rows, and the pinned-source harness beside the SUM shapes."""
    import json

    from mangonel.bench_gpu import quick_gpu_shapes
    from mangonel.cli import main

    out = tmp_path / "gpu.json"
    arguments = ["bench", "--backend", "gpu", "--quick", "--tuples", "4000000", "--harness"]
    assert main([*arguments, "--no-peer", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "pinned H2D" in printed and "pageable -> pinned staging" in printed
    assert "16 B/tuple on the wire" in printed
    rows = json.loads(out.read_text())
    assert sorted(r["shape"] for r in rows) == sorted(s.name for s in quick_gpu_shapes())
    assert all(r["tuples"] == 4_000_000 and r["rows_out"] > 0 for r in rows)
    assert all(0 < r["h2d_share"] and 0 < r["staging_share"] for r in rows)
    assert all(r["wire_bytes_per_tuple"] == 16 for r in rows)  # every chunk travelled narrow
    harness = [r for r in rows if r["harness_tuples_per_second"]]
    assert harness and all("SUM" in r["shape"] for r in harness)
