"""The operator protocol every runner drives (standalone `runtime.local.query`, Spark stage 2
`runtime.spark.stage2`, the benchmarks): one object per plan node (or per fused subtree),
built by `registry` for the node's backend and wired into a tree by `tree.OperatorTree`.

Batches flow leaf -> root: `process` takes a batch on one of the operator's inputs (a leaf's
input is the stream), `on_watermark` tells it the watermark moved, `finish` ends the input;
each returns the batches the operator emits, typed as `schema` says, in order. Stateful
operators save and load their state through `snapshot` / `restore` (bytes, see snapshot.py);
stateless ones return b"" and accept it back.

Operators that judge rows late (the window operators, the join) also carry `late_sinks`: the
`late_rows.LateRows` of each stream they read; the tree turns them on and drains them
(`OperatorTree.keep_late_rows`, `take_late_rows`). Counting never depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from mangonel.runtime.operators.tuner import TunerMetrics


@dataclass(frozen=True)
class OperatorMetrics:
    """Counters of a query so far (the window operator keeps them; see window.py):
    windows_fired counts (window, key) results before HAVING, rows_out the rows after it."""

    tuples_in: int
    late_tuples_dropped: int
    null_event_time_dropped: int
    windows_fired: int
    rows_out: int
    state_bytes: int
    # tuples whose event time lies outside `event_time_range` (a window bound would not fit
    # int64): dropped and counted like NULL event times, but apart from them
    event_time_out_of_range_dropped: int = 0
    # the online auto-tuner of a holistic firing (`tuner.py`): its state, configuration and
    # the configurations it tried; None where nothing is tuned
    tuning: TunerMetrics | None = None


class Operator(Protocol):
    schema: pa.Schema  # of the batches it emits
    stateful: bool  # whether `snapshot` holds state (the tree snapshots only those)

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]: ...

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]: ...

    def finish(self) -> list[pa.RecordBatch]: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...

    def metrics(self) -> OperatorMetrics | None: ...
