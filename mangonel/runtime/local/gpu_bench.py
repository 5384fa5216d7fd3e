"""GPU benchmarks on the SPRINGALD shapes; `run_gpu_benchmarks` is what `mangonel bench
--backend gpu` and benchmarks/bench_gpu.py call.

Shapes: w = 1 s; s = 10 ms and 100 us; SUM; 1 and 1000 keys; in order and with delays uniform
in [0, 1 s); event time advancing 1 s per 100 M tuples; the source writes (ts, key, value) as
int64/int64/float64 columns into pinned host memory before the clock starts (SPRINGALD's
sources also fill pinned batches) and hands the engine Arrow batches that are views of it.

What is timed is the engine a user runs: `LocalQuery` over the plan, the backend-neutral window
driver, `GpuKernels` (per batch: staged H2D copy straight from the pinned buffers, one fused
lift + key probe + lateness + merge launch, one pinned status read; then the watermark update
and the firing of every closed window: tree levels and window compute on the device, results
to the host, finalized and projected into Arrow). Windows fire after every batch, as in the
engine; there is no separate loop.

Each run measures the machine's pinned host-to-device bandwidth and reports achieved bytes/s
over it (bytes = 24 per tuple, what the copy moves; 16 for a `narrow` shape, whose source
declares the key INT and the value FLOAT: the columns cross at their declared widths, 8 + 4
+ 4 bytes, issue 12's "pinned source, 16 B/tuple").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.catalog import Column, Schema, Stream
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler import physical as ph
from mangonel.runtime.gpu import device
from mangonel.runtime.local.query import LocalQuery

BYTES_PER_TUPLE = 24
NARROW_BYTES_PER_TUPLE = 16  # ts int64, key int32 (INT), value float32 (FLOAT)
TUPLES_PER_EVENT_SECOND = 100_000_000


@dataclass(frozen=True)
class GpuShape:
    slide_us: int
    keys: int
    delay_us: int
    batch_bytes: int
    range_us: int = 1_000_000
    narrow: bool = False  # key INT, value FLOAT: 16 bytes a tuple at the source, not 24

    @property
    def bytes_per_tuple(self) -> int:
        return NARROW_BYTES_PER_TUPLE if self.narrow else BYTES_PER_TUPLE

    @property
    def name(self) -> str:
        order = "in-order" if self.delay_us == 0 else "delay<1s"
        slide = f"{self.slide_us // 1000}ms" if self.slide_us >= 1000 else f"{self.slide_us}us"
        width = " 16B/tuple" if self.narrow else ""
        return (
            f"w=1s s={slide} keys={self.keys} SUM {order} batch={self.batch_bytes >> 20}MiB{width}"
        )


def default_gpu_shapes() -> list[GpuShape]:
    return [
        GpuShape(slide, keys, delay, mib << 20)
        for slide in (10_000, 100)
        for keys in (1, 1000)
        for delay in (0, 1_000_000)
        for mib in (4, 32)
    ]


def bench_plan(shape: GpuShape) -> ph.ProjectExec:
    from sqlglot import exp

    key_type = SqlType.INT if shape.narrow else SqlType.BIGINT
    value_type = SqlType.FLOAT if shape.narrow else SqlType.DOUBLE
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("key", key_type),
            Column("value", value_type),
        )
    )
    stream = Stream("events", schema, "ts", shape.delay_us)
    spec = lg.WindowSpec(lg.WindowKind.TIME, shape.range_us, shape.slide_us, shape.delay_us)
    # SUM of a FLOAT is a DOUBLE (Spark's rule, the binder's)
    aggregate = lg.Aggregate(lg.AggregateFunction.SUM, exp.column("value"), SqlType.DOUBLE)
    node = lg.WindowAggregate(
        lg.StreamScan(stream, schema.columns), spec, (schema.columns[1],), (aggregate,)
    )
    outputs = (lg.OutputColumn("key", exp.column("key"), key_type),)
    return ph.plan(
        lg.Project(node, outputs),
        argument_types={0: value_type},
        backend="gpu",
        backend_reason="benchmark",
    )


def device_name() -> str:
    """The GPU's name as the driver reports it (device 0)."""
    name = device.cupy().cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else name


