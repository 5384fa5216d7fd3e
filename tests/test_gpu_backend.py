"""GPU backend against the CPU backend and the oracle (run with `pytest -m gpu` on a GPU host).

The GPU kernels are driven by the same driver as the CPU kernels, so a plan differs only in
`WindowAggregateExec.backend`. Differential tests compare the two backends batch by batch;
property tests reuse the random streams of tests/test_window_properties.py against the oracle.
"""

from __future__ import annotations

import math
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

from hypothesis import given, settings  # noqa: E402
from oracle import rows_close  # noqa: E402
from plans import make_plan  # noqa: E402
from sqlglot import exp  # noqa: E402
from test_numeric_semantics import CASES as NUMERIC_CASES  # noqa: E402
from test_numeric_semantics import check as check_numeric  # noqa: E402
from test_numeric_semantics import same  # noqa: E402
from test_window_properties import SETTINGS, _check, _rows, streams  # noqa: E402

from mangonel.catalog.types import SqlType as T  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.compiler.logical import AggregateFunction as F  # noqa: E402
from mangonel.compiler.options import GpuOptions  # noqa: E402
from mangonel.runtime.local.query import LocalQuery  # noqa: E402


def on_gpu(plan: ph.ProjectExec) -> ph.ProjectExec:
    """The same plan with the window operator on the GPU backend."""
    return ph.with_backend(plan, "gpu", "test")


def compare(plan, batches, snapshot_at=None, options: GpuOptions | None = None) -> None:
    cpu, gpu = LocalQuery(plan), LocalQuery(on_gpu(plan), gpu_options=options)
    for position, batch in enumerate(batches):
        if position == snapshot_at:
            saved = gpu.snapshot()
            gpu = LocalQuery(on_gpu(plan), gpu_options=options)
            gpu.restore(saved)
        want, got = _rows(cpu.process(batch)), _rows(gpu.process(batch))
        assert rows_close(got, want), f"after batch {position}:\n{got}\n!=\n{want}"
    assert rows_close(_rows(gpu.finish()), _rows(cpu.finish()))
    assert gpu.metrics.late_tuples_dropped == cpu.metrics.late_tuples_dropped
    assert gpu.metrics.tuples_in == cpu.metrics.tuples_in


COLUMNS = [
    ("ts", T.TIMESTAMP),
    ("k", T.BIGINT),
    ("s", T.STRING),
    ("x", T.DOUBLE),
    ("i", T.INT),
    ("b", T.BOOLEAN),
]
STAMP = pa.timestamp("us", tz="UTC")


def random_batches(seed: int, rows: int, keys: int, disorder: int, batches: int):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, rows * 10, rows)) + rng.integers(0, disorder + 1, rows)
    k = rng.integers(0, keys, rows)
    table = pa.table(
        {
            "ts": pa.array(ts).cast(STAMP),
            "k": pa.array(k, mask=rng.random(rows) < 0.05),
            "s": pa.array([f"sym{v % 13}" for v in k]),
            "x": pa.array(rng.normal(100, 30, rows), mask=rng.random(rows) < 0.1),
            "i": pa.array(rng.integers(-50, 50, rows).astype(np.int32)),
            "b": pa.array(rng.random(rows) < 0.8),
        }
    )
    cuts = np.linspace(0, rows, batches + 1).astype(int)
    return [
        table.slice(a, b - a).combine_chunks().to_batches()[0]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
        if b > a
    ]


ALL = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("i")),
    (F.AVG, exp.column("x")),
    (F.VAR_POP, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("i")),
    (F.MIN, exp.column("ts")),
]


@pytest.mark.parametrize("keys", [(), ("k",), ("s",), ("s", "k")])
@pytest.mark.parametrize("window", [(1000, 1000), (1000, 100), (5000, 30)])
def test_gpu_equals_cpu_time_windows(keys, window):
    size, slide = window
    plan = make_plan(
        COLUMNS,
        keys=keys,
        aggregates=ALL,
        size=size,
        slide=slide,
        delay=2000,
        where=exp.column("b"),
    )
    compare(plan, random_batches(7, 20_000, 300, 3000, 9), snapshot_at=4)


def test_gpu_equals_cpu_string_literal_filter_many_keys():
    plan = make_plan(
        COLUMNS,
        keys=("k",),
        aggregates=ALL[:7],
        size=10_000,
        slide=1000,
        where=exp.EQ(this=exp.column("s"), expression=exp.Literal.string("sym3")),
    )
    compare(plan, random_batches(3, 50_000, 5000, 0, 5))


