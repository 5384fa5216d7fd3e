"""Session windows through the public API on the CPU and, where CuPy sees a device, the GPU:
`python benchmarks/bench_sessions.py [tuples [batch_size [rate]]]` (default 20 M tuples, 1 M-row
batches, the generator's stream (`mangonel.bench`) at 100 k tuples/s of event time: a key of
1000 every 10 ms on average, so a 10 ms gap closes sessions often and a 1 s gap seldom).

Shapes: gap 10 ms and 1 s, 1000 keys and one key, in order and with up to 1 s of disorder
(watermark delay 1 s), `SUM(value)` and `AVG(value)` per session. One row per (shape,
backend): tuples/s and result rows, then GPU/CPU where both ran. Warm-up batches keep JIT
and module compilation out of the timing."""

from __future__ import annotations

import sys
import time

from mangonel.bench import BENCH_SCHEMA, Shape, make_batches
from mangonel.compiler.explain import format_duration
from mangonel.session import Session

GAPS_US = (10_000, 1_000_000)
KEYS = (1000, 1)
DELAYS_US = (0, 1_000_000)


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def run(backend: str, gap_us: int, delay_us: int, batches: list) -> tuple[float, int]:
    """Seconds to push every batch through the session query (end of input included), and
    the rows it emitted."""
    session = Session(backend=backend)
    session.create_stream("events", BENCH_SCHEMA.to_arrow(), event_time="ts", watermark=delay_us)
    query = session.sql(
        "SELECT key, window_start, window_end, SUM(value) AS total, AVG(value) AS mean "
        f"FROM events [SESSION GAP {gap_us} MICROSECONDS] GROUP BY key"
    )
    query.run(batches[:1])  # warm-up
    started = time.perf_counter()
    table = query.run(batches)
    return time.perf_counter() - started, table.num_rows


def main() -> None:
    tuples = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rate = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    backends = ["cpu", "gpu"] if gpu_available() else ["cpu"]
    print(
        f"{tuples:,} tuples at {rate:,}/s of event time in batches of {batch_size:,}; "
        f"backends: {', '.join(backends)}"
    )
    for keys in KEYS:
        for delay in DELAYS_US:
            batches = make_batches(Shape(1, 1, keys, "SUM", delay), tuples, rate, batch_size, 1)
            for gap in GAPS_US:
                order = "in-order" if delay == 0 else f"delay<{format_duration(delay)}"
                name = f"gap={format_duration(gap)} keys={keys} {order}"
                rates = {}
                for backend in backends:
                    seconds, rows = run(backend, gap, delay, batches)
                    rates[backend] = tuples / seconds
                    mega = rates[backend] / 1e6
                    print(f"{name:<32} {backend}: {mega:8.2f} M tuples/s, {rows:,} rows")
                if len(rates) == 2:
                    print(f"{name:<32} gpu/cpu: {rates['gpu'] / rates['cpu']:.1f}x")


if __name__ == "__main__":
    main()
