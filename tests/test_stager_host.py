"""The GPU stager (`runtime/gpu/staging.py`) and the pinned-buffer pool without a GPU (issue 12,
items 2 and 4): CuPy replaced by a host stand-in whose "device" arrays are host arrays and whose
"pinned" memory is a registry of host ranges, and the CUDA driver calls of the staging loop by
ctypes callbacks that run copies as memmoves; the copy worker, chunk events, slot reuse, pinned
sources copied as they are (and their event times measured), failures and in-flight limits."""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mangonel.catalog.types import SqlType as T  # noqa: E402
from mangonel.runtime.gpu.wire import read_chunk  # noqa: E402

STAMP = pa.timestamp("us", tz="UTC")


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

    def copy_to_host_async(self, target: int, nbytes: int, stream) -> None:  # noqa: ANN001
        import ctypes

        assert self.offset + nbytes <= self.buffer.nbytes
        ctypes.memmove(target, self.buffer.ctypes.data + self.offset, nbytes)


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

    def __enter__(self) -> _Stream:  # CuPy's: the current stream inside the block
        return self

    def __exit__(self, *exception) -> None:  # noqa: ANN002
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
    int64 = np.int64

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


def _stager(host_cupy, module_of=None):  # noqa: ANN001, ANN202
    from mangonel.runtime.gpu.staging import Stager
    from mangonel.runtime.host.keys import StringDictionary

    return Stager(StringDictionary(), threads=2, module_of=module_of)


@pytest.fixture(scope="module")
def host_module(tmp_path_factory):  # noqa: ANN001, ANN201
    """`CompileContext.module` on the host: the generated kernels built by g++ over the shim."""
    from cuda_host import host_modules

    return host_modules(tmp_path_factory.mktemp("extremes_shim"))


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


def test_a_stagers_batches_in_flight_are_bounded(host_cupy, monkeypatch):
    """The worker may hold IN_FLIGHT batches (the one processed and those a runner names
    ahead of it); one more waits for the first (whose pinned buffer then goes back), and a
    batch whose copies this thread enqueues (pinned sources) waits for every batch in
    flight."""
    from mangonel.runtime.gpu import wire
    from mangonel.runtime.gpu.staging import IN_FLIGHT

    if not _worker_available():
        pytest.skip("numba's threading layer takes parallel loops from one thread only")
    gates = [threading.Event() for _ in range(IN_FLIGHT + 1)]  # the k-th loop waits for gate k
    calls = iter(gates)
    loop = wire.stage_chunks

    def held(*arguments):  # noqa: ANN002, ANN202
        next(calls).wait()
        return loop(*arguments)

    monkeypatch.setattr(wire, "stage_chunks", held)
    arrays, columns, (ts, *_) = _three_columns(4_000, 5)
    stager = _stager(host_cupy)
    first, *rest = [
        stager.stage_later(arrays, columns, 1_000, (True, True, False)) for _ in range(IN_FLIGHT)
    ]
    assert IN_FLIGHT == 3 and stager._in_flight == [first, *rest]
    assert not first.ready and not any(later.ready for later in rest)
    threading.Timer(0.2, gates[0].set).start()  # the first only: the others stay held
    extra = stager.stage_later(arrays, columns, 1_000, (True, True, False))
    assert first._result is not None and stager._in_flight == [*rest, extra]
    assert not rest[0].ready
    for gate in gates[1:]:
        gate.set()
    pinned_rows = np.empty(4_000, np.int64)
    host_cupy.pin(pinned_rows)
    pinned_rows[:] = ts
    own = stager.stage_later(
        [pa.Array.from_buffers(STAMP, 4_000, [None, pa.py_buffer(pinned_rows)])],
        columns[:1],
        1_000,
        (True,),
    )
    assert all(later._result is not None for later in [*rest, extra])
    assert stager._in_flight == [own]
    assert np.array_equal(_device_column(own.result(), 0, 4_000), ts)
    assert np.array_equal(_device_column(extra.result(), 0, 4_000), ts)


def test_pinned_columns_are_copied_as_they_are(host_cupy, host_module, monkeypatch):
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
    launches = []

    def counted(generated, options=()):  # noqa: ANN001, ANN202
        module = host_module(generated)
        return SimpleNamespace(get_function=lambda name: _counted(module, name, launches))

    stager = _stager(host_cupy, counted)
    staged = stager.stage_batch(arrays, columns, 1_000, (True, True))
    assert host_cupy.pinned_allocations == 0  # no slot: nothing went through the host pass
    assert all(not w.narrow for c in staged.chunks for w in c.wires)
    assert np.array_equal(_device_column(staged, 0, rows), pinned[:rows])
    assert np.array_equal(_device_column(staged, 1, rows), pinned[rows:])
    assert staged.extremes == [None, None]  # none asked for: nothing read them
    assert not launches
    # the event time asked for (`measured`): the device reduces the copied column (the
    # generated kernels, `extremes.cu.j2`) and its (min, max) come back through a pinned
    # slot, what Arrow's min_max would give (the range check and the firing read it); slots
    # and device words are reused, each batch reads its own
    monkeypatch.setattr(_Event, "done", False)  # the device still busy: nothing ready
    for smallest in (1_764_000_000_000_000 - 3, 1_764_000_000_000_000 - 9):
        pinned[rows // 2] = smallest
        pending = [
            stager.stage_later(arrays, columns, 1_000, (True, True), True, 0) for _ in range(2)
        ]
        assert stager._in_flight == pending  # pinned batches need not wait for each other
        measured = [batch.result() for batch in pending]
        assert [m.extremes for m in measured] == [[(smallest, pinned[rows - 1]), None]] * 2
    assert len(launches) == 8 and host_cupy.pinned_allocations == 1
    # ranges of every length the parts cut: a column shorter than the parts, one row, the
    # extremes at either end
    for length in (1, 3, 255, 257, 1_000):
        column = pinned[:length].copy()
        column[-1] = -(2**63)
        column[0] = 2**63 - 1
        found = stager._measure_on_device(column.view(_DeviceArray)).result()
        want = (-(2**63), 2**63 - 1) if length > 1 else (2**63 - 1, 2**63 - 1)
        assert found == want, length


def _counted(module, name: str, launches: list):  # noqa: ANN001, ANN202
    """A host kernel whose launches are recorded."""
    function = module.get_function(name)

    def launch(grid, block, arguments) -> None:  # noqa: ANN001
        launches.append(name)
        function(grid, block, arguments)

    return launch


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
