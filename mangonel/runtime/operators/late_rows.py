"""Late rows as data (docs/semantics.md, "Late tuples"): the one mechanism every operator
that judges rows late (time windows, count windows, joins, the factorised join's sides) uses
to hand them out, beside the count it keeps as before.

An input operator owns a `LateRows`. Its `process` announces the batch it reads (`arriving`,
the batch as the caller gave it), its judgement passes the verdict it already computed for
counting (`judged`: a per-row bool mask over that batch, on the host or the device) with the
reason and the watermark it judged against, and `done` forgets the batch. Nothing is kept
unless the runner asked for it (`keep`); then the late rows are gathered from the given batch
(every column as it came, untouched by conformance) with:

- `late_reason` (string): `WINDOW_CLOSED` (time and CUMULATE windows, joins: every window
  of the row had fired when it arrived; session windows: its own interval had ended),
  `BEHIND_WATERMARK` (count windows: ts < W, the key's order up to W
  is final);
- `late_watermark` (timestamp[us, UTC]): the watermark the row was judged against (the one
  from before its batch);
- `late_stream` (string, joins only): the stream the row came in on.

The runner drains them (`take`): memory holds only the late rows not yet taken. The split
(Spark) form merges pane partials, not rows: it has no batch announced and records nothing
(Spark's late rows are tagged in stage 1, runtime/spark/late.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

REASON_COLUMN = "late_reason"
WATERMARK_COLUMN = "late_watermark"
STREAM_COLUMN = "late_stream"
WINDOW_CLOSED = "window closed"
BEHIND_WATERMARK = "behind watermark"
WATERMARK_TYPE = pa.timestamp("us", tz="UTC")


class LateRows:
    """The late rows one operator judged from one stream, kept while `keep` is on (see the
    module docstring). `stream`: the stream's name; `tagged`: write it into `late_stream`
    (a join's inputs; a one-stream query has no such column)."""

    def __init__(self, stream: str, tagged: bool = False) -> None:
        self.keep = False
        self.stream = stream
        self.tagged = tagged
        self._batch: pa.RecordBatch | None = None
        self._pieces: list[pa.RecordBatch] = []

    def arriving(self, batch: pa.RecordBatch | None) -> None:
        """The batch (as given) whose rows the next judgements index; None: partials, not rows."""
        self._batch = batch if self.keep else None

    def done(self) -> None:
        self._batch = None

    def judged(
        self,
        late: Any,  # noqa: ANN401 - a bool mask per row of the batch: NumPy or CuPy
        reason: str,
        watermark: int | None,
        to_host: Any = np.asarray,  # noqa: ANN401 - the kernels' device -> host copy
    ) -> None:
        """Keep the rows `late` marks (the verdict the operator counted) of the batch."""
        if self._batch is None:
            return
        positions = np.flatnonzero(np.asarray(to_host(late), np.bool_))
        if not len(positions):
            return
        if len(late) != self._batch.num_rows:
            raise AssertionError("a late-row verdict must cover every row of its batch")
        rows = self._batch.take(pa.array(positions, pa.int64()))
        stream = self.stream if self.tagged else None
        self._pieces.append(with_late_columns(rows, reason, watermark, stream))

    def take(self) -> list[pa.RecordBatch]:
        """The late rows kept so far, in judgement order (batch after batch, row order inside
        one); they are forgotten here."""
        pieces, self._pieces = self._pieces, []
        return pieces


def with_late_columns(
    rows: pa.RecordBatch, reason: str, watermark: int | None, stream: str | None
) -> pa.RecordBatch:
    """`rows` with `late_reason`, `late_watermark` (and `late_stream` for a stream name); a
    column of the batch already named so is kept as `<name>_in_batch` (two columns of one
    name could not be unified with later batches' rows)."""
    n = rows.num_rows
    arrays = [*rows.columns, pa.array([reason] * n, pa.string())]
    arrays.append(pa.array([watermark] * n, WATERMARK_TYPE))
    added = {REASON_COLUMN, WATERMARK_COLUMN, STREAM_COLUMN}
    given = [
        _renamed(name, rows.schema.names) if name in added else name for name in rows.schema.names
    ]
    names = [*given, REASON_COLUMN, WATERMARK_COLUMN]
    if stream is not None:
        arrays.append(pa.array([stream] * n, pa.string()))
        names.append(STREAM_COLUMN)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def late_schema(columns: pa.Schema, stream: bool) -> pa.Schema:
    """The schema of late rows read from batches shaped as `columns` (an empty result's)."""
    fields = [
        *columns,
        pa.field(REASON_COLUMN, pa.string()),
        pa.field(WATERMARK_COLUMN, WATERMARK_TYPE),
    ]
    if stream:
        fields.append(pa.field(STREAM_COLUMN, pa.string()))
    return pa.schema(fields)


def _renamed(name: str, taken: list[str]) -> str:
    """`name` + "_in_batch" (again until no column of `taken` has it)."""
    renamed = f"{name}_in_batch"
    while renamed in taken:
        renamed += "_in_batch"
    return renamed


def late_table(pieces: list[pa.RecordBatch], empty: pa.Schema) -> pa.Table:
    """One table of late-row batches. Batches of one stream may differ in shape (a column
    given as int32 once and int64 later; two streams of a join): their columns are unified,
    types promoted as Arrow promotes them, NULL where a batch had no such column. A column
    whose types Arrow cannot promote to one (BIGINT in one batch, STRING in another) comes out
    as STRING, each value as its text: the rows are taken already, so failing here would
    lose them."""
    if not pieces:
        return empty.empty_table()
    tables = [pa.Table.from_batches([piece]) for piece in pieces]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        conflicting = _conflicting_columns(tables)
        tables = [_as_text(table, conflicting) for table in tables]
        return pa.concat_tables(tables, promote_options="permissive")


def _conflicting_columns(tables: list[pa.Table]) -> set[str]:
    """The column names whose types across `tables` Arrow cannot promote to one."""
    fields: dict[str, list[pa.Field]] = {}
    for table in tables:
        for f in table.schema:
            fields.setdefault(f.name, []).append(f)
    conflicting = set()
    for name, found in fields.items():
        try:
            pa.unify_schemas([pa.schema([f]) for f in found], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            conflicting.add(name)
    return conflicting


def _as_text(table: pa.Table, names: set[str]) -> pa.Table:
    """`table` with its columns of `names` as STRING (Arrow's cast, or each value's Python
    text where Arrow has no cast: nested types); NULL stays NULL."""
    for position, name in enumerate(table.schema.names):
        if name not in names:
            continue
        column = table.column(position)
        try:
            text = column.cast(pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            text = pa.chunked_array(
                [pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())]
            )
        table = table.set_column(position, pa.field(name, pa.string()), text)
    return table
