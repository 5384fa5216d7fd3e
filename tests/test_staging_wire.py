"""The host half of GPU staging, without a GPU (issue 12, items 2 and 4): chunking, the
narrowing decision, the thread-pool copy into a (here ordinary) buffer, the per-chunk base
and range; the wire format EXPLAIN prints; the generated lift reading narrow and wide chunks
(run on the host through tests/cuda_host.py's g++ shim); and the input conformer reusing the
copy pass's event-time range."""

from __future__ import annotations

import ctypes
import sys
import threading
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


# -- the stager over a host stand-in for CuPy -----------------------------------------------


class _DevicePointer:
    """CuPy's MemoryPointer over a host array: `+ offset`, `copy_from_host_async`."""

    def __init__(self, buffer: np.ndarray, offset: int = 0) -> None:
        self.buffer, self.offset = buffer, offset

    def __add__(self, offset: int) -> _DevicePointer:
        return _DevicePointer(self.buffer, self.offset + offset)

    @property
    def ptr(self) -> int:
        return self.buffer.ctypes.data + self.offset

    def copy_from_host_async(self, source: int, nbytes: int, stream) -> None:  # noqa: ANN001
        import ctypes

        assert self.offset + nbytes <= self.buffer.nbytes
        ctypes.memmove(self.buffer.ctypes.data + self.offset, source, nbytes)
        stream.copied += nbytes


class _DeviceArray(np.ndarray):
    @property
    def data(self) -> _DevicePointer:  # type: ignore[override]
        return _DevicePointer(self.view(np.uint8).reshape(-1))


_HANDLES = iter(range(1, 1 << 62))  # the stand-in streams' and events' handles


class _Stream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.copied = 0
        self.ptr = next(_HANDLES)

    def wait_event(self, event) -> None:  # noqa: ANN001
        pass

    def synchronize(self) -> None:
        pass


class _Event:
    done = True

    def __init__(self, disable_timing: bool = False) -> None:
        self.ptr = next(_HANDLES)

    def record(self, stream) -> None:  # noqa: ANN001
        _RECORDED.append((self.ptr, stream.ptr))

    def synchronize(self) -> None:
        pass


# the driver calls the staging loop makes, as (call, arguments), on the stand-in: copies run
# as host memmoves, events and contexts are recorded
_RECORDED: list[tuple[int, int]] = []
_CALLS: list[tuple[str, tuple[int, ...]]] = []


def _stand_in_driver():  # noqa: ANN202
    import ctypes

    word = ctypes.c_uint64

    def set_context(context: int) -> int:
        _CALLS.append(("context", (context,)))
        return 0

    def copy(target: int, source: int, nbytes: int, stream: int) -> int:
        ctypes.memmove(target, source, nbytes)
        _CALLS.append(("copy", (target, source, nbytes, stream)))
        return 0

    def record(event: int, stream: int) -> int:
        _RECORDED.append((event, stream))
        _CALLS.append(("record", (event, stream)))
        return 0

    def synchronize(event: int) -> int:
        _CALLS.append(("synchronize", (event,)))
        return 0

    def wait(stream: int, event: int, flags: int) -> int:
        _CALLS.append(("wait", (stream, event, flags)))
        return 0

    callbacks = (
        ctypes.CFUNCTYPE(ctypes.c_int32, word)(set_context),
        ctypes.CFUNCTYPE(ctypes.c_int32, word, word, word, word)(copy),
        ctypes.CFUNCTYPE(ctypes.c_int32, word, word)(record),
        ctypes.CFUNCTYPE(ctypes.c_int32, word)(synchronize),
        ctypes.CFUNCTYPE(ctypes.c_int32, word, word, word)(wait),
    )
    return callbacks, tuple(ctypes.cast(c, ctypes.c_void_p).value for c in callbacks)


