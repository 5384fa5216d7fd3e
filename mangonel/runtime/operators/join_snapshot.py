"""Snapshot and restore of a join's state (the driver is join.py): both sides' stored
rows (payload as Arrow IPC, key slots, window ranges, matched flags), the key table,
watermarks and counters, and the form's own state: the pending pairs (rows=arrival, or the
device's), the aggregated cells, or none (rows=firing, whose windows' rows are stored).
A form that keeps pending pairs, restored from a rows=firing snapshot, finds the stored
rows' pairs again; rows=firing ignores saved pairs (it joins the stored rows at firing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mangonel.errors import DataError
from mangonel.runtime.operators.join_sides import from_ipc, to_ipc
from mangonel.runtime.operators.snapshot import pack, unpack

if TYPE_CHECKING:
    from mangonel.runtime.operators.join import JoinOperator

JOIN_OPERATOR = "join"


def snapshot_join(op: JoinOperator) -> bytes:
    """The join's state (join.py's JoinOperator.snapshot)."""
    if op.device_fused:  # outer joins: matched flags set where the pairs were found
        op.cells.flags_to_host(op.sides)
    elif op.device_rows is not None:
        op.device_rows.flags_to_host(op.sides)
    header: dict = {"format": "mangonel.window-state", "version": 1}
    header.update(
        operator=JOIN_OPERATOR,
        fired=op.fired,
        windows_fired=op.windows_fired,
        rows_out=op.rows_out,
        external_watermark=op.external_watermark,
        batches_by_algorithm=op.batches_by_algorithm,
        # rows=firing keeps no pairs: a form that keeps them finds them on restore
        rows_at_firing=op.at_firing,
        sides=[
            {k: getattr(s, k) for k in ("base", "watermark", "max_ts", "seen", "tuples_in", "late")}
            | {"null_time": s.null_time, "batch_rows": s.batch_rows}
            for s in op.sides
        ],
    )
    arrays: dict[str, np.ndarray] = {}
    for s in op.sides:
        p = f"side{s.index}_"
        for name in ("slots", "first", "last", "origin", "matched"):
            grow = getattr(s, name)
            if grow is not None:
                arrays[p + name] = grow.view.copy()
        arrays[p + "payload"] = to_ipc(s.batches, s.conformer.schema)  # type: ignore[attr-defined]
    arrays.update(op.keys.to_arrays("keys_"))
    if op.device_rows is not None:
        arrays.update(op.device_rows.to_arrays())
    elif op.aggregate is None:
        arrays.update({f"pending_{n}": g.view.copy() for n, g in op.pending.items()})
    else:
        arrays.update(op.cells.to_arrays())
    return pack(header, arrays)


def restore_join(op: JoinOperator, data: bytes) -> None:
    """The state `snapshot_join` saved, into `op` (a fresh operator of the same plan)."""
    header, arrays = unpack(data)
    if header.get("operator") != JOIN_OPERATOR:
        raise DataError("snapshot does not match this query: it is not a join's state")
    op.fired = header["fired"]
    op.windows_fired = header["windows_fired"]
    op.rows_out = header["rows_out"]
    op.external_watermark = header.get("external_watermark")
    op.batches_by_algorithm = dict(header.get("batches_by_algorithm", {}))
    for s, saved in zip(op.sides, header["sides"], strict=True):
        p = f"side{s.index}_"
        for key, value in saved.items():
            if key != "batch_rows":
                setattr(s, key, value)
        s.batches = from_ipc(arrays[p + "payload"])
        s.batch_rows = list(saved["batch_rows"])
        s._table = None
        for name in ("slots", "first", "last", "origin", "matched"):
            grow = getattr(s, name)
            if grow is not None:
                grow.clear()
                grow.extend(arrays[p + name])
        s.resample()
    op.keys = op.kernels.key_map_from_arrays(op.keys.types, arrays, "keys_")
    if op.aggregate is None:
        _restore_pairs(op, arrays, header.get("rows_at_firing", False))
        return
    op.cells.restore(arrays)
    if op.factorised:
        for side in op.sides:
            op._count_factorised(side)


def _restore_pairs(op: JoinOperator, arrays: dict[str, np.ndarray], saved_at_firing: bool) -> None:
    """The pending pairs of a join without aggregation: none at firing (its windows'
    rows are stored); else those saved, or, from a snapshot of the rows=firing form
    (which keeps none), the pairs of every stored row, found again."""
    if op.at_firing:
        return
    if op.device_rows is not None:
        op.device_rows.restore(arrays)
    else:
        for n, g in op.pending.items():
            g.clear()
            g.extend(arrays[f"pending_{n}"])
    left = op.sides[0]
    if saved_at_firing and left.rows and op.sides[1].rows:
        if op.device_rows is not None:
            op._join_device_rows(left, left.slots.view)
        else:
            view = (left.slots.view, left.first.view, left.last.view)
            op._join_new(left, left.base, *view)
