"""Hot keys on the GPU against the CPU backend (run with `pytest -m gpu` on a GPU host).

The device merge combines the rows of one (key, pane) cell in the warp (`state_reduce_peers`),
folds whole-warp totals into a per-block carry and keeps out-of-order cells in a per-block
shared-memory table (`state.cu.j2`): one key and two keys, in order and out of order, large
batches (many blocks, many grid-stride rounds per block, cells that change mid-round), every
incremental aggregate kind, every block-table mode; then the results the finalize computes
from that state: NULL results (windows whose values are all NULL), empty windows (no row),
NaN and infinities, BIGINT sums that wrap. Results equal the CPU's rows (floats within the
tolerance `oracle.rows_close` uses: the combine order differs; MIN/MAX, counts and integer
sums exactly).
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

COLUMNS = [
    ("ts", T.TIMESTAMP),
    ("k", T.BIGINT),
    ("x", T.DOUBLE),
    ("i", T.BIGINT),
    ("j", T.BIGINT),
    ("b", T.BOOLEAN),
]
STAMP = pa.timestamp("us", tz="UTC")
# every incremental aggregate kind: COUNT, SUM (double and wrapping BIGINT), MIN/MAX (double
# with NaN, BIGINT extremes, TIMESTAMP), MOMENTS (all four forms), AVG, BOOL_AND/BOOL_OR
EVERY_KIND = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.AVG, exp.column("x")),
    (F.AVG, exp.column("j")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("x")),
    (F.MIN, exp.column("i")),
    (F.MAX, exp.column("i")),
    (F.MIN, exp.column("ts")),
    (F.VAR_POP, exp.column("x")),
    (F.VAR_SAMP, exp.column("x")),
    (F.STDDEV_POP, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("j")),
    (F.BOOL_AND, exp.column("b")),
    (F.BOOL_OR, exp.column("b")),
]
SHAPES = ["1 key", "2 keys", "1 key out of order", "2 keys out of order"]


def hot_batches(shape: str, rows: int, batches: int, seed: int) -> list[pa.RecordBatch]:
    """`rows` rows over 1 or 2 keys, 100 per microsecond of event time (a 1000-us pane holds
    100,000 rows: whole warps and blocks hit one cell); out of order: each row up to 2000 us
    late. Values: NULLs, NaN, +-inf, BIGINT extremes (sums wrap; AVG and STDDEV read `j`,
    without them), and a stretch where every x is NULL (NULL SUM/MIN/STDDEV, COUNT 0)."""
    rng = np.random.default_rng(seed)
    ts = np.arange(rows, dtype=np.int64) // 100
    if "out of order" in shape:
        ts = ts + rng.integers(0, 2000, rows)
    keys = 2 if shape.startswith("2") else 1
    k = rng.integers(0, keys, rows) if "out of order" in shape else np.arange(rows) % keys
    x = rng.normal(1e3, 50, rows)
    x[rng.random(rows) < 0.001] = np.nan
    x[rng.random(rows) < 0.001] = np.inf
    x_null = rng.random(rows) < 0.1
    x_null[(ts >= 4000) & (ts < 6000)] = True  # windows with no non-NULL x
    i = rng.integers(-(10**6), 10**6, rows)
    i[rng.random(rows) < 0.001] = 2**63 - 1
    i[rng.random(rows) < 0.001] = -(2**63)
    j = rng.integers(-(10**6), 10**6, rows)
    table = pa.table(
        {
            "ts": pa.array(ts).cast(STAMP),
            "k": pa.array(k.astype(np.int64)),
            "x": pa.array(x, mask=x_null),
            "i": pa.array(i, mask=rng.random(rows) < 0.05),
            # AVG and STDDEV read BIGINT as doubles: with the int64 extremes of `i` their sums
            # cancel catastrophically and any combine order gives another answer; `j` keeps
            # the NULLs and the range without the extremes
            "j": pa.array(j, mask=rng.random(rows) < 0.05),
            "b": pa.array(rng.random(rows) < 0.999, mask=rng.random(rows) < 0.05),
        }
    )
    cuts = np.linspace(0, rows, batches + 1).astype(int)
    return [
        table.slice(a, b - a).combine_chunks().to_batches()[0]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]


def compare(
    plan: ph.ProjectExec, batches, options: GpuOptions, rel: float = 1e-9, rows: list | None = None
) -> int:
    """The GPU's rows equal the CPU's (floats within `rel`) after every batch and at the end;
    the row count. `rows`: the GPU's rows are appended to it."""
    cpu = LocalQuery(plan)
    gpu = LocalQuery(ph.with_backend(plan, "gpu", "test"), gpu_options=options)
    total = 0
    for position, batch in enumerate(batches):
        want, got = _rows(cpu.process(batch)), _rows(gpu.process(batch))
        assert rows_close(got, want, rel), f"after batch {position}:\n{got[:5]}\n!=\n{want[:5]}"
        total += len(want)
        if rows is not None:
            rows += got
    want, got = _rows(cpu.finish()), _rows(gpu.finish())
    assert rows_close(got, want, rel)
    if rows is not None:
        rows += got
    assert gpu.metrics.late_tuples_dropped == cpu.metrics.late_tuples_dropped
    return total + len(want)