class _Cupy:
    """The part of CuPy the stager uses; "pinned" memory is a registry of host ranges."""

    uint8 = np.uint8

    def __init__(self) -> None:
        self.pinned: list[tuple[int, int]] = []
        self.pinned_allocations = 0
        self.current = _Stream()
        error = type("CUDARuntimeError", (Exception,), {})

        def attributes(address: int):  # noqa: ANN202
            for start, size in self.pinned:
                if start <= address < start + size:
                    return type("Attributes", (), {"type": 1})()
            raise error("not pinned")

        def alloc_pinned(nbytes: int) -> bytearray:
            self.pinned_allocations += 1
            memory = bytearray(nbytes)
            self.pin(np.frombuffer(memory, np.uint8))
            return memory

        from types import SimpleNamespace

        self.cuda = SimpleNamespace(
            Stream=_Stream,
            Event=_Event,
            get_current_stream=lambda: self.current,
            alloc_pinned_memory=alloc_pinned,
            runtime=SimpleNamespace(pointerGetAttributes=attributes, CUDARuntimeError=error),
        )

    def pin(self, array: np.ndarray) -> None:
        self.pinned.append((array.ctypes.data, array.nbytes))

    def empty(self, shape, dtype=np.float64) -> _DeviceArray:  # noqa: ANN001
        poisoned = np.empty(shape, dtype)
        poisoned.view(np.uint8)[...] = 0xA5  # every byte the kernels read must be copied
        return poisoned.view(_DeviceArray)

    def asarray(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)


@pytest.fixture
def host_cupy(monkeypatch):
    from mangonel.runtime.gpu import device, pinned, staging

    fake = _Cupy()
    monkeypatch.setattr(staging, "cupy", lambda: fake)
    monkeypatch.setattr(device, "cupy", lambda: fake)
    monkeypatch.setattr(pinned, "_FREE", [])  # this test's buffers only
    fake.callbacks, functions = _stand_in_driver()  # kept alive while the test runs
    monkeypatch.setattr(staging, "driver_functions", lambda: functions)
    monkeypatch.setattr(staging, "current_context", lambda: 77)
    _RECORDED.clear()
    _CALLS.clear()
    return fake


def _stager(host_cupy):  # noqa: ANN001, ANN202
    from mangonel.runtime.gpu.staging import Stager
    from mangonel.runtime.host.keys import StringDictionary

    return Stager(StringDictionary(), threads=2)


def _device_column(staged, k: int, rows: int) -> np.ndarray:
    """Column k's int64 values as the kernels read them, chunk by chunk (`read_chunk`)."""
    values = np.asarray(staged.inputs[2 * k]).view(np.uint8)
    return np.concatenate(
        [
            read_chunk(c.wires[k], values[8 * c.first : 8 * c.end], c.end - c.first)
            for c in staged.chunks
        ]
    )


def test_the_stager_copies_every_chunk_in_its_wire_form(host_cupy):
    from mangonel.compiler.codegen import InputColumn

    rng = np.random.default_rng(21)
    rows = 10_000
    ts = 1_764_000_000_000_000 + np.arange(rows) * 10 - rng.integers(0, 5000, rows)
    keys = rng.integers(0, 100, rows)
    keys[7_500:] = rng.integers(0, 2**60, rows - 7_500)  # the last chunk's keys are wide
    values = rng.standard_normal(rows)
    value_valid = rng.random(rows) > 0.3
    key_valid = rng.random(rows) > 0.2
    arrays = [
        pa.array(ts).cast(STAMP),
        pa.array(keys, mask=~key_valid),
        pa.array(values, mask=~value_valid),
    ]
    columns = (
        InputColumn("ts", T.TIMESTAMP, "long long", True),
        InputColumn("k", T.BIGINT, "long long", True),
        InputColumn("v", T.DOUBLE, "double", False),
    )
    stager = _stager(host_cupy)
    for _ in range(5):  # the pinned buffer is reused (its copies are done), not allocated
        staged = stager.stage_batch(arrays, columns, 2_500, (True, True, False))
    assert host_cupy.pinned_allocations == 1
    again = _stager(host_cupy)  # a new operator (the next Query.run) borrows the same one
    again.stage_batch(arrays, columns, 2_500, (True, True, False))
    assert host_cupy.pinned_allocations == 1
    assert [(c.first, c.end) for c in staged.chunks] == [
        (0, 2500),
        (2500, 5000),
        (5000, 7500),
        (7500, 10_000),
    ]
    assert [c.wires[0].narrow for c in staged.chunks] == [True] * 4
    assert [c.wires[1].narrow for c in staged.chunks] == [True, True, True, False]
    assert np.array_equal(_device_column(staged, 0, rows), ts)
    # NULL keys travel as one of the column's valid values (so they never widen a chunk)
    device_keys = _device_column(staged, 1, rows)
    assert np.array_equal(device_keys[key_valid], keys[key_valid])
    assert np.array_equal(np.asarray(staged.inputs[3]), key_valid.astype(np.uint8))
    assert np.array_equal(np.asarray(staged.inputs[4])[value_valid], values[value_valid])
    assert np.array_equal(np.asarray(staged.inputs[5]), value_valid.astype(np.uint8))
    assert staged.inputs[1] is None  # no NULL event times: no validity travels
    assert staged.extremes[0] == (int(ts.min()), int(ts.max()))
    assert staged.extremes[1] == (int(keys[key_valid].min()), int(keys[key_valid].max()))
    assert staged.extremes[2] is None
    assert staged.wire_bytes() == rows * (4 + 8) + 7_500 * 4 + 2_500 * 8
    # the kernel arguments of chunk 3: views at the chunk, base and wide flag per offset column
    arguments = staged.chunk_arguments(staged.chunks[3])
    assert [type(a).__name__ for a in arguments][:4] == [
        "_DeviceArray",
        "int64",
        "int32",
        "NoneType",
    ]
    assert int(arguments[1]) == int(ts[7_500]) and int(arguments[2]) == 0
    assert int(arguments[6]) == 1 and len(arguments[4]) == 8 * 2_500


