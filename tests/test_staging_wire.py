"""The host half of GPU staging, without a GPU (issue 12, items 2 and 4): chunking, the
narrowing decision, the thread-pool copy into a (here ordinary) buffer, the per-chunk base
and range; the wire format EXPLAIN prints; the generated lift reading narrow and wide chunks
(run on the host through tests/cuda_host.py's g++ shim); and the input conformer reusing the
copy pass's event-time range."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sqlglot import exp

sys.path.insert(0, str(Path(__file__).parent))
from cuda_host import host_modules  # noqa: E402
from plans import make_plan  # noqa: E402

from mangonel.catalog.catalog import Column  # noqa: E402
from mangonel.catalog.types import SqlType as T  # noqa: E402
from mangonel.compiler import codegen  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.compiler.logical import AggregateFunction as F  # noqa: E402
from mangonel.compiler.wire import describe_wire, wire_columns  # noqa: E402
from mangonel.runtime.gpu.wire import (  # noqa: E402
    INT32_MAX,
    INT32_MIN,
    MIN_TASK_ROWS,
    ChunkSource,
    CopyPool,
    chunk_bounds,
    read_chunk,
)
from mangonel.runtime.operators.conform import BatchConformer  # noqa: E402

STAMP = pa.timestamp("us", tz="UTC")


# -- chunking -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "chunk_rows", "sizes"),
    [
        (4_000_000, 1 << 20, [1_000_000] * 4),
        (1_000_000, 1 << 20, [1_000_000]),
        (1_500_000, 1_000_000, [750_000, 750_000]),
        (10, 3, [2, 3, 2, 3]),
        (7, 7, [7]),
        (0, 5, [0]),
    ],
)
def test_chunk_bounds_cover_every_row_once_in_near_equal_chunks(rows, chunk_rows, sizes):
    bounds = chunk_bounds(rows, chunk_rows)
    assert [end - first for first, end in bounds] == sizes
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(end - first <= chunk_rows for first, end in bounds)


def test_chunk_bounds_refuse_a_non_positive_size():
    with pytest.raises(ValueError, match="chunk_rows must be positive"):
        chunk_bounds(10, 0)


def test_offsets_fit_int32_exactly_to_the_boundary():
    base = 10**15
    for values, narrow in [
        ([base, base + INT32_MIN, base + INT32_MAX], True),
        ([base, base + INT32_MIN - 1], False),
        ([base, base + INT32_MAX + 1], False),
        # differences past int64 (they would wrap to offsets that seem to fit)
        ([5, np.iinfo(np.int64).min + 2], False),
        ([-5, np.iinfo(np.int64).max - 2], False),
        ([np.iinfo(np.int64).min, np.iinfo(np.int64).max], False),
    ]:
        array = np.array(values, np.int64)
        views, (wire,) = _fill(CopyPool(1), [(array, True)], 0, len(array))
        assert wire.narrow is narrow
        assert np.array_equal(read_chunk(wire, views[0].target, len(array)), array)


# -- the thread-pool copy -------------------------------------------------------------------


def _slot_sources(columns: list[tuple[np.ndarray, bool]], rows: int):
    """A slot filled with a poison byte (every byte the pass owes must be written) holding a
    region per column (8 bytes a row for an offset column, its itemsize otherwise, then 64
    spare bytes), the ChunkSources naming them, and per column (array, its region's view)."""
    regions, size = [], 0
    for array, offset in columns:
        regions.append(size)
        size += (rows * (8 if offset else array.itemsize) + 64 + 7) // 8 * 8  # regions at 8s
    slot = np.full(size, 0xA5, np.uint8)
    sources = [ChunkSource(a, region, o) for (a, o), region in zip(columns, regions, strict=True)]
    ends = [*regions[1:], size]
    views = [
        SimpleNamespace(array=a, target=slot[start:stop])
        for (a, _), start, stop in zip(columns, regions, ends, strict=True)
    ]
    return sources, slot, views


def _fill(pool: CopyPool, columns: list[tuple[np.ndarray, bool]], first: int, end: int):
    """fill_chunk into a fresh poisoned slot: (per column its array and region, the wires)."""
    sources, slot, views = _slot_sources(columns, end - first)
    return views, pool.fill_chunk(sources, slot, first, end)


@pytest.mark.parametrize("threads", [1, 4])
def test_a_chunk_whose_range_fits_travels_as_offsets_from_its_first_value(threads):
    rng = np.random.default_rng(1)
    rows = 5 * MIN_TASK_ROWS + 17  # several slices per thread pool
    ts = 1_764_000_000_000_000 + np.cumsum(rng.integers(-50, 1000, rows))
    keys = rng.integers(-(2**40), -(2**40) + 1000, rows)
    values = rng.standard_normal(rows)
    pool = CopyPool(threads)
    first, end = 1000, rows - 3
    sources, wires = _fill(pool, [(ts, True), (keys, True), (values, False)], first, end)
    n = end - first
    for source, wire, offset in zip(sources, wires, (True, True, False), strict=True):
        if offset:
            assert wire.narrow and wire.nbytes == 4 * n
            assert wire.base == int(source.array[first])  # the chunk's first value
            assert (wire.low, wire.high) == (
                int(source.array[first:end].min()),
                int(source.array[first:end].max()),
            )
            assert np.array_equal(read_chunk(wire, source.target, n), source.array[first:end])
        else:
            assert not wire.narrow and wire.nbytes == 8 * n and wire.low is None
            assert np.array_equal(source.target[: 8 * n].view(np.float64), values[first:end])
    pool.close()


@pytest.mark.parametrize(
    "kinds",
    [
        ("narrow",),  # no copied column: the copy group is padding only
        ("uint8", "float32", "int32"),  # no offset column: the narrow group is padding only
        ("narrow", "uint8", "narrow", "float64", "int16"),  # interleaved, every width
    ],
)
def test_one_pass_writes_every_column_of_every_width_in_the_callers_order(kinds):
    """fill_chunk's single pass (`fill_slot`) takes offset and copied columns as two groups;
    the wires come back in the sources' order and every byte of every target is written."""
    rng = np.random.default_rng(5)
    rows = 3 * MIN_TASK_ROWS + 11
    columns = []
    for kind in kinds:
        if kind == "narrow":
            columns.append((rng.integers(10**15, 10**15 + 10**6, rows), True))
        else:
            columns.append((rng.integers(0, 100, rows).astype(kind), False))
    first, end = 7, rows - 5
    sources, wires = _fill(CopyPool(3), columns, first, end)
    n = end - first
    for (array, offset), source, wire in zip(columns, sources, wires, strict=True):
        assert wire.narrow is offset
        if offset:
            assert np.array_equal(read_chunk(wire, source.target, n), array[first:end])
        else:
            assert wire.nbytes == n * array.itemsize
            written = source.target[: wire.nbytes].view(array.dtype)
            assert np.array_equal(written, array[first:end])


def test_an_empty_chunk_writes_nothing_and_reports_zero_bytes():
    ts = np.arange(10, dtype=np.int64)
    values = np.arange(10, dtype=np.float64)
    sources, wires = _fill(CopyPool(2), [(ts, True), (values, False)], 4, 4)
    assert [w.nbytes for w in wires] == [0, 0]
    assert all((s.target == 0xA5).all() for s in sources)


def test_the_first_value_as_base_gives_negative_offsets_when_it_is_the_maximum():
    ts = np.array([5_000_000_000, 5_000_000_000 - INT32_MAX, 5_000_000_000 - 7], np.int64)
    _, (wire,) = _fill(CopyPool(1), [(ts, True)], 0, 3)
    assert wire.narrow and wire.base == 5_000_000_000
    sources, (wire,) = _fill(CopyPool(1), [(np.append(ts, ts[1] - 1), True)], 0, 4)
    assert wire.narrow  # INT32_MIN below the base: the last offset that fits
    sources, (wire,) = _fill(CopyPool(1), [(np.append(ts, ts[1] - 2), True)], 0, 4)
    assert not wire.narrow  # one further: the offset would wrap
    assert np.array_equal(read_chunk(wire, sources[0].target, 4), sources[0].array)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_chunk_beyond_int32_offsets_travels_wide_and_exact(threads):
    rng = np.random.default_rng(2)
    rows = 4 * MIN_TASK_ROWS
    ts = np.sort(rng.integers(0, 2**62, rows))  # years of event time in one chunk
    ts[rows // 2] = np.iinfo(np.int64).min  # and the extremes of int64
    ts[rows // 3] = np.iinfo(np.int64).max
    sources, (wire,) = _fill(CopyPool(threads), [(ts, True)], 0, rows)
    assert not wire.narrow and wire.base == 0 and wire.nbytes == 8 * rows
    assert (wire.low, wire.high) == (int(ts.min()), int(ts.max()))
    assert np.array_equal(read_chunk(wire, sources[0].target, rows), ts)


def test_chunks_of_one_batch_decide_apart():
    """Each chunk has its own base and its own decision: a jump between two chunks costs
    nothing, a jump inside one widens only that chunk."""
    ts = np.concatenate(
        [np.arange(1000) + 10**12, np.arange(1000) + 2 * 10**15, [0, 10**15], np.arange(998)]
    ).astype(np.int64)
    pool = CopyPool(2)
    decisions = []
    for first, end in chunk_bounds(len(ts), 1000):
        sources, (wire,) = _fill(pool, [(ts, True)], first, end)
        decisions.append((wire.narrow, wire.base))
        assert np.array_equal(read_chunk(wire, sources[0].target, end - first), ts[first:end])
    assert decisions == [(True, 10**12), (True, 2 * 10**15), (False, 0)]


def test_a_pool_refuses_negative_threads_and_uses_every_core_for_zero():
    with pytest.raises(ValueError, match="staging threads"):
        CopyPool(-1)
    assert CopyPool(0).threads >= 1


def test_slices_are_at_least_the_minimum_task_and_cover_the_chunk():
    pool = CopyPool(16)
    assert pool.slices(0, 1000) == [(0, 1000)]  # a small chunk: one thread
    slices = pool.slices(5, 5 + 16 * MIN_TASK_ROWS + 3)
    assert len(slices) == 16 and slices[0][0] == 5 and slices[-1][1] == 5 + 16 * MIN_TASK_ROWS + 3
    assert all(end - first >= MIN_TASK_ROWS for first, end in slices)


# -- the wire format in the plan ------------------------------------------------------------


def _bench_plan(**others):
    return make_plan(
        [("ts", T.TIMESTAMP), ("key", T.BIGINT), ("value", T.DOUBLE)],
        keys=("key",),
        aggregates=[(F.SUM, exp.column("value"))],
        size=1_000_000,
        slide=10_000,
        **others,
    )


def test_the_bench_query_moves_16_bytes_per_tuple():
    lift = ph.find(_bench_plan(), ph.WindowAggregateExec).lift
    assert describe_wire(lift) == "16 B/tuple (ts int32+base, key int32+base, value float64)"
    assert [c.offset for c in wire_columns(lift)] == [True, True, False]


def test_every_type_has_its_wire_width():
    from mangonel.compiler.wire import wire_column

    widths = {t: (wire_column("c", t).bytes, wire_column("c", t).offset) for t in T}
    assert widths == {
        T.TIMESTAMP: (4, True),
        T.BIGINT: (4, True),
        T.INT: (4, False),
        T.FLOAT: (4, False),
        T.DOUBLE: (8, False),
        T.STRING: (4, False),
        T.BOOLEAN: (1, False),
    }


def test_explain_prints_the_wire_on_a_gpu_lift_only():
    from mangonel.compiler.explain import explain_json, explain_text

    plan = _bench_plan()
    assert "wire=" not in explain_text(plan)  # the CPU reads Arrow's buffers in place
    gpu = ph.with_backend(plan, "gpu", "test")
    lift_line = next(line for line in explain_text(gpu).splitlines() if "Lift:" in line)
    assert lift_line.endswith('wire="16 B/tuple (ts int32+base, key int32+base, value float64)"')
    lift = explain_json(gpu)["children"][0]["children"][0]
    assert lift["operator"] == "Lift"
    assert lift["parameters"]["wire"] == "16 B/tuple (ts int32+base, key int32+base, value float64)"


# -- the generated lift reading narrow and wide chunks (host shim) --------------------------


@pytest.fixture(scope="module")
def host_module(tmp_path_factory):
    return host_modules(tmp_path_factory.mktemp("wire_shim"))


def test_the_lift_reads_base_plus_offset_and_wide_chunks_alike(host_module):
    """The generated lift over a batch staged in three chunks (narrow, wide, narrow; NULLs in
    the key) gives the event times and SUM partials of the values themselves."""
    plan = make_plan(
        [("ts", T.TIMESTAMP), ("key", T.BIGINT), ("value", T.BIGINT)],
        keys=("key",),
        aggregates=[(F.SUM, exp.column("value"))],
        size=1000,
        slide=1000,
    )
    window = ph.find(plan, ph.WindowAggregateExec)
    generated = codegen.render_kernels(window.lift, window)
    assert [c.offset for c in generated.columns] == [True, True, True]
    lift = host_module(generated).get_function(generated.names["lift"])
    rng = np.random.default_rng(5)
    rows = 3000
    ts = 10**15 + np.arange(rows, dtype=np.int64) * 7
    ts[1500] = -(10**17)  # the second chunk spans more than int32 offsets
    keys = rng.integers(-(2**50), -(2**50) + 100, rows)
    key_valid = (rng.random(rows) > 0.1).astype(np.uint8)
    values = rng.integers(-(2**40), 2**40, rows)
    pool = CopyPool(2)
    out_ts = np.zeros(rows, np.int64)
    out_has, out_contributes = np.zeros(rows, np.uint8), np.zeros(rows, np.uint8)
    partials = {p.member: np.zeros(rows, p.numpy) for p in generated.parts}
    narrow = []
    for first, end in chunk_bounds(rows, 1000):
        n = end - first
        chunk_sources, slot, sources = _slot_sources([(a, True) for a in (ts, keys, values)], n)
        wires = pool.fill_chunk(chunk_sources, slot, first, end)
        narrow.append(wires[0].narrow)
        arguments = []
        for source, wire, valid in zip(sources, wires, (None, key_valid, None), strict=True):
            arguments += [source.target, np.int64(wire.base), np.int32(0 if wire.narrow else 1)]
            arguments.append(None if valid is None else np.ascontiguousarray(valid[first:end]))
        lift(
            (1,),
            (1,),
            (
                *arguments,
                out_ts[first:end],
                out_has[first:end],
                out_contributes[first:end],
                *[partials[p.member][first:end] for p in generated.parts],
                None,  # no key words
                np.int64(0),
                np.array([-1], np.int32),
                np.int64(n),
            ),
        )
    assert narrow == [True, False, True]
    assert np.array_equal(out_ts, ts) and out_has.all() and out_contributes.all()
    by_field = {p.field: partials[p.member] for p in generated.parts}
    sums = [by_field[f.name] for f in window.fields if f.kind.value == "sum"]
    assert any(np.array_equal(s, values) for s in sums)


# -- the conformer reuses the copy pass's range ---------------------------------------------


def _conformer() -> BatchConformer:
    columns = (Column("ts", T.TIMESTAMP), Column("v", T.DOUBLE))
    return BatchConformer(columns, "s", "ts", (-(10**12), 10**12))


def _batch(times: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(times, pa.int64()).cast(STAMP), pa.array([1.0] * len(times))], ["ts", "v"]
    )


def test_known_extremes_inside_the_range_cost_no_pass(monkeypatch):
    conformer, batch = _conformer(), _batch([5, 7, None, 9])

    def no_pass(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("min_max ran although the extremes were known")

    monkeypatch.setattr(pc, "min_max", no_pass)
    assert conformer.clip_event_time(batch, (5, 9)) == (batch, 0)


def test_known_extremes_outside_the_range_clip_as_the_conformer_does():
    conformer = _conformer()
    batch = _batch([5, 10**13, None, -(10**13), 9])
    clipped, dropped = conformer.clip_event_time(batch, (-(10**13), 10**13))
    assert dropped == 2
    assert clipped.column(0).cast(pa.int64()).to_pylist() == [5, None, None, None, 9]
    assert conformer(batch) == (clipped, 2)  # the same as measuring them itself


@pytest.mark.parametrize("rows", [0, 1, 5 * MIN_TASK_ROWS + 3])
def test_host_loops_copy_and_gather_equal_numpy(rows):
    from mangonel.runtime.gpu.host_loops import parallel_copy, parallel_gather

    rng = np.random.default_rng(rows)
    source = rng.integers(-(1 << 62), 1 << 62, rows + 7)
    assert np.array_equal(parallel_copy(source), source)
    words = rng.integers(0, 1 << 40, (rows + 3, 2))  # a strided column, as the key map holds
    slots = rng.integers(0, rows + 3, rows)
    assert np.array_equal(parallel_gather(words[:, 1], slots), words[:, 1][slots])
    assert parallel_gather(words[:, 0], slots[:0]).shape == (0,)