@pytest.mark.parametrize("block_table", ["auto", "on", "off"])
@pytest.mark.parametrize("shape", SHAPES)
def test_hot_keys_every_kind_equal_cpu(shape, block_table):
    plan = make_plan(COLUMNS, keys=("k",), aggregates=EVERY_KIND, size=3000, slide=1000, delay=2500)
    options = GpuOptions(block_table=block_table, chunk_rows=300_000)
    rows = compare(plan, hot_batches(shape, 1_200_000, 4, seed=len(shape)), options)
    assert rows > 10


@pytest.mark.parametrize("threads", [32, 512])
def test_hot_key_block_geometry_equal_cpu(threads):
    """One warp per block (no block combine to speak of) and 16 warps per block (the most
    `GpuOptions` allows: the carry folds 16 warp totals per round) give the CPU's rows."""
    plan = make_plan(COLUMNS, keys=("k",), aggregates=EVERY_KIND, size=2000, slide=500, delay=2500)
    options = GpuOptions(threads=threads, block_table="on")
    compare(plan, hot_batches("1 key out of order", 600_000, 3, seed=threads), options)


def test_hot_key_without_group_by_equal_cpu():
    """No GROUP BY: every row is the one key; tumbling windows, one batch (the split path's
    merge kernel takes the whole first batch)."""
    plan = make_plan(COLUMNS, aggregates=EVERY_KIND, size=1000, slide=1000, delay=0)
    compare(plan, hot_batches("1 key", 800_000, 1, seed=3), GpuOptions())


def finalize_batch() -> pa.RecordBatch:
    """One hot key, tumbling 1000-us windows: [0, 1000) every x NULL; [5000, 6000) 100,000
    values of 2.0 and one NaN; [9000, 10000) 100,000 x = +inf; [12000, 13000) one value
    (sample variance NULL); nothing in between (empty windows: no row). BIGINT values of 2^62
    (sums wrap past 2^63)."""
    ts = np.concatenate(
        [
            np.arange(100_000) // 100,
            5_000 + np.arange(100_000) // 100,
            9_000 + np.arange(100_000) // 100,
            [12_500],
        ]
    )
    rows = len(ts)
    x = np.full(rows, 2.0)
    x[150_000] = np.nan
    x[200_000:300_000] = np.inf
    x[-1] = 3.0
    x_null = np.zeros(rows, bool)
    x_null[:100_000] = True
    return pa.record_batch(
        [
            pa.array(ts).cast(STAMP),
            pa.array(np.zeros(rows, np.int64)),
            pa.array(x, mask=x_null),
            pa.array(np.full(rows, 2**62, np.int64)),
            pa.array(np.full(rows, 7, np.int64)),
            pa.array(np.ones(rows, bool), mask=x_null),
        ],
        names=[name for name, _ in COLUMNS],
    )