def _three_columns(rows: int, seed: int):  # noqa: ANN202
    """(arrays, columns, host values) of a batch: event times, keys that turn wide in the
    last quarter, and doubles with NULLs."""
    from mangonel.compiler.codegen import InputColumn

    rng = np.random.default_rng(seed)
    ts = 1_764_000_000_000_000 + np.arange(rows) * 10 - rng.integers(0, 5000, rows)
    keys = rng.integers(0, 100, rows)
    keys[rows * 3 // 4 :] = rng.integers(0, 2**60, rows - rows * 3 // 4)
    values = rng.standard_normal(rows)
    valid = rng.random(rows) > 0.3
    arrays = [pa.array(ts).cast(STAMP), pa.array(keys), pa.array(values, mask=~valid)]
    columns = (
        InputColumn("ts", T.TIMESTAMP, "long long", True),
        InputColumn("k", T.BIGINT, "long long", True),
        InputColumn("v", T.DOUBLE, "double", False),
    )
    return arrays, columns, (ts, keys, values, valid)


def _worker_available() -> bool:
    from mangonel.runtime.gpu.host_loops import parallel_copy, threads_may_overlap

    parallel_copy(np.arange(1 << 16))  # numba picks its threading layer at the first loop
    return threads_may_overlap()


def test_a_batch_staged_by_the_copy_worker_equals_one_staged_in_the_callers_thread(host_cupy):
    """The worker's thread runs the loop (its driver calls come from there), the caller's
    `result()` gives the same wires, bytes and extremes; each chunk's event is recorded
    after its copies, and a slot is reused only after the event of the chunk before in it
    (ten chunks through three slots)."""
    import threading

    if not _worker_available():
        pytest.skip("numba's threading layer takes parallel loops from one thread only")
    rows = 10_000
    arrays, columns, (ts, keys, values, valid) = _three_columns(rows, 3)
    stager = _stager(host_cupy)
    here = stager.stage_batch(arrays, columns, 1_000, (True, True, False))
    threads = set()
    original_memmove = ctypes.memmove

    def noting_memmove(*args):  # noqa: ANN002, ANN202
        threads.add(threading.get_ident())
        return original_memmove(*args)

    _CALLS.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ctypes, "memmove", noting_memmove)
        pending = stager.stage_later(arrays, columns, 1_000, (True, True, False))
        there = pending.result()
    assert threads and threading.get_ident() not in threads
    assert [c.wires for c in there.chunks] == [c.wires for c in here.chunks]
    assert there.extremes == here.extremes
    assert np.array_equal(_device_column(there, 0, rows), ts)
    assert np.array_equal(_device_column(there, 1, rows), keys)
    assert np.array_equal(np.asarray(there.inputs[4])[valid], values[valid])
    assert [c.wires[1].narrow for c in there.chunks] == [True] * 7 + [False] * 3
    assert _CALLS[0] == ("context", (77,))
    assert _CALLS[1] == ("wait", (stager.copy_stream.ptr, pending.after.ptr, 0))
    events = [c.event.ptr for c in there.chunks]
    recorded = [args[0] for call, args in _CALLS if call == "record"]
    assert recorded == events
    waited = [args[0] for call, args in _CALLS if call == "synchronize"]
    assert waited == events[:7]  # chunk c >= 3 waits for chunk c - 3, which used its slot
    for c, event in enumerate(events):  # the chunk's three copies come before its event
        at = _CALLS.index(("record", (event, stager.copy_stream.ptr)))
        assert [call for call, _ in _CALLS[at - 3 : at]] == ["copy"] * 3
        if c >= 3:
            assert _CALLS.index(("synchronize", (events[c - 3],))) < at - 3