def measure_h2d_bandwidth(nbytes: int = 256 << 20, repeats: int = 10) -> float:
    """Median bytes/s of one pinned host -> device copy of `nbytes`."""
    return _measure_pinned_copy(nbytes, repeats, to_device=True)


def measure_d2h_bandwidth(nbytes: int = 256 << 20, repeats: int = 10) -> float:
    """Median bytes/s of one device -> pinned host copy of `nbytes` (the bound of results
    coming back)."""
    return _measure_pinned_copy(nbytes, repeats, to_device=False)


def _measure_pinned_copy(nbytes: int, repeats: int, to_device: bool) -> float:
    cp = device.cupy()
    host = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(host, np.uint8, nbytes)[:] = 1
    target = cp.ones(nbytes, cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        if to_device:
            target.data.copy_from_host_async(host.ptr, nbytes, stream)
        else:
            target.data.copy_to_host_async(host.ptr, nbytes, stream)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return nbytes / float(np.median(times))


def staging_sources(chunk_rows: int, chunks: int) -> tuple[list, int]:
    """The staging pass's bench input: (ts, key, value) int64/int64/float64 columns of
    `chunks` chunks of `chunk_rows` in ordinary memory as `wire.ChunkSource`s, ts and key
    narrowed to int32 offsets, and the bytes of the one-chunk slot they are copied into."""
    from mangonel.runtime.gpu.wire import ChunkSource

    rows = chunk_rows * chunks
    rng = np.random.default_rng(7)
    columns = (
        1_764_000_000_000_000 + np.arange(rows, dtype=np.int64) // 100,
        rng.integers(0, 1000, rows),
        rng.random(rows),
    )
    widths = (8, 8, 8)  # an offset column's region holds its wide form if a chunk needs it
    regions = [chunk_rows * sum(widths[:k]) for k in range(len(widths))]
    sources = [
        ChunkSource(column, region, offset)
        for column, region, offset in zip(columns, regions, (True, True, False), strict=True)
    ]
    return sources, sum(chunk_rows * w for w in widths)


def measure_staging_rate(threads: int, chunk_rows: int, chunks: int = 8) -> tuple[float, int]:
    """(tuples/s, threads) of the pageable -> pinned staging pass alone, as the stager runs
    it (`wire.CopyPool.fill_chunk` with `threads` copy threads, 0: one per core): (ts, key,
    value) int64/int64/float64 columns in ordinary memory, ts and key narrowed to int32
    offsets, `chunks` chunks of `chunk_rows` into one pinned slot; the median of 5 passes
    over all chunks after one warm-up pass."""
    from mangonel.runtime.gpu.wire import shared_pool

    cp = device.cupy()
    pool = shared_pool(threads)
    rows = chunk_rows * chunks
    sources, slot_bytes = staging_sources(chunk_rows, chunks)
    memory = cp.cuda.alloc_pinned_memory(slot_bytes)
    slot = np.frombuffer(memory, np.uint8, slot_bytes)
    times = []
    for _ in range(6):
        started = time.perf_counter()
        for first in range(0, rows, chunk_rows):
            pool.fill_chunk(sources, slot, first, first + chunk_rows)
        times.append(time.perf_counter() - started)
    return rows / float(np.median(times[1:])), pool.threads


class PinnedSource:
    """Columns generated once into pinned host memory (the benchmark's source); with
    `narrow`, also the keys as int32 and the values as float32 (the narrow shapes' source)."""

    def __init__(self, tuples: int, seed: int = 1, narrow: bool = False) -> None:
        cp = device.cupy()
        self.tuples = tuples
        wide_bytes = tuples * 8 * 5
        self.memory = cp.cuda.alloc_pinned_memory(wide_bytes + (tuples * 4 * 3 if narrow else 0))
        view = np.frombuffer(self.memory, np.int64, tuples * 5).reshape(5, tuples)
        rng = np.random.default_rng(seed)
        index = np.arange(tuples, dtype=np.int64)
        view[0] = index * 1_000_000 // TUPLES_PER_EVENT_SECOND  # in order
        view[1] = view[0] - rng.integers(0, 1_000_000, tuples)  # delay uniform [0, 1 s)
        view[2] = rng.integers(0, 1000, tuples)
        view[3] = 0
        view.view(np.float64)[4] = rng.random(tuples)
        self.view = view
        self.narrow_rows = None
        if narrow:  # int32 key1000, int32 key1, float32 value: the same values, narrower
            rows = np.frombuffer(self.memory, np.int32, count=tuples * 3, offset=wide_bytes)
            self.narrow_rows = rows.reshape(3, tuples)
            self.narrow_rows[0] = view[2]
            self.narrow_rows[1] = view[3]
            self.narrow_rows.view(np.float32)[2] = view.view(np.float64)[4]

    def column(self, name: str) -> np.ndarray:
        """One column of the source; `value` is DOUBLE (the float64 view of its row);
        `key1000_int`, `key1_int` and `value_float` are the narrow source's."""
        if name in ("key1000_int", "key1_int", "value_float"):
            if self.narrow_rows is None:
                raise ValueError("this source was made without its narrow columns")
            row = self.narrow_rows[{"key1000_int": 0, "key1_int": 1, "value_float": 2}[name]]
            return row.view(np.float32) if name == "value_float" else row
        row = self.view[{"ts": 0, "ts_late": 1, "key1000": 2, "key1": 3, "value": 4}[name]]
        return row.view(np.float64) if name == "value" else row


def source_batches(shape: GpuShape, source: PinnedSource, tuples: int) -> list[pa.RecordBatch]:
    """The shape's input as Arrow batches that are views of the pinned source (no copy): the
    engine's stager sees pinned buffers and copies them to the device as they are."""
    rows = shape.batch_bytes // shape.bytes_per_tuple
    suffix = "_int" if shape.narrow else ""
    columns = (
        source.column("ts" if shape.delay_us == 0 else "ts_late"),
        source.column(("key1" if shape.keys == 1 else "key1000") + suffix),
        source.column("value_float" if shape.narrow else "value"),
    )
    types = (
        pa.timestamp("us", tz="UTC"),
        pa.int32() if shape.narrow else pa.int64(),
        pa.float32() if shape.narrow else pa.float64(),
    )
    schema = pa.schema(
        [pa.field(name, t) for name, t in zip(("ts", "key", "value"), types, strict=True)]
    )
    batches = []
    for first in range(0, tuples // rows * rows, rows):
        arrays = [
            pa.Array.from_buffers(
                t,
                rows,
                [
                    None,
                    pa.foreign_buffer(
                        column[first:].ctypes.data, rows * column.itemsize, base=source.memory
                    ),
                ],
            )
            for column, t in zip(columns, types, strict=True)
        ]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return batches


def pinned_copies(
    batches: list[pa.RecordBatch], allocate: Callable[[int], Any] | None = None
) -> tuple[list[pa.RecordBatch], Any]:
    """The batches copied, once, into one block of pinned host memory, each rebuilt as views
    of it: Arrow batches whose buffers are already pinned, as a source that receives into
    pinned memory hands them (the stager then copies them to the device as they are, without
    its pageable -> pinned pass). Fixed-width columns only. Returns (batches, the block: keep
    it alive as long as the batches). `allocate(nbytes)`: the block's allocator (default
    CuPy's pinned one; a test gives ordinary memory)."""
    if allocate is None:
        allocate = device.cupy().cuda.alloc_pinned_memory
    sizes = [
        buffer.size
        for batch in batches
        for array in batch.columns
        for buffer in array.buffers()
        if buffer is not None
    ]
    nbytes = sum(sizes) + 64 * len(sizes)  # room for each buffer's alignment
    block = allocate(max(1, nbytes))
    memory = np.frombuffer(block, np.uint8, nbytes)
    position = 0
    copies = []
    for batch in batches:
        arrays = []
        for array in batch.columns:
            buffers = []
            for buffer in array.buffers():
                if buffer is None:
                    buffers.append(None)
                    continue
                target = memory[position : position + buffer.size]
                target[:] = np.frombuffer(buffer, np.uint8)
                buffers.append(pa.foreign_buffer(target.ctypes.data, buffer.size, base=block))
                position += device.round_up(buffer.size, 64)  # 64-byte aligned, as Arrow's
            arrays.append(
                pa.Array.from_buffers(array.type, len(array), buffers, offset=array.offset)
            )
        copies.append(pa.RecordBatch.from_arrays(arrays, schema=batch.schema))
    return copies, block


def run_shape(shape: GpuShape, source: PinnedSource, tuples: int) -> dict:
    """One shape through the engine a user runs: `LocalQuery` (the plan `Session(backend=
    "gpu").sql(...)` would build) -> the window driver -> `GpuKernels.lift_merge` per batch,
    the watermark update and the firing of every window that closed after each batch, as
    `LocalQuery.stream` does (over a list: batch k + 1's copy is queued before batch k is
    processed and fired), with `finish()` at the end. The clock covers the whole stream;
    the source's batches exist (views of pinned memory) before it starts.
    """
    cp = device.cupy()
    query = LocalQuery(bench_plan(shape))
    batches = source_batches(shape, source, tuples)
    rows_out = 0
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for result in query.stream(batches):
        rows_out += result.num_rows
    cp.cuda.Device().synchronize()
    seconds = time.perf_counter() - start
    processed = sum(batch.num_rows for batch in batches)
    metrics = query.metrics
    return {
        "shape": shape.name,
        "backend": "gpu",
        "path": "engine (LocalQuery, GpuKernels)",
        "tuples": processed,
        "batches": len(batches),
        "seconds": seconds,
        "tuples_per_second": processed / seconds,
        "rows_out": rows_out,
        "windows_fired": metrics.windows_fired,
        "late": metrics.late_tuples_dropped,
        "bytes_per_tuple": shape.bytes_per_tuple,
        "strategy": ph.find(query.plan, ph.WindowAggregateExec).strategy,
        "fired_after_every_batch": True,
        "lookahead": True,
    }


def run_gpu_benchmarks(
    shapes: list[GpuShape] | None = None,
    *,
    tuples: int = 150_000_000,
    verbose: bool = True,
    budget_s: float | None = None,
) -> list[dict]:
    """Run the shapes; every row carries the measured H2D bandwidth and the ratio to it.
    With `budget_s`, no shape starts once that many seconds have passed (the rows so far are
    returned; a lent device's call has a hard limit)."""
    began = time.perf_counter()
    bandwidth = measure_h2d_bandwidth()
    name = device_name()
    if verbose:
        print(
            f"device: {name}; pinned H2D bandwidth {bandwidth / 1e9:.1f} GB/s "
            f"(bound {bandwidth / BYTES_PER_TUPLE / 1e9:.2f} G tuples/s at "
            f"{BYTES_PER_TUPLE} B/tuple, {bandwidth / NARROW_BYTES_PER_TUPLE / 1e9:.2f} G at "
            f"{NARROW_BYTES_PER_TUPLE})"
        )
    shapes = shapes or default_gpu_shapes()
    source = PinnedSource(tuples, narrow=any(s.narrow for s in shapes))
    # warm-up (not reported): module compile/load per plan, first cudaMalloc of the pool
    for warm in {(s.slide_us, s.delay_us, s.narrow): s for s in shapes}.values():
        run_shape(warm, source, min(tuples, 16 * (warm.batch_bytes // warm.bytes_per_tuple)))
    results = []
    for shape in shapes:
        if budget_s is not None and time.perf_counter() - began > budget_s:
            if verbose:
                print(
                    f"time budget of {budget_s:.0f} s spent: {shape.name} and later shapes not run",
                    flush=True,
                )
            break
        row = run_shape(shape, source, tuples)
        row["device"] = name
        row["h2d_bytes_per_second"] = bandwidth
        row["pcie_ratio"] = row["tuples_per_second"] * shape.bytes_per_tuple / bandwidth
        results.append(row)
        if verbose:
            print(
                f"{row['shape']:<48} {row['tuples_per_second'] / 1e6:9.1f} M tuples/s  "
                f"{100 * row['pcie_ratio']:5.1f}% of H2D  rows_out={row['rows_out']} "
                f"late={row['late']}",
                flush=True,
            )
    return results