def test_finalize_null_empty_nan_and_wrapping_equal_cpu():
    """The results finalized from hot cells: NULL SUM/AVG/MIN/MAX/VAR/BOOL where every x is
    NULL (COUNT(x) 0, COUNT(*) not), NaN variances where a value is NaN or infinite, NULL
    sample variance of one value, no row for empty windows, wrapped BIGINT sums."""
    plan = make_plan(COLUMNS, keys=("k",), aggregates=EVERY_KIND, size=1000, slide=1000)
    batch = finalize_batch()
    results = {}
    for backend in ("cpu", "gpu"):
        query = LocalQuery(ph.with_backend(plan, backend, "test"))
        results[backend] = _rows(query.process(batch)) + _rows(query.finish())
    want = results["cpu"]
    assert rows_close(results["gpu"], want)
    # the shapes this test is about are in the CPU's rows (4 windows hold rows, 9 are empty)
    assert len(want) == 4
    # columns: k, window start, end, then EVERY_KIND in order
    nulls, nan, inf, one = (list(row.values()) for row in want)
    assert (nulls[3], nulls[4], nulls[5], nulls[19]) == (100_000, 0, None, None)
    assert nan[14] != nan[14] and inf[14] != inf[14]  # VAR_POP(x): NaN
    assert (one[15], one[17]) == (None, None)  # VAR_SAMP(x), STDDEV_SAMP(x) of one value
    assert (nan[6], one[6]) == (0, 2**62)  # SUM(i): 100,000 x 2^62 wraps to 0