def test_a_failed_driver_call_raises_and_the_next_batch_stages(host_cupy, monkeypatch):
    import ctypes as c

    from mangonel.runtime.gpu import pinned, staging
    from mangonel.runtime.gpu.wire import DeviceCallError

    arrays, columns, (ts, *_) = _three_columns(4_000, 4)
    stager = _stager(host_cupy)
    failing = c.CFUNCTYPE(c.c_int32, c.c_uint64, c.c_uint64, c.c_uint64, c.c_uint64)(
        lambda *_: 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    )
    functions = staging.driver_functions()
    with monkeypatch.context() as patch:
        bad = (functions[0], c.cast(failing, c.c_void_p).value, *functions[2:])
        patch.setattr(staging, "driver_functions", lambda: bad)
        with pytest.raises(DeviceCallError, match="CUresult 700"):
            stager.stage_batch(arrays, columns, 1_000, (True, True, False))
    assert pinned.free_count() == 1  # the buffer came back
    staged = stager.stage_batch(arrays, columns, 1_000, (True, True, False))
    assert np.array_equal(_device_column(staged, 0, 4_000), ts)


def test_two_batches_of_a_stager_are_in_flight_at_most(host_cupy, monkeypatch):
    """The worker may hold the next batch and the one after; a third waits for the first
    (whose pinned buffer then goes back), and a batch whose copies this thread enqueues
    (pinned sources) waits for every batch in flight."""
    from mangonel.runtime.gpu import wire

    if not _worker_available():
        pytest.skip("numba's threading layer takes parallel loops from one thread only")
    gates = [threading.Event() for _ in range(3)]  # the worker's k-th loop waits for gate k
    calls = iter(gates)
    loop = wire.stage_chunks

    def held(*arguments):  # noqa: ANN002, ANN202
        next(calls).wait()
        return loop(*arguments)

    monkeypatch.setattr(wire, "stage_chunks", held)
    arrays, columns, (ts, *_) = _three_columns(4_000, 5)
    stager = _stager(host_cupy)
    first = stager.stage_later(arrays, columns, 1_000, (True, True, False))
    second = stager.stage_later(arrays, columns, 1_000, (True, True, False))
    assert not first.ready and not second.ready and stager._in_flight == [first, second]
    threading.Timer(0.2, gates[0].set).start()  # the first only: the second stays held
    third = stager.stage_later(arrays, columns, 1_000, (True, True, False))
    assert first._result is not None and stager._in_flight == [second, third]
    assert not second.ready
    gates[1].set()
    gates[2].set()
    pinned_rows = np.empty(4_000, np.int64)
    host_cupy.pin(pinned_rows)
    pinned_rows[:] = ts
    own = stager.stage_later(
        [pa.Array.from_buffers(STAMP, 4_000, [None, pa.py_buffer(pinned_rows)])],
        columns[:1],
        1_000,
        (True,),
    )
    assert second._result is not None and third._result is not None
    assert stager._in_flight == [own]
    assert np.array_equal(_device_column(own.result(), 0, 4_000), ts)
    assert np.array_equal(_device_column(third.result(), 0, 4_000), ts)


