"""`mangonel bench` runs and prints its table (a functional check; speed is never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mangonel.bench import Shape, default_shapes, sketch_shapes
from mangonel.cli import main


def test_default_shapes_cover_design_section_6() -> None:
    shapes = default_shapes()
    assert {s.slide_us for s in shapes} == {10_000, 100}
    assert {s.keys for s in shapes} == {1, 1000}
    assert {s.aggregate for s in shapes} == {"SUM", "AVG"}
    assert {s.delay_us for s in shapes} == {0, 1_000_000}
    assert all(s.range_us == 1_000_000 for s in shapes)


def test_bench_prints_one_row_per_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "shapes.json"
    config.write_text(
        json.dumps(
            [
                {
                    "range_us": 1_000_000,
                    "slide_us": 10_000,
                    "keys": 10,
                    "aggregate": "SUM",
                    "delay_us": 0,
                },
                {
                    "range_us": 1_000_000,
                    "slide_us": 100_000,
                    "keys": 3,
                    "aggregate": "AVG",
                    "delay_us": 200_000,
                },
            ]
        )
    )
    out_json = tmp_path / "out.json"
    assert (
        main(
            [
                "bench",
                str(config),
                "--tuples",
                "30000",
                "--rate",
                "100000",
                "--batch-size",
                "10000",
                "--no-peer",
                "--repeat",
                "2",
                "--json",
                str(out_json),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "measured memory copy bandwidth" in printed
    rows = json.loads(out_json.read_text())
    assert [r["shape"] for r in rows] == [
        Shape(1_000_000, 10_000, 10, "SUM", 0).name,
        Shape(1_000_000, 100_000, 3, "AVG", 200_000).name,
    ]
    assert all(r["tuples"] == 30_000 and r["rows_out"] > 0 for r in rows)
    # each shape timed twice; the row's rate is one of the runs' (the median's upper middle)
    assert all(len(r["runs_per_second"]) == 2 for r in rows)
    assert all(min(r["runs_per_second"]) == r["tuples_per_second"] for r in rows)
    assert printed.count("(median of 2: ") == 2


def test_bench_join_runs_every_join_shape(tmp_path: Path) -> None:
    """`mangonel bench --join` without the peer: one row per shape, each with joined output
    (the peer and its equality check need Spark: tests/spark), its rate the median of
    `--repeat` runs, whose range the row keeps."""
    from mangonel.bench_join import default_join_shapes

    out_json = tmp_path / "join.json"
    arguments = ["bench", "--join", "--tuples", "8000", "--join-rate", "2000", "--repeat", "3"]
    arguments += ["--join-batch-size", "1000", "--no-peer", "--json", str(out_json)]
    assert main(arguments) == 0
    rows = json.loads(out_json.read_text())
    assert [r["shape"] for r in rows] == [s.label for s in default_join_shapes()]
    assert rows[0]["rows_in"] == 8000 and all(r["rows_out"] > 0 for r in rows)
    assert {r["algorithm"] for r in rows} >= {"hash", "sort-merge"}
    for row in rows:
        runs = row["runs_rows_per_second"]
        assert len(runs) == 3 and runs == sorted(runs)
        assert row["rows_per_second"] == runs[1]
        assert 0 <= row["collector_seconds"] < row["seconds"]


def test_the_join_bench_times_the_collector_inside_its_clock() -> None:
    """`CollectorTime` in `gc.callbacks` sums the passes' time (a pass inside a GPU join run
    of ~0.07 s can double it; the row says so); nothing once it is removed."""
    import gc

    from mangonel.bench_join import CollectorTime

    collector = CollectorTime()
    gc.callbacks.append(collector)
    try:
        cycles = [[] for _ in range(20_000)]
        for cycle in cycles:
            cycle.append(cycle)
        del cycles
        assert gc.collect() >= 20_000
    finally:
        gc.callbacks.remove(collector)
    took = collector.seconds
    assert took > 0
    gc.collect()
    assert collector.seconds == took


def test_pinned_copies_are_views_of_one_block_equal_to_the_batches() -> None:
    """`gpu_bench.pinned_copies` (--join-pinned's arrivals; here over ordinary memory): every
    buffer copied into the one block, 64-byte aligned, the batches equal to the originals,
    validity and sliced arrays included."""
    import numpy as np
    import pyarrow as pa

    from mangonel.runtime.local.gpu_bench import pinned_copies

    blocks = []

    def allocate(nbytes: int) -> bytearray:
        blocks.append(bytearray(nbytes))
        return blocks[-1]

    ts = pa.array(np.arange(7, dtype=np.int64) * 10, pa.timestamp("us", tz="UTC"))
    keys = pa.array([1, None, 3, 4, None, 6, 7], pa.int32())
    values = pa.array(np.linspace(0, 1, 9, dtype=np.float32)).slice(2, 7)
    batches = [pa.RecordBatch.from_arrays([ts, keys, values], ["ts", "key", "value"])] * 2
    copies, block = pinned_copies(batches, allocate)
    assert len(blocks) == 1 and block is blocks[0]
    base = np.frombuffer(block, np.uint8).ctypes.data
    for original, copy in zip(batches, copies, strict=True):
        assert copy.equals(original) and copy.schema == original.schema
        for array in copy.columns:
            for buffer in array.buffers():
                if buffer is not None:
                    assert base <= buffer.address < base + len(block)
                    assert (buffer.address - base) % 64 == 0


def test_join_rows_compare_as_multisets() -> None:
    """same_rows: the check of mangonel's rows against Spark's (order-free, sums to 1e-9)."""
    import pyarrow as pa

    from mangonel.bench_join import same_rows

    ts = pa.array([0, 0], pa.timestamp("us"))
    ours = pa.table(
        {"key": [1, 2], "window_start": ts, "window_end": ts, "n": [3, 4], "total": [0.3, 1.0]}
    )
    theirs = ours.take([1, 0]).set_column(4, "total", pa.array([1.0, 0.1 + 0.2]))
    assert same_rows(ours, theirs, aggregate=True)
    assert not same_rows(ours, theirs.set_column(3, "n", pa.array([4, 2])), aggregate=True)
    assert not same_rows(ours, theirs.slice(1), aggregate=True)


def test_gpu_public_shapes_cover_issue_12() -> None:
    """Every aggregate alone and the six together, 1 and 1000 keys, in order and out of
    order, 1 M and 4 M-row batches, and the output-heavy shapes; --quick is a subset; every
    query plans (on the CPU here: the text is the same for the GPU)."""
    from mangonel.bench import BENCH_SCHEMA
    from mangonel.bench_gpu import (
        AGGREGATES,
        ALL_SIX,
        default_gpu_shapes,
        quick_gpu_shapes,
    )
    from mangonel.session import Session

    shapes = default_gpu_shapes()
    main_shapes = [s for s in shapes if s.slide_us == 10_000]
    assert {s.aggregate for s in main_shapes} == {*AGGREGATES, ALL_SIX}
    assert {(s.keys, s.delay_us, s.batch_rows) for s in main_shapes} == {
        (k, d, r) for k in (1, 1000) for d in (0, 1_000_000) for r in (1_000_000, 4_000_000)
    }
    assert len(main_shapes) == 7 * 8
    heavy = [s for s in shapes if s.slide_us == 100]
    assert heavy and all(s.keys == 1000 for s in heavy)
    quick = quick_gpu_shapes()
    assert set(quick) < set(shapes) and len(quick) < len(shapes) / 3
    assert len({s.name for s in shapes}) == len(shapes)
    session = Session(backend="cpu")
    session.create_stream("events", BENCH_SCHEMA.to_arrow(), event_time="ts", watermark=0)
    for shape in {(s.aggregate, s.slide_us): s for s in shapes}.values():
        assert "WindowAggregate" in session.sql(shape.query()).explain()


def test_gpu_public_bench_prints_both_bounds_and_one_row_per_shape(monkeypatch, capsys) -> None:
    """The GPU bench's loop and table, with the device parts stood in (measured bounds as
    constants, each shape run on the CPU backend): one row per shape, its shares of both
    bounds, the dataset reused across batch sizes."""
    import argparse

    import mangonel.bench_gpu as bench_gpu
    from mangonel.runtime.local import gpu_bench
    from mangonel.session import Session

    shapes = [
        bench_gpu.PublicShape(10_000, 10, "SUM", 0, 20_000),
        bench_gpu.PublicShape(10_000, 10, bench_gpu.ALL_SIX, 0, 50_000),
    ]
    monkeypatch.setattr(bench_gpu, "quick_gpu_shapes", lambda: shapes)
    monkeypatch.setattr(gpu_bench, "measure_h2d_bandwidth", lambda: 48e9)
    monkeypatch.setattr(gpu_bench, "measure_staging_rate", lambda threads, rows: (2e9, 16))
    monkeypatch.setattr(gpu_bench, "device_name", lambda: "stand-in")
    made = []
    real_dataset = bench_gpu.dataset
    monkeypatch.setattr(bench_gpu, "dataset", lambda *a: made.append(a) or real_dataset(*a))

    def on_cpu(shape, batches):  # noqa: ANN001, ANN202
        assert sum(b.num_rows for b in batches) == 100_000
        assert all(b.num_rows == shape.batch_rows for b in batches)
        session = Session(backend="cpu")
        schema = bench_gpu.BENCH_SCHEMA.to_arrow()
        session.create_stream("events", schema, event_time="ts", watermark=0)
        seconds = timings[len(rows_seen) % len(timings)]
        rows_seen.append(shape)
        return seconds, session.sql(shape.query()).run(batches).num_rows, None

    timings = [1.0, 0.5, 0.4]  # three timed runs a shape: the row gives their median
    rows_seen = []
    monkeypatch.setattr(bench_gpu, "run_public_shape", on_cpu)
    arguments = argparse.Namespace(tuples=100_000, quick=True, harness=False, seed=1, repeat=3)
    results = bench_gpu.run_gpu_public(arguments)
    printed = capsys.readouterr().out
    assert "3.00 G tuples/s at 16 B/tuple on the wire" in printed
    assert "pageable -> pinned staging 2.00 G tuples/s (16 threads" in printed
    assert [r.shape for r in results] == [s.name for s in shapes]
    assert len(made) == 1  # one dataset for both shapes (same keys, order and rate)
    for result in results:
        assert result.tuples_per_second == 200_000 and result.rows_out > 0
        assert result.slowest_tuples_per_second == 100_000
        assert result.fastest_tuples_per_second == 250_000
        assert result.h2d_share == pytest.approx(200_000 / 3e9)
        assert result.staging_share == pytest.approx(200_000 / 2e9)
        assert result.shape in printed
    assert len(rows_seen) == 3 * len(shapes)


def test_gpu_public_shape_takes_a_whole_call_as_its_aggregate() -> None:
    """An aggregate with arguments of its own (`APPROX_PERCENTILE(value, 0.5)`, as the
    timers script takes it) is called as written; a bare name gets `(value)`."""
    import mangonel.bench_gpu as bench_gpu
    from mangonel.session import Session

    call = bench_gpu.PublicShape(10_000, 10, "APPROX_PERCENTILE(value, 0.5)", 0, 10_000)
    assert "APPROX_PERCENTILE(value, 0.5) AS result" in call.query()
    assert "SUM(value) AS result" in bench_gpu.PublicShape(10_000, 10, "SUM", 0, 10_000).query()
    session = Session(backend="cpu")
    session.create_stream("events", bench_gpu.BENCH_SCHEMA.to_arrow(), event_time="ts")
    whole = bench_gpu.dataset(call, 20_000, 1)
    assert session.sql(call.query()).run([whole]).num_rows > 0


def test_gpu_bench_profile_names_the_engine_functions() -> None:
    """`--profile`'s text: one more run under cProfile, top functions by own time (run on
    the CPU backend here; the GPU bench calls it with backend="gpu")."""
    import mangonel.bench_gpu as bench_gpu

    shape = bench_gpu.PublicShape(10_000, 10, "SUM", 0, 10_000)
    whole = bench_gpu.dataset(shape, 30_000, 1)
    batches = [whole.slice(first, 10_000) for first in range(0, 30_000, 10_000)]
    text = bench_gpu.profile_public_shape(shape, batches, top=5, backend="cpu")
    assert "tottime" in text and "function calls" in text


def test_sketch_shapes_run_approx_percentile_on_both_paths(tmp_path: Path) -> None:
    assert [(s.aggregate, s.approx_percentile) for s in sketch_shapes()] == [
        ("APPROX_COUNT_DISTINCT", None),
        ("APPROX_PERCENTILE(value, 0.5)", "exact"),
        ("APPROX_PERCENTILE(value, 0.5)", "sketch"),
        ("SUM", None),
    ]
    config = tmp_path / "shapes.json"
    call = {"range_us": 100_000, "slide_us": 10_000, "keys": 3, "delay_us": 0}
    call["aggregate"] = "APPROX_PERCENTILE(value, 0.5)"
    config.write_text(json.dumps([{**call, "approx_percentile": p} for p in ("exact", "sketch")]))
    out_json = tmp_path / "out.json"
    arguments = ["bench", str(config), "--tuples", "20000", "--rate", "100000", "--no-peer"]
    assert main([*arguments, "--batch-size", "10000", "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())
    # each row names its path (the session option its run was planned with)
    assert "APPROX_PERCENTILE(value, 0.5) [exact]" in rows[0]["shape"]
    assert "APPROX_PERCENTILE(value, 0.5) [sketch]" in rows[1]["shape"]
    assert rows[0]["rows_out"] == rows[1]["rows_out"] > 0


def test_spark_conf_settings_parse_and_a_pair_without_equals_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mangonel.cli import build_parser

    parsed = build_parser().parse_args(
        [
            "bench",
            "--spark",
            "--spark-conf",
            "spark.sql.streaming.checkpoint.fileChecksum.enabled=false",
            "--spark-conf",
            "spark.sql.shuffle.partitions = 1",
        ]
    )
    assert parsed.spark_conf == [
        ("spark.sql.streaming.checkpoint.fileChecksum.enabled", "false"),
        ("spark.sql.shuffle.partitions", "1"),
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--spark", "--spark-conf", "fileChecksum"])
    assert "'fileChecksum': expected KEY=VALUE" in capsys.readouterr().err


def test_spark_rate_parses_and_defaults_to_none() -> None:
    """`--spark-rate`: the event time per second of `bench --spark` (None: the bench's 1 M)."""
    from mangonel.cli import build_parser

    parsed = build_parser().parse_args(["bench", "--spark", "--holistic", "--spark-rate", "100000"])
    assert parsed.spark_rate == 100_000
    assert build_parser().parse_args(["bench", "--spark"]).spark_rate is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--spark", "--spark-rate", "0"])


def test_kernel_times_sums_ncu_durations_by_kernel() -> None:
    """benchmarks/gpu_kernel_times.py's summary of an ncu CSV log: the duration metric's rows
    summed by kernel name in milliseconds whatever the unit, other metrics and ncu's own lines
    skipped, largest first."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_kernel_times.py"
    spec = importlib.util.spec_from_file_location("gpu_kernel_times", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    lines = [
        "==PROF== Connected to process 1",
        header,
        '"0","mg_fused","gpu__time_duration.sum","usecond","94.50"',
        '"1","mg_select","gpu__time_duration.sum","msecond","0.175"',
        '"2","mg_fused","gpu__time_duration.sum","nsecond","1,500"',
        '"3","mg_fused","sm__throughput.avg.pct_of_peak","%","12"',
    ]
    totals, launches = module.kernel_times(lines)
    assert totals == pytest.approx({"mg_fused": 0.096, "mg_select": 0.175})
    assert launches == {"mg_fused": 2, "mg_select": 1}
    text = module.summary(lines)
    assert text.splitlines()[0] == "total kernel time 0.271 ms over 3 launches"
    assert "mg_select" in text.splitlines()[1]
    with pytest.raises(ValueError, match="unknown unit"):
        module.kernel_times([header, '"0","k","gpu__time_duration.sum","cycle","3"'])


def test_public_timers_count_only_the_timed_run_and_parse_harness_shapes(capsys) -> None:
    """benchmarks/gpu_public_timers.py: a wrapped method's time and calls are counted in the
    timed run only (two untimed runs first), printed per batch with the longest call, and so
    are the garbage collector's passes; the methods it times on the device and the functions
    it wraps where they are imported exist; harness shapes parse to the pinned-source
    harness's shapes (`--harness`), a malformed one is refused."""
    import gc
    import importlib
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_public_timers.py"
    spec = importlib.util.spec_from_file_location("gpu_public_timers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Piece:
        def work(self) -> int:
            return 1

    module._wrap(Piece, "work", Piece.work, "Piece.work")
    piece = Piece()

    def run() -> tuple[float, int, int]:
        for _ in range(6):
            piece.work()
        gc.collect()
        return 0.5, 3, 7  # seconds, batches, result rows

    seconds, count, rows, untimed = module.timed(run)
    assert (seconds, count, rows, untimed) == (0.5, 3, 7, [0.5, 0.5])
    assert module.CALLS["Piece.work"] == 6 and not module.TIMING[0]
    # the timed run's pass (the untimed runs' two are not counted; an automatic one may add)
    assert 1 <= module.CALLS["garbage collection (generation 2)"] < 3
    assert not any(isinstance(c, module.CollectorTime) for c in gc.callbacks)  # removed
    module.report("shape", 3_000_000, seconds, count, [6.0, 6.0])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "== shape: untimed [6.0, 6.0] M/s; timed 6.0 M/s, 166.667 ms/batch"
    work = [line for line in printed if line.endswith("Piece.work")]
    assert len(work) == 1 and work[0].split()[2:4] == ["2.00", "calls/b"]
    module.LONGEST["Piece.work"] = 0.0125  # the longest single call, in ms
    module.report("shape", 3_000_000, seconds, count, [6.0, 6.0])
    longest = [line for line in capsys.readouterr().out.splitlines() if "Piece.work" in line]
    assert longest[0].split()[4:7] == ["12.500", "ms", "longest"]
    for module_name, name in module.IMPORTED:
        assert callable(getattr(importlib.import_module(module_name), name)), (module_name, name)
    for module_name, class_name in module.TARGETS:  # each names a module and class
        imported = importlib.import_module(module_name)
        assert class_name is None or isinstance(getattr(imported, class_name), type)
    for module_name, class_name, name in module.DEVICE_TARGETS:  # each names a method
        owner = getattr(importlib.import_module(module_name), class_name)
        assert callable(getattr(owner, name)), (module_name, class_name, name)
    shape = module.parse_harness("10000:1000:0:32:narrow")
    assert (shape.slide_us, shape.keys, shape.batch_bytes, shape.narrow) == (
        10_000,
        1000,
        32 << 20,
        True,
    )
    assert not module.parse_harness("100:1:1000000:4").narrow
    with pytest.raises(ValueError, match="harness shape"):
        module.parse_harness("100:1:0:4:wide")


def test_worker_timeline_records_each_job_and_wait_and_summarizes_them(monkeypatch) -> None:
    """benchmarks/gpu_worker_timeline.py: a job handed to a real copy worker is recorded with
    its submit, begin and return times in order, the driver's wait for it too; the summary's
    figures come from the recorded times (the ends left out)."""
    import importlib.util
    import time

    from mangonel.runtime.gpu import wire

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    spec = importlib.util.spec_from_file_location(
        "gpu_worker_timeline", benchmarks / "gpu_worker_timeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the originals, restored after the test
    monkeypatch.setattr(wire.CopyWorker, "submit", wire.CopyWorker.submit)
    monkeypatch.setattr(wire.Pending, "result", wire.Pending.result)
    module.instrument()
    worker = wire.CopyWorker()
    pending = worker.submit(lambda seconds: time.sleep(seconds) or 7, (0.02,), lambda value: value)
    assert pending.result() == 7
    ((submitted, begun, returned),) = module.JOBS
    assert submitted <= begun and returned - begun >= 0.02
    ((called, ended, _),) = module.WAITS
    assert called <= ended
    jobs = [(float(k), k + 0.5, k + 1.5) for k in range(8)]  # each ran 1 s, queued 0.5 s
    waits = [(float(k), k + 0.25, k % 2 == 0) for k in range(8)]
    figures = module.summarize(jobs, waits, batches=4)
    assert figures["queued_median"] == 500.0 and figures["ran_median"] == 1000.0
    assert figures["between_median"] == 0.0  # the next job begins as the one before returns
    assert figures["wait_mean"] == 250.0 and figures["waited_a_batch"] == 250.0
    assert figures["already_done"] == 0.5


def test_host_copy_contention_times_the_pass_beside_each_kind_of_busy_thread(monkeypatch) -> None:
    """benchmarks/host_copy_contention.py: the stager's host pass timed alone and beside each
    kind of busy thread (small chunks here), every rate positive and every busy thread
    stopped afterwards."""
    import importlib.util
    import threading

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "host_copy_contention.py"
    spec = importlib.util.spec_from_file_location("host_copy_contention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CHUNK_ROWS", 1 << 15)
    monkeypatch.setattr(module, "CHUNKS", 2)
    monkeypatch.setattr(module, "PASSES", 2)
    sources, slot = module.sources_and_slot()
    before = threading.active_count()
    for busy in ("none", "core", "gil", "copy"):
        median, slowest = module.rates(1, busy, sources, slot)
        assert median >= slowest > 0
    assert threading.active_count() == before


# -- bad input: a one-line error before anything is measured ---------------------------------

GOOD_SHAPE = {
    "range_us": 1_000_000,
    "slide_us": 10_000,
    "keys": 10,
    "aggregate": "SUM",
    "delay_us": 0,
}
SMALL_RUN = ["--no-peer", "--tuples", "1000", "--repeat", "1"]


@pytest.fixture
def nothing_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that gets as far as measuring fails the test: every error must come first."""

    def measured(*_: object) -> None:
        raise AssertionError("measured before the arguments were checked")

    monkeypatch.setattr("mangonel.bench.measure_memory_bandwidth", measured)
    monkeypatch.setattr("mangonel.bench_join.make_arrivals", measured)


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"keys": 0}, "shape 2: keys must be a positive whole number, got 0"),
        ({"delay_us": -5}, "shape 2: delay_us must be a whole number >= 0, got -5"),
        (
            {"range_us": "1 second"},
            "shape 2: range_us must be a positive whole number, got '1 second'",
        ),
        (
            {"slide_us": 2_000_000},
            "shape 2: range_us, slide_us: SLIDE 2 SECONDS is larger than RANGE",
        ),
        ({"aggregate": "FOO"}, "shape 2: aggregate: unknown function FOO"),
        (
            {"approx_percentile": "fast"},
            "shape 2: approx_percentile: unknown approx_percentile path",
        ),
    ],
)
def test_a_bad_shape_is_refused_before_any_shape_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_measured: None,
    bad: dict,
    problem: str,
) -> None:
    config = tmp_path / "shapes.json"
    config.write_text(json.dumps([GOOD_SHAPE, {**GOOD_SHAPE, **bad}]))
    assert main(["bench", str(config), *SMALL_RUN]) == 2
    assert _one_line_error(capsys).startswith(f"error: {config}: {problem}")


def test_a_config_that_is_not_utf8_or_holds_no_shapes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_measured: None
) -> None:
    config = tmp_path / "shapes.json"
    config.write_bytes(b'[{"aggregate": "\xff"}]')
    assert main(["bench", str(config), *SMALL_RUN]) == 2
    assert _one_line_error(capsys).startswith(f"error: {config}: not UTF-8 text")
    config.write_text("[]")
    assert main(["bench", str(config), *SMALL_RUN]) == 2
    assert _one_line_error(capsys).startswith(f"error: {config}: CONFIG holds no shapes")


def test_quick_that_keeps_no_shape_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_measured: None
) -> None:
    config = tmp_path / "shapes.json"
    config.write_text(json.dumps([{**GOOD_SHAPE, "aggregate": "AVG"}]))
    assert main(["bench", str(config), "--quick", *SMALL_RUN]) == 2
    assert "--quick keeps only the s = 10 ms SUM shapes" in _one_line_error(capsys)
    assert main(["bench", "--window-function", "--quick", *SMALL_RUN]) == 2
    assert "--window-function has none" in _one_line_error(capsys)


@pytest.mark.parametrize("destination", ["missing/r.json", "."])
def test_json_destination_is_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_measured: None, destination: str
) -> None:
    """The results are not lost at the end of a long run: a --json file that cannot be
    written is refused before anything is measured."""
    out = tmp_path / destination
    assert main(["bench", "--json", str(out), *SMALL_RUN]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"error: {out}: ")
    assert "does not exist" in err or "is a folder" in err


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["CONFIG", "--holistic"], "CONFIG and --holistic each choose the shapes to run; choose"),
        (["CONFIG", "--sketches"], "CONFIG and --sketches each choose"),
        (["--window-function", "--sketches"], "--window-function and --sketches each choose"),
        (["CONFIG", "--join"], "CONFIG and --join each choose"),
        (["--join-shapes", "uniform, tumbling 1 s, aggregated"], "--join-shapes needs --join"),
        (["--join", "--join-shapes", "no such shape"], "--join-shapes 'no such shape' matches"),
        (["--join", "--join-pinned"], "--join-pinned needs --join --backend gpu"),
        (["--join-pinned"], "--join-pinned needs --join --backend gpu"),
    ],
)
def test_contradictory_flags_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_measured: None,
    flags: list[str],
    problem: str,
) -> None:
    config = tmp_path / "shapes.json"
    config.write_text(json.dumps([GOOD_SHAPE]))
    arguments = [str(config) if flag == "CONFIG" else flag for flag in flags]
    assert main(["bench", *arguments, *SMALL_RUN]) == 2
    assert problem in _one_line_error(capsys)


@pytest.mark.parametrize("family", ["CONFIG", "--sketches", "--window-function", "--join"])
def test_spark_runs_only_its_own_or_the_holistic_shapes(tmp_path: Path, family: str) -> None:
    """Checked on the parsed arguments alone: nothing here may start Spark."""
    from mangonel.bench import check_arguments
    from mangonel.cli import build_parser
    from mangonel.errors import MangonelError

    config = tmp_path / "shapes.json"
    config.write_text(json.dumps([GOOD_SHAPE]))
    flag = str(config) if family == "CONFIG" else family
    parsed = build_parser().parse_args(["bench", "--spark", flag])
    with pytest.raises(
        MangonelError, match=f"--spark runs its own shapes or --holistic's, not {family}"
    ):
        check_arguments(parsed)
    assert check_arguments(build_parser().parse_args(["bench", "--spark", "--holistic"])) is None