def test_output_heavy_sliding_windows_equal_cpu():
    """The output-heavy shape scaled down (w = 20 ms, s = 100 us: 200 panes per window, 300
    keys, every batch fires ~50 windows x 300 keys): the tree kept across firings (only the
    batch's panes rebuilt), the device finalize and the packed copy through the reused
    pinned buffer give the CPU's rows, batch by batch; a late stretch of rows re-merges into
    panes of windows not yet fired (their nodes rebuilt)."""
    rng = np.random.default_rng(12)
    batches = []
    for b in range(8):
        rows = 200_000
        ts = b * 5_000 + np.sort(rng.integers(0, 5_000, rows))
        if b % 3 == 2:
            ts[: rows // 10] -= rng.integers(0, 4_000, rows // 10)  # within the delay
        batches.append(
            pa.record_batch(
                [
                    pa.array(ts).cast(STAMP),
                    pa.array(rng.integers(0, 300, rows)),
                    pa.array(rng.normal(0, 1, rows), mask=rng.random(rows) < 0.02),
                    pa.array(rng.integers(-100, 100, rows)),
                    pa.array(rng.integers(-100, 100, rows)),
                    pa.array(rng.random(rows) < 0.5),
                ],
                names=[name for name, _ in COLUMNS],
            )
        )
    plan = make_plan(
        COLUMNS,
        keys=("k",),
        aggregates=[
            (F.COUNT_STAR, None),
            (F.SUM, exp.column("x")),
            (F.AVG, exp.column("x")),
            (F.MIN, exp.column("i")),
            (F.MAX, exp.column("x")),
            (F.STDDEV_SAMP, exp.column("x")),
        ],
        size=20_000,
        slide=100,
        delay=5_000,
    )
    gpu_plan = ph.with_backend(plan, "gpu", "test")
    assert ph.placement(ph.find(gpu_plan, ph.WindowAggregateExec), "finalize").backend == "gpu"
    rows = compare(plan, batches, GpuOptions())
    assert rows > 100_000


# MOMENTS merged lock-free (shifted power sums, `mg_moments_add` in prelude.cu.j2) in the
# shapes of issue 12 item 3: a hot key, and 1000 keys (a few rows per cell per warp: the global
# atomics), next to the other aggregates of "all six"
MOMENTS_QUERY = [
    (F.COUNT_STAR, None),
    (F.SUM, exp.column("x")),
    (F.AVG, exp.column("x")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("x")),
    (F.VAR_POP, exp.column("x")),
    (F.STDDEV_POP, exp.column("j")),
    (F.VAR_SAMP, exp.column("j")),
]


def moments_batches(shape: str, data: str, rows: int, batches: int, seed: int) -> list:
    """`rows` rows, 100 per microsecond of event time, over 1 or 1000 keys (out of order: up
    to 2000 us late). x: "offset" is 1e9 + U(0, 1) (sums of squares keep no digit of the
    variance there); "signs" mixes signs and exact zero means with NaN and +-inf. NULLs."""
    rng = np.random.default_rng(seed)
    ts = np.arange(rows, dtype=np.int64) // 100
    if "out of order" in shape:
        ts = ts + rng.integers(0, 2000, rows)
    k = rng.integers(0, 1000, rows) if shape.startswith("1000") else np.zeros(rows, np.int64)
    if data == "offset":
        x = 1e9 + rng.random(rows)
    else:
        x = rng.choice([-2.5, -1.0, 0.0, 1.0, 2.5], rows)
        x[rng.random(rows) < 0.0005] = np.nan
        x[rng.random(rows) < 0.0005] = np.inf
        x[rng.random(rows) < 0.0005] = -np.inf
    table = pa.table(
        {
            "ts": pa.array(ts).cast(STAMP),
            "k": pa.array(k.astype(np.int64)),
            "x": pa.array(x, mask=rng.random(rows) < 0.05),
            "i": pa.array(rng.integers(-100, 100, rows)),
            "j": pa.array(rng.integers(-(10**6), 10**6, rows), mask=rng.random(rows) < 0.05),
            "b": pa.array(rng.random(rows) < 0.5),
        }
    )
    cuts = np.linspace(0, rows, batches + 1).astype(int)
    return [
        table.slice(a, b - a).combine_chunks().to_batches()[0]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]


@pytest.mark.parametrize("block_table", ["auto", "on", "off"])
@pytest.mark.parametrize("data", ["offset", "signs"])
@pytest.mark.parametrize("shape", ["1 key", "1000 keys", "1000 keys out of order"])
def test_moments_hot_and_1000_keys_equal_cpu(shape, data, block_table):
    """STDDEV/VARIANCE with the other aggregates: the GPU's rows equal the CPU's. At a 1e9
    offset both backends' (n, mean, m2) cells carry the mean's rounding (ulp(1e9) ~ 1e-7 over
    a spread of 1; the CPU's variances are 1e-8 to 2e-7 from a two-pass evaluation there):
    the rows agree within 1e-5, and every variance is U(0, 1)'s 1/12 (the naive sums would be
    off by ~100)."""
    plan = make_plan(
        COLUMNS, keys=("k",), aggregates=MOMENTS_QUERY, size=3000, slide=1000, delay=2500
    )
    options = GpuOptions(block_table=block_table, chunk_rows=300_000)
    batches = moments_batches(shape, data, 1_200_000, 4, seed=len(shape) + len(data))
    got: list = []
    rows = compare(plan, batches, options, rel=1e-5 if data == "offset" else 1e-9, rows=got)
    assert rows > 10
    if data == "offset":
        # columns: k, window start, end, then MOMENTS_QUERY in order
        checked = 0
        for row in got:
            values = list(row.values())
            # COUNT(*), VAR_POP(x): 250 values of U(0, 1) give 1/12 +- 0.005 (one sigma)
            if values[3] >= 250 and values[9] is not None:
                assert abs(values[9] - 1 / 12) < 0.04, values
                checked += 1
        assert checked > 10
