"""GPU benchmarks on the SPRINGALD shapes; `run_gpu_benchmarks` is what `mangonel bench
--backend gpu` and benchmarks/bench_gpu.py call.

Shapes: w = 1 s; s = 10 ms and 100 us; SUM; 1 and 1000 keys; in order and with delays uniform
in [0, 1 s); event time advancing 1 s per 100 M tuples; the source writes (ts, key, value) as
int64/int64/float64 columns into pinned host memory before the clock starts (SPRINGALD's
sources also fill pinned batches), so the run measures the engine: H2D copies on a copy
stream double-buffered against the fused lift+merge kernel, key slots on the GPU hash table,
and every fired window of every key computed on the device and brought back.

Each run measures the machine's pinned host-to-device bandwidth and reports achieved bytes/s
over it (bytes = 24 per tuple, what the copy moves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mangonel.catalog.catalog import Column, Schema, Stream
from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler import logical as lg
from mangonel.compiler import physical as ph
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.backend import GpuKeyMap, GpuPaneState, _grid

BYTES_PER_TUPLE = 24
TUPLES_PER_EVENT_SECOND = 100_000_000


@dataclass(frozen=True)
class GpuShape:
    slide_us: int
    keys: int
    delay_us: int
    batch_bytes: int
    range_us: int = 1_000_000

    @property
    def name(self) -> str:
        order = "in-order" if self.delay_us == 0 else "delay<1s"
        slide = f"{self.slide_us // 1000}ms" if self.slide_us >= 1000 else f"{self.slide_us}us"
        return (f"w=1s s={slide} keys={self.keys} SUM {order} "
                f"batch={self.batch_bytes >> 20}MiB")


def default_gpu_shapes() -> list[GpuShape]:
    return [GpuShape(slide, keys, delay, mib << 20)
            for slide in (10_000, 100) for keys in (1, 1000) for delay in (0, 1_000_000)
            for mib in (4, 32)]


def bench_plan(shape: GpuShape) -> ph.ProjectExec:
    from sqlglot import exp

    schema = Schema((Column("ts", SqlType.TIMESTAMP), Column("key", SqlType.BIGINT),
                     Column("value", SqlType.DOUBLE)))
    stream = Stream("events", schema, "ts", shape.delay_us)
    spec = lg.WindowSpec(lg.WindowKind.TIME, shape.range_us, shape.slide_us, shape.delay_us)
    aggregate = lg.Aggregate(lg.AggregateFunction.SUM, exp.column("value"), SqlType.DOUBLE)
    node = lg.WindowAggregate(lg.StreamScan(stream, schema.columns), spec,
                              (schema.columns[1],), (aggregate,))
    outputs = (lg.OutputColumn("key", exp.column("key"), SqlType.BIGINT),)
    return ph.plan(lg.Project(node, outputs), argument_types={0: SqlType.DOUBLE},
                   backend="gpu", backend_reason="benchmark")


def measure_h2d_bandwidth(nbytes: int = 256 << 20, repeats: int = 10) -> float:
    """Median bytes/s of one pinned host -> device copy of `nbytes`."""
    cp = device.cupy()
    host = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(host, np.uint8, nbytes)[:] = 1
    target = cp.empty(nbytes, cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        target.data.copy_from_host_async(host.ptr, nbytes, stream)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return nbytes / float(np.median(times))


class PinnedSource:
    """Columns generated once into pinned host memory (the benchmark's source)."""

    def __init__(self, tuples: int, seed: int = 1) -> None:
        cp = device.cupy()
        self.tuples = tuples
        self.memory = cp.cuda.alloc_pinned_memory(tuples * 8 * 5)
        view = np.frombuffer(self.memory, np.int64, tuples * 5).reshape(5, tuples)
        rng = np.random.default_rng(seed)
        index = np.arange(tuples, dtype=np.int64)
        view[0] = index * 1_000_000 // TUPLES_PER_EVENT_SECOND  # in order
        view[1] = view[0] - rng.integers(0, 1_000_000, tuples)  # delay uniform [0, 1 s)
        view[2] = rng.integers(0, 1000, tuples)
        view[3] = 0
        view.view(np.float64)[4] = rng.random(tuples)
        self.view = view

    def column(self, name: str) -> np.ndarray:
        return self.view[{"ts": 0, "ts_late": 1, "key1000": 2, "key1": 3, "value": 4}[name]]


RING = 4  # batches whose copies may be in flight ahead of the compute stream
FIRE_BYTES = 32 << 20  # the harness fires windows once per this much input (see run_shape)


def run_shape(shape: GpuShape, source: PinnedSource, tuples: int) -> dict:
    """One shape: pinned source -> ring of device buffers (copies queued up to RING batches
    ahead on a copy stream) -> key slots + fused lift/lateness/merge on the compute stream ->
    windows fired on the device, results to the host.

    Stream discipline (what made E's first version crash without CUDA_LAUNCH_BLOCKING): every
    device buffer is persistent (allocated before the clock), the copy into ring slot r waits
    for the event recorded after the last kernel that read slot r, the compute stream waits for
    the copy's event, and every other device array is allocated and used on the compute
    stream only (CuPy's pool is stream-aware, so its blocks are reused in stream order).

    Lateness is decided per batch against the watermark of the batches before it, as the
    driver does. Windows fire in groups, once per FIRE_BYTES of input and at the end (the
    driver fires after every batch): the rows are the same, only emitted later; firing per
    4 MiB batch would measure Python launch overhead (~25 launches per firing), not the GPU.
    """
    cp = device.cupy()
    plan = bench_plan(shape)
    pipeline = ph.unpack(plan)
    window = pipeline.window
    generated = codegen.render_kernels(pipeline.lift, window)
    module = codegen.load_module(generated)
    fused = module.get_function(generated.names["fused"])
    state = GpuPaneState(pipeline.lift.fields, lambda: (generated, module))
    keys = GpuKeyMap((SqlType.BIGINT,))
    ts_host = source.column("ts" if shape.delay_us == 0 else "ts_late")
    key_host = source.column("key1" if shape.keys == 1 else "key1000")
    value_host = source.column("value")
    rows = shape.batch_bytes // BYTES_PER_TUPLE
    batches = tuples // rows
    fire_every = max(1, FIRE_BYTES // shape.batch_bytes)
    copy_stream = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.Stream(non_blocking=True)
    # the key buffer holds the hash table's words: the key, then its NULL mask (all zero)
    buffers = [[cp.empty(rows, cp.int64), cp.zeros(2 * rows, cp.int64),
                cp.empty(rows, cp.float64)] for _ in range(RING)]
    copied = [cp.cuda.Event(disable_timing=True) for _ in range(RING)]
    consumed: list = [None] * RING
    status_init = cp.asarray(np.array([0, np.iinfo(np.int64).min, 0], np.int64))
    status = cp.zeros(3, cp.int64)
    status_host = cp.cuda.alloc_pinned_memory(24)
    status_view = np.frombuffer(status_host, np.int64, 3)
    literal_ids = cp.full(1, -1, cp.int32)
    p, ps, pw = window.pane_length, window.panes_per_slide, window.panes_per_window
    first_ts = int(ts_host[0])
    watermark = None
    next_window = (first_ts - shape.delay_us - shape.range_us) // shape.slide_us
    windows_fired = rows_out = late = 0
    checksum = 0.0

    def enqueue_copy(b: int) -> None:
        slot = b % RING
        if consumed[slot] is not None:
            copy_stream.wait_event(consumed[slot])
        a = b * rows
        for target, host in zip(buffers[slot], (ts_host, key_host, value_host), strict=True):
            target.data.copy_from_host_async(host[a:a + rows].ctypes.data, rows * 8, copy_stream)
        copied[slot].record(copy_stream)

    def fire(last_window: int) -> None:
        nonlocal next_window, windows_fired, rows_out, checksum
        if last_window < next_window:
            return
        count = last_window - next_window + 1
        values = state.windows(keys.n_slots, [(next_window * ps, count)], ps, pw,
                               window.windows_per_batch)
        counts = cp.asnumpy(values["rows"][0], stream=compute)
        sums = cp.asnumpy(values[pipeline.lift.fields[1].name][0], stream=compute)
        emitted = counts > 0
        rows_out += int(emitted.sum())
        checksum += float(sums[emitted].sum())  # the values reach the host, as output does
        windows_fired += count
        next_window = last_window + 1

    with compute:
        # state covers the delay, one window and the whole run's panes: no reshape on the clock
        # (key capacity from the shape: sizing, not data; the loop still grows it if needed)
        first_pane = (first_ts - shape.delay_us - shape.range_us) // p - pw
        last_pane = (int(ts_host[batches * rows - 1]) + shape.delay_us) // p + pw
        state.reshape(max(16, 1 << (shape.keys - 1).bit_length()), last_pane - first_pane + 1,
                      first_pane)
    for b in range(min(RING - 1, batches)):
        enqueue_copy(b)
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for b in range(batches):
        if b + RING - 1 < batches:
            enqueue_copy(b + RING - 1)
        slot = b % RING
        with compute:
            compute.wait_event(copied[slot])
            ts_d, key_d, value_d = buffers[slot]
            slots = keys.map_words(key_d, rows, None)
            if state.key_capacity < keys.n_slots:
                state.reshape(1 << (keys.n_slots - 1).bit_length(), state.pane_capacity,
                              state.origin)
            status[...] = status_init
            fused((_grid(rows) // 4 + 1,), (256,),
                  (ts_d, None, key_d, None, value_d, None, slots,
                   *state.struct_args(), literal_ids, np.int64(rows),
                   np.int64(state.pane_capacity), np.int64(state.origin),
                   np.int64(np.iinfo(np.int64).min if watermark is None else watermark),
                   status))
            event = cp.cuda.Event(disable_timing=True)
            event.record(compute)
            consumed[slot] = event
            status.data.copy_to_host_async(status_host.ptr, 24, compute)
            compute.synchronize()
            late += int(status_view[0])
            candidate = int(status_view[1]) - shape.delay_us
            watermark = candidate if watermark is None else max(watermark, candidate)
            if (b + 1) % fire_every == 0 or b + 1 == batches:
                fire((watermark - shape.range_us) // shape.slide_us)
    compute.synchronize()
    seconds = time.perf_counter() - start
    processed = batches * rows
    return {
        "shape": shape.name, "backend": "gpu", "tuples": processed, "seconds": seconds,
        "tuples_per_second": processed / seconds, "rows_out": rows_out,
        "windows_fired": windows_fired, "late": late, "bytes_per_tuple": BYTES_PER_TUPLE,
        "strategy": window.strategy, "checksum": checksum, "fire_every_batches": fire_every,
    }


def run_gpu_benchmarks(shapes: list[GpuShape] | None = None, *, tuples: int = 150_000_000,
                       verbose: bool = True) -> list[dict]:
    """Run the shapes; every row carries the measured H2D bandwidth and the ratio to it."""
    cp = device.cupy()
    bandwidth = measure_h2d_bandwidth()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    if verbose:
        print(f"device: {name}; pinned H2D bandwidth {bandwidth / 1e9:.1f} GB/s "
              f"(bound {bandwidth / BYTES_PER_TUPLE / 1e9:.2f} G tuples/s at "
              f"{BYTES_PER_TUPLE} B/tuple)")
    source = PinnedSource(tuples)
    shapes = shapes or default_gpu_shapes()
    # warm-up (not reported): module load, first cudaMalloc of the pool, first table growth
    warm = shapes[0]
    run_shape(warm, source, min(tuples, 16 * (warm.batch_bytes // BYTES_PER_TUPLE)))
    results = []
    for shape in shapes:
        row = run_shape(shape, source, tuples)
        row["device"] = name
        row["h2d_bytes_per_second"] = bandwidth
        row["pcie_ratio"] = row["tuples_per_second"] * BYTES_PER_TUPLE / bandwidth
        results.append(row)
        if verbose:
            print(f"{row['shape']:<48} {row['tuples_per_second'] / 1e6:9.1f} M tuples/s  "
                  f"{100 * row['pcie_ratio']:5.1f}% of H2D  rows_out={row['rows_out']} "
                  f"late={row['late']}", flush=True)
    return results