def test_pinned_columns_are_copied_as_they_are(host_cupy):
    from mangonel.compiler.codegen import InputColumn

    rows = 4_000
    pinned = np.empty(2 * rows, np.int64)
    host_cupy.pin(pinned)
    pinned[:rows] = 1_764_000_000_000_000 + np.arange(rows)
    pinned[rows:] = np.arange(rows) % 7
    arrays = [
        pa.Array.from_buffers(STAMP, rows, [None, pa.py_buffer(pinned[:rows])]),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(pinned[rows:])]),
    ]
    columns = (
        InputColumn("ts", T.TIMESTAMP, "long long", True),
        InputColumn("k", T.BIGINT, "long long", True),
    )
    stager = _stager(host_cupy)
    staged = stager.stage_batch(arrays, columns, 1_000, (True, True))
    assert host_cupy.pinned_allocations == 0  # no slot: nothing went through the host pass
    assert all(not w.narrow for c in staged.chunks for w in c.wires)
    assert np.array_equal(_device_column(staged, 0, rows), pinned[:rows])
    assert np.array_equal(_device_column(staged, 1, rows), pinned[rows:])
    assert staged.extremes == [None, None]  # none asked for: no pass read them
    # the event time asked for (`measured`): a parallel pass over the pinned column gives
    # what Arrow's one-thread min_max would (the range check and the firing read it)
    pinned[rows // 2] = 1_764_000_000_000_000 - 3
    measured = stager.stage_later(arrays, columns, 1_000, (True, True), False, 0).result()
    assert measured.extremes == [(pinned[rows // 2], pinned[rows - 1]), None]


def test_stage_gives_each_column_in_its_device_type(host_cupy):
    from mangonel.compiler.codegen import InputColumn

    arrays = [pa.array([1, 2, None], pa.int64()), pa.array([True, None, False])]
    columns = (
        InputColumn("a", T.BIGINT, "long long"),
        InputColumn("b", T.BOOLEAN, "unsigned char"),
    )
    inputs = _stager(host_cupy).stage(arrays, columns)
    assert np.asarray(inputs[0]).dtype == np.int64 and list(np.asarray(inputs[0])) == [1, 2, 0]
    assert list(np.asarray(inputs[1])) == [1, 1, 0]
    assert list(np.asarray(inputs[2])) == [1, 0, 0] and list(np.asarray(inputs[3])) == [1, 0, 1]


def test_stagers_share_one_pool_per_thread_count():
    from mangonel.runtime.gpu.wire import shared_pool

    assert shared_pool(3) is shared_pool(3) and shared_pool(3).threads == 3
    assert shared_pool(2) is not shared_pool(3)


class _BusyEvent:
    """A copy still in flight until synchronized."""

    def __init__(self) -> None:
        self.done = False
        self.waited = 0

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True


def test_pinned_pool_takes_an_idle_buffer_then_a_new_one_then_waits_for_the_oldest(host_cupy):
    from mangonel.runtime.gpu import pinned

    first = pinned.borrow(100)
    assert first.nbytes >= pinned.MIN_BYTES and host_cupy.pinned_allocations == 1
    pinned.give_back(first)  # nothing in flight: the next borrower takes it
    assert pinned.borrow(10) is first and host_cupy.pinned_allocations == 1
    events = []
    busy = [first] + [pinned.borrow(10) for _ in range(pinned.RING - 1)]
    for buffer in busy:  # all RING buffers still being copied out of
        events.append(_BusyEvent())
        pinned.give_back(buffer, events[-1])
    assert host_cupy.pinned_allocations == pinned.RING
    taken = pinned.borrow(10)  # RING busy: wait for the one handed back first
    assert taken is first and events[0].waited == 1 and taken.event is None
    assert host_cupy.pinned_allocations == pinned.RING
    assert pinned.borrow(2 * pinned.MIN_BYTES).nbytes >= 2 * pinned.MIN_BYTES  # none fit: new
    assert host_cupy.pinned_allocations == pinned.RING + 1


def test_pinned_pool_keeps_at_most_keep_buffers_and_waits_before_releasing(host_cupy):
    from mangonel.runtime.gpu import pinned

    buffers = [pinned.borrow(pinned.MIN_BYTES * (1 + k)) for k in range(pinned.KEEP + 2)]
    events = [_BusyEvent() for _ in buffers]
    for buffer, event in zip(buffers, events, strict=True):
        pinned.give_back(buffer, event)
    assert pinned.free_count() == pinned.KEEP
    # the two smallest went back to CuPy, each only after its copy was done
    assert [e.waited for e in events[:2]] == [1, 1]
    assert all(e.waited == 0 for e in events[2:])


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