def test_gpu_equals_cpu_count_windows():
    plan = make_plan(COLUMNS, keys=("k",), aggregates=ALL, kind="count", size=16, slide=4)
    compare(plan, random_batches(5, 5000, 20, 50, 4))


@settings(max_examples=60, **SETTINGS)
@given(streams("time"))
def test_gpu_time_windows_match_the_oracle(case):
    plan, batches, snapshot_at = case
    _check(on_gpu(plan), batches, snapshot_at)


@settings(max_examples=15, **SETTINGS)
@given(streams("count"))
def test_gpu_count_windows_match_the_oracle(case):
    plan, batches, snapshot_at = case
    _check(on_gpu(plan), batches, snapshot_at)


def pinned_source_plan(key_type: T, value_type: T) -> ph.ProjectExec:
    """SUM and COUNT(*) by key over sliding windows with disorder: the pinned-source tests'
    query, at the source's key and value types."""
    return make_plan(
        [("ts", T.TIMESTAMP), ("key", key_type), ("value", value_type)],
        keys=("key",),
        aggregates=[(F.SUM, exp.column("value")), (F.COUNT_STAR, None)],
        size=2_000,
        slide=100,
        delay=500,
    )


def test_gpu_pinned_source_batches_equal_cpu():
    """The benchmark's input path: Arrow batches that are views of pinned memory (staged with
    no host copy), 1000 keys, through the fused pass in chunks (copy of chunk c + 1 beside the
    launch of chunk c); then pageable batches with disorder (late tuples, panes behind the
    segment); the CPU engine gives the same rows."""
    import pyarrow.compute as pc

    from mangonel.runtime.local.gpu_bench import GpuShape, PinnedSource, source_batches

    options = GpuOptions(chunk_rows=9_999)  # 5 chunks per 1 MiB batch

    source = PinnedSource(300_000)
    pinned = source_batches(GpuShape(100, 1000, 0, 1 << 20), source, 300_000)
    disordered = [
        pa.RecordBatch.from_arrays(
            [
                pa.array(source.column("ts_late")[a : a + 50_000] // 50 + 23_000).cast(STAMP),
                pa.array(source.column("key1000")[a : a + 50_000]),
                pa.array(source.column("value")[a : a + 50_000]),
            ],
            names=["ts", "key", "value"],
        )
        for a in range(0, 150_000, 50_000)
    ]
    plan = pinned_source_plan(T.BIGINT, T.DOUBLE)
    assert pc.min(pinned[1].column(0)).as_py() is not None
    compare(plan, pinned + disordered, options=options)


def test_gpu_pinned_narrow_source_batches_equal_cpu():
    """The harness's 16 B/tuple source (`GpuShape(narrow=True)`): INT keys and FLOAT values
    as views of pinned memory, copied to the device at their declared widths beside the
    int64 event times, in chunks; the CPU engine gives the same rows, and the whole shape
    through the harness's own plan (`bench_plan`) too."""
    from mangonel.runtime.local.gpu_bench import GpuShape, PinnedSource, bench_plan, source_batches

    options = GpuOptions(chunk_rows=9_999)
    source = PinnedSource(300_000, narrow=True)
    shape = GpuShape(100, 1000, 0, 1 << 20, narrow=True)
    pinned = source_batches(shape, source, 300_000)
    assert pinned[0].num_rows == (1 << 20) // 16
    assert pinned[0].schema.types[1:] == [pa.int32(), pa.float32()]
    assert pinned[0].column(1).to_numpy().tolist() == source.column("key1000")[:65536].tolist()
    compare(pinned_source_plan(T.INT, T.FLOAT), pinned, options=options)
    compare(ph.with_backend(bench_plan(shape), "cpu", "test"), pinned[:2], options=options)


def test_gpu_stream_lookahead_equals_cpu():
    """`LocalQuery.stream` over a list reads one batch ahead: batch k + 1's columns are copied
    (prefetched) while batch k is merged and fired. Pinned and pageable batches, chunked copies,
    new keys and late tuples; the GPU's rows, in order, equal the CPU's batch-by-batch rows.
    Then a prefetched batch that is never processed and one processed without a prefetch."""
    from mangonel.runtime.local.gpu_bench import GpuShape, PinnedSource, source_batches

    options = GpuOptions(chunk_rows=7_777)
    source = PinnedSource(200_000, seed=3)
    pinned = source_batches(GpuShape(100, 1000, 1_000_000, 1 << 20), source, 200_000)
    pageable = [
        pa.RecordBatch.from_arrays(
            [
                pa.array(source.column("ts")[a : a + 40_000] + 100_000 * (a // 40_000 + 1)).cast(
                    STAMP
                ),
                pa.array(source.column("key1000")[a : a + 40_000] + 1000 * (a // 40_000)),
                pa.array(source.column("value")[a : a + 40_000]),
            ],
            names=["ts", "key", "value"],
        )
        for a in range(0, 160_000, 40_000)
    ]
    batches = pinned + pageable
    plan = make_plan(
        [("ts", T.TIMESTAMP), ("key", T.BIGINT), ("value", T.DOUBLE)],
        keys=("key",),
        aggregates=[
            (F.SUM, exp.column("value")),
            (F.MAX, exp.column("value")),
            (F.COUNT_STAR, None),
        ],
        size=200_000,
        slide=50_000,
        delay=300_000,
    )
    cpu = LocalQuery(plan)
    want = [row for batch in batches for row in _rows(cpu.process(batch))] + _rows(cpu.finish())
    gpu = LocalQuery(on_gpu(plan), gpu_options=options)
    got = _rows(list(gpu.stream(batches)))
    assert len(got) == len(want) > 1000
    assert rows_close(got, want)
    assert gpu.metrics.late_tuples_dropped == cpu.metrics.late_tuples_dropped > 0
    assert gpu.metrics.tuples_in == cpu.metrics.tuples_in

    # a stale prefetch (never processed) and a batch without one change nothing
    cpu, gpu = LocalQuery(plan), LocalQuery(on_gpu(plan), gpu_options=options)
    for position, batch in enumerate(batches):
        gpu.operator.prefetch(pageable[position % len(pageable)])
        if position % 3 == 0:
            gpu.operator.prefetch(batch)
        assert rows_close(_rows(gpu.process(batch)), _rows(cpu.process(batch)))
    assert rows_close(_rows(gpu.finish()), _rows(cpu.finish()))


@pytest.mark.parametrize("span", [2, 5, 8])
def test_gpu_tree_levels_per_launch(span):
    """The tree builds `span` levels per launch (a block per subtree, fewer threads than the
    subtree's lowest level in the small spans); 640 panes per window (10 levels) and every
    aggregate kind give the CPU's rows whatever the span."""
    options = GpuOptions(tree_span=span, tree_threads=max(1, 1 << (span - 2)))
    plan = make_plan(COLUMNS, keys=("k",), aggregates=ALL, size=64_000, slide=8_100, delay=3000)
    assert ph.find(plan, ph.WindowAggregateExec).panes_per_window == 640
    compare(plan, random_batches(11, 20_000, 50, 3000, 6), options=options)


FEW = [
    (F.COUNT_STAR, None),
    (F.SUM, exp.column("x")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("i")),
    (F.VAR_POP, exp.column("x")),
]


@pytest.mark.parametrize(
    ("keys", "load", "aggregates", "slide"), [(2, 0.5, FEW, 5000), (300, 1e9, ALL, 1000)]
)
def test_gpu_block_table_out_of_order(keys, load, aggregates, slide):
    """Out-of-order rows of non-uniform warps combine in the fused kernel's shared-memory
    block table (its cells handed to the launch's last block, `state_finish_block`). Few
    keys (7 state parts: 256 buckets, used for up to 128 cells; ~18 panes x 3 keys per
    batch): the table holds every cell;
    300 keys with the load limit lifted: the table overflows and cells that find no bucket go
    to the global store. Every aggregate kind (MOMENTS takes the table's cell locks) gives the
    CPU's rows, and the table was used."""
    options = GpuOptions(block_table_load=load, chunk_rows=9_000)
    plan = make_plan(
        COLUMNS, keys=("k",), aggregates=aggregates, size=20_000, slide=slide, delay=20_000
    )
    batches = random_batches(13, 60_000, keys, 15_000, 8)
    cpu, gpu = LocalQuery(plan), LocalQuery(on_gpu(plan), gpu_options=options)
    for position, batch in enumerate(batches):
        want, got = _rows(cpu.process(batch)), _rows(gpu.process(batch))
        assert rows_close(got, want), f"after batch {position}"
    assert rows_close(_rows(gpu.finish()), _rows(cpu.finish()))
    assert gpu.metrics.tuples_in == cpu.metrics.tuples_in
    assert gpu.window_operator.kernels.metrics.block_table_passes > 0


# --- numeric semantics (issue 8): the CPU cases of tests/test_numeric_semantics.py on the GPU


@pytest.mark.parametrize("sliding", [False, True])
@pytest.mark.parametrize("case", sorted(NUMERIC_CASES))
def test_gpu_numeric_semantics(case, sliding):
    check_numeric("gpu", case, sliding)


def test_gpu_nan_inf_and_int64_extremes_through_the_atomics_equal_cpu():
    """Many rows per cell, so warp, block and global atomics all combine NaN, inf and the
    int64 extremes; results must equal the CPU's bit for bit (NaN = NaN)."""
    import mangonel as mg

    rng = np.random.default_rng(8)
    rows = 50_000
    ts = np.sort(rng.integers(0, 2_000, rows))
    d = rng.normal(size=rows)
    d[rng.random(rows) < 0.01] = np.nan
    d[rng.random(rows) < 0.01] = np.inf
    b = rng.choice(np.array([-(2**63), 2**63 - 1, 0, 5], np.int64), rows)
    keys = rng.integers(0, 3, rows)
    batch = pa.record_batch(
        [
            pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(keys, pa.int64()),
            pa.array(d, pa.float64()),
            pa.array(b, pa.int64()),
        ],
        names=["ts", "k", "d", "b"],
    )
    results = {}
    for backend in ("cpu", "gpu"):
        session = mg.Session(backend=backend)
        session.execute(
            "CREATE STREAM t (ts TIMESTAMP, k BIGINT, d DOUBLE, b BIGINT) "
            "WITH (event_time = 'ts', watermark = '0 microseconds')"
        )
        query = session.sql(
            "SELECT k, window_start, MIN(d) AS lo, MAX(d) AS hi, VAR_POP(d) AS v, "
            "MIN(b) AS blo, MAX(b) AS bhi, SUM(b) AS s, AVG(b) AS a "
            "FROM t [RANGE 100 MICROSECONDS SLIDE 50 MICROSECONDS] GROUP BY k"
        )
        results[backend] = query.run([batch]).to_pylist()
    assert len(results["cpu"]) == len(results["gpu"]) > 0
    for ours, theirs in zip(results["cpu"], results["gpu"], strict=True):
        for name in ours:
            if name in ("v", "a"):  # float sums: order of combines may differ in the last bits
                a, c = ours[name], theirs[name]
                assert (math.isnan(a) and math.isnan(c)) or a == pytest.approx(c, rel=1e-9)
            else:
                assert same(ours[name], theirs[name]), (name, ours, theirs)


@pytest.mark.parametrize("window", ["RANGE 100 MICROSECONDS SLIDE 50 MICROSECONDS", "ROWS 5"])
def test_bool_and_bool_or_equal_the_cpu(window):
    """BOOL_AND/BOOL_OR (aliases included) on the GPU: the fused lift + merge (atomic min/max
    over 0/1), the tree and count windows give the CPU's results, NULL windows included."""
    import mangonel as mg

    rng = np.random.default_rng(3)
    n = 20_000
    ts = np.sort(rng.integers(0, 5_000, n))
    keys = rng.integers(0, 7, n)
    flags = pa.array(rng.random(n) < 0.9, mask=(rng.random(n) < 0.3) | (keys == 6))  # 6: NULLs
    batch = pa.record_batch(
        [
            pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(keys, pa.int64()),
            pa.array(rng.normal(0, 1, n), pa.float64()),
            flags,
        ],
        names=["ts", "k", "d", "b"],
    )
    results = {}
    for backend in ("cpu", "gpu"):
        session = mg.Session(backend=backend)
        session.execute(
            "CREATE STREAM t (ts TIMESTAMP, k BIGINT, d DOUBLE, b BOOLEAN) "
            "WITH (event_time = 'ts', watermark = '0 microseconds')"
        )
        query = session.sql(
            "SELECT k, window_start, BOOL_AND(b) AS a, BOOL_OR(b) AS o, EVERY(d > -2) AS e, "
            "ANY(d > 2.5) AS y, SOME(b AND d > 0) AS s "
            f"FROM t [{window}] GROUP BY k"
        )
        results[backend] = query.run([batch]).to_pylist()
    assert len(results["cpu"]) == len(results["gpu"]) > 0
    assert results["gpu"] == results["cpu"]
    assert any(row["a"] is None for row in results["cpu"])
