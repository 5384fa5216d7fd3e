"""The driver's side of staging on the backend's thread (`WindowKernels.stage_in_background`,
`TimeWindowOperator.prefetch`, `OperatorBase._input`): the GPU stages batch k + 1 there while
the driver processes and fires batch k. Here CPU kernels get a stand-in staging thread (it
measures the event-time extremes, as the GPU's copy pass does, after a pause), so the driver's
ordering, waiting and error paths run without a GPU; the gpu-marked test in
tests/test_window_first_batch.py runs the real one."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest

from mangonel.errors import DataError
from mangonel.session import Session

CREATE = (
    "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
    "watermark = '200 milliseconds')"
)
QUERY = (
    "SELECT k, window_start, window_end, SUM(v) AS total, COUNT(*) AS n "
    "FROM s [RANGE 1 SECOND SLIDE 250 MILLISECONDS] GROUP BY k"
)


def _batches(count: int, rows: int = 2_000, seed: int = 0) -> list[pa.RecordBatch]:
    """Batches 400 ms of event time apart, out of order within 300 ms (some rows late)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        ts = 1_000_000_000 + b * 400_000 + rng.integers(-300_000, 400_000, rows)
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(ts, pa.timestamp("us")),
                    pa.array(rng.integers(0, 20, rows)),
                    pa.array(rng.standard_normal(rows)),
                ],
                names=["ts", "k", "v"],
            )
        )
    return out


class _StagingThread:
    """A stand-in for the GPU's staging thread: each call records its order and thread and
    returns a waiter for the batch's event-time extremes, measured on a thread after a pause
    (so a driver that does not wait would read them too early)."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.worker = ThreadPoolExecutor(1)
        self.handed: list[int] = []  # batch sizes, in the order handed over
        self.threads: set[int] = set()
        self.waited = 0
        self.fail_on = fail_on

    def __call__(self, lift, window, batch):  # noqa: ANN001, ANN204
        index = len(self.handed)
        self.handed.append(batch.num_rows)

        def stage():  # noqa: ANN202
            time.sleep(0.002)
            self.threads.add(threading.get_ident())
            if index == self.fail_on:
                raise RuntimeError(f"staging of batch {index} failed")
            times = batch.column("ts").cast(pa.int64()).to_numpy()
            return int(times.min()), int(times.max())

        future = self.worker.submit(stage)

        def wait():  # noqa: ANN202
            self.waited += 1
            return future.result()

        return wait


def _query(staging: _StagingThread | None = None):  # noqa: ANN202
    """A runner of the query (`LocalQuery`), its kernels given the stand-in staging thread."""
    session = Session("cpu")
    session.execute(CREATE)
    runner = session.sql(QUERY)._new_runner()
    if staging is not None:
        runner.window_operator.kernels.stage_in_background = staging
    return runner


def test_batches_staged_on_another_thread_give_the_same_rows():
    batches = _batches(12)
    staging = _StagingThread()
    got = _query(staging).run(batches)
    want = _query().run(batches)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    # every batch was handed over once and waited for once, on a thread not this one
    assert staging.handed == [b.num_rows for b in batches]
    assert staging.waited == len(batches)
    assert staging.threads and threading.get_ident() not in staging.threads


def test_a_batch_is_handed_over_before_the_one_before_it_is_processed():
    """prefetch(k + 1) comes before process(k) (`LocalQuery.stream` over a list), so batch
    k + 1's staging runs beside batch k's processing: when batch k's results arrive, batch
    k + 1 has been handed over already."""
    batches = _batches(6)
    staging = _StagingThread()
    query = _query(staging)
    handed_at_result: list[int] = []
    for _ in query.stream(batches):
        handed_at_result.append(len(staging.handed))
    assert handed_at_result and all(h >= 2 for h in handed_at_result)


def test_a_bad_batch_raises_at_its_turn_after_the_batches_before_it():
    """A batch that does not conform is not handed to the staging thread; the batches before
    it are processed and their results yielded; it raises when its turn comes."""
    batches = _batches(6)
    bad = pa.RecordBatch.from_arrays(
        [batches[3].column("ts"), pa.array(["x"] * batches[3].num_rows), batches[3].column("v")],
        names=["ts", "k", "v"],
    )
    inputs = batches[:3] + [bad] + batches[4:]
    staging = _StagingThread()
    query = _query(staging)
    results = []
    with pytest.raises(DataError, match="k"):
        for result in query.stream(inputs):
            results.append(result)
    assert len(staging.handed) == 4  # the three before it and the one after it
    want = _query()
    expected = [r for batch in batches[:3] for r in want.process(batch)]
    assert pa.Table.from_batches(results).equals(pa.Table.from_batches(expected))


def test_an_error_on_the_staging_thread_is_raised_in_the_drivers_thread():
    staging = _StagingThread(fail_on=2)
    with pytest.raises(RuntimeError, match="staging of batch 2 failed"):
        _query(staging).run(_batches(5))
