"""The reader-fed plan's parts read on the driver, one micro-batch ahead (reader_batch.py,
where the reader reads on the driver), free of pyspark: the GPU machine (no Spark) tests it
with pane_reader.py.

Why: with a local master the executors share the driver's machine, and the reader's parts
(a Parquet row group, a CSV file, a range of generated tuples) can be read where the window
operator runs, in the driver's own process, which has the plan's modules and kernels loaded
already. `foreachBatch` then gets only each micro-batch's parts as text (from the rules
of reader_offsets.py where Spark's file source triggers, from `mangonel_parts` otherwise:
reader_batch.py): no Spark job of Python tasks a micro-batch, no partial through the JVM.
And as soon as a micro-batch's parts are taken, the next micro-batch's
(the source's offset rules, reader_offsets.py, from this one's end offset) are read on
threads while Spark writes its offset and commit logs and runs the micro-batch's stage 2
(docs/performance/spark-driver.md, "Inside Spark: the reader's parts read on the driver, one
micro-batch ahead").

A read ahead is used only for exactly the parts the next micro-batch takes (a file added in
between, a replay after a restart: the parts differ, they are read anew); the parts of one
micro-batch are read on `threads` threads (the work releases the GIL in Arrow and numba); a
part's error is raised in the micro-batch that takes it, never in the background.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from mangonel.runtime.spark.pane_reader import ReaderSpec, read_part
from mangonel.runtime.spark.reader_offsets import (
    Part,
    latest_offset,
    offset_parts,
    part_of_text,
    part_text,
)


class ReadAhead:
    """Reads lists of parts with `read_part` (a part -> its record batches), keeping at most
    one list read ahead, under a key (module docstring)."""

    def __init__(self, read_part: Callable[[Any], list[pa.RecordBatch]], threads: int) -> None:
        self.read_part = read_part
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[str, list[Future]] | None = None
        self.hits = 0  # lists taken from a read ahead (tests, the bench)
        self.misses = 0  # read when asked (the first, after an idle or a restart, other parts)

    def take(self, key: str, parts: Sequence[Any]) -> list[pa.RecordBatch]:
        """The batches of `parts`: the read ahead when it is under `key`, else read now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == key:
            futures = ahead[1]
            self.hits += 1
        else:
            if ahead is not None:
                _drop(ahead[1])
            futures = self._submit(parts)
            self.misses += 1
        return [batch for future in futures for batch in future.result()]

    def read_ahead(self, key: str, parts: Sequence[Any]) -> None:
        """Start reading `parts` under `key` (nothing when there are none)."""
        if self._ahead is not None:
            _drop(self._ahead[1])
            self._ahead = None
        if parts:
            self._ahead = (key, self._submit(parts))

    def close(self) -> None:
        if self._ahead is not None:
            _drop(self._ahead[1])
            self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _submit(self, parts: Sequence[Any]) -> list[Future]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="mangonel-reader")
        return [self._pool.submit(self.read_part, part) for part in parts]


def _drop(futures: list[Future]) -> None:
    """A read ahead not taken: cancelled where not started; a running one finishes unread
    (its error, if any, belongs to no micro-batch)."""
    for future in futures:
        future.cancel()


class DriverReader:
    """The reader's parts of each micro-batch read on the driver (module docstring): from its
    parts as text and the micro-batch's end offset (`mangonel_parts`' rows, or reader_batch's
    `FileTrigger`) to the
    partials `mangonel_panes` would have handed Spark for the same parts, in `spec`'s Spark
    columns (carrier rows and the watermark time included)."""

    def __init__(self, spec: ReaderSpec, threads: int) -> None:
        self.spec = spec
        self.offsets = spec.offsets()
        self.ahead = ReadAhead(self._read, threads)
        # the offset after the latest micro-batch's, by the source's rules, when its parts
        # were taken (equal to that micro-batch's end: no new data then; None: not known)
        self.next_offset: dict | None = None
        # numba's cached kernels of the pre-aggregation load while Spark starts the query,
        # not in its first micro-batch (best effort: a real error shows in the first read)
        threading.Thread(target=self._warm, name="mangonel-reader-warm", daemon=True).start()

    def partials(self, texts: list[str], end_offset: str | None) -> pa.Table:
        """The partials of a micro-batch's parts (`texts`; none: the flush micro-batch), then
        the next micro-batch's parts from `end_offset` read ahead."""
        batches = self.ahead.take(_key(texts), [part_of_text(t) for t in texts]) if texts else []
        if end_offset is not None:
            self._read_next(json.loads(end_offset))
        return pa.Table.from_batches(batches, schema=self.spec.spark_schema)

    def _read_next(self, end: dict) -> None:
        """Start on the parts of the micro-batch after `end`, as the source will plan it."""
        self.next_offset = None
        try:
            following = latest_offset(self.offsets, end)
            parts = offset_parts(self.offsets, end, following) if following != end else []
        except Exception:  # noqa: BLE001 - the next micro-batch's error, not this one's:
            return  # the source raises it when it plans that micro-batch; nothing read ahead
        self.next_offset = following
        self.ahead.read_ahead(_key([part_text(p) for p in parts]), parts)

    def close(self) -> None:
        self.ahead.close()

    def _read(self, part: Part) -> list[pa.RecordBatch]:
        return list(read_part(self.spec, part))

    def _warm(self) -> None:
        from mangonel.runtime.spark.functions import stage1_preaggregate

        try:
            empty = self.spec.window.lift.scan.stream.schema.to_arrow().empty_table()
            stage1_preaggregate(self.spec.window, self.spec.placements, empty)
        except Exception:  # noqa: BLE001, S110 - warming only: the first read raises it
            pass


def _key(texts: list[str]) -> str:
    return "\n".join(texts)
