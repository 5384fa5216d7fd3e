"""The GPU's wire format: how each column a lift reads crosses PCIe (issue 12, item 4).

The host -> device copy is the GPU path's bound (a 55 GB/s link moves 2.3 G tuples/s at 24
bytes per tuple, 3.4 G at 16), so 64-bit integer columns (TIMESTAMP event times, BIGINT keys
and values) travel as int32 offsets from a per-chunk base when the chunk's values fit
(`runtime.gpu.wire` decides per chunk; a chunk that does not fit travels at 8 bytes and the
kernel reads it wide: the kernels take a per-chunk width flag). Every other column travels at
its declared width (INT 4 B, FLOAT 4 B, DOUBLE 8 B, STRING int32 dictionary ids, BOOLEAN one
byte). A validity byte per row travels only for a batch whose column holds NULLs.

This module is the one place both the renderer (`codegen`: which columns' reads become
`base + offset`) and the runtime's stager and EXPLAIN (`wire: 16 B/tuple (...)`) read.
"""

from __future__ import annotations

from dataclasses import dataclass

from mangonel.catalog.types import SqlType
from mangonel.compiler.physical import LiftExec

# 64-bit integer columns: narrowed per chunk to an int32 offset from the chunk's base
OFFSET_TYPES = (SqlType.TIMESTAMP, SqlType.BIGINT)
_WIRE_NAMES = {
    SqlType.INT: "int32",
    SqlType.FLOAT: "float32",
    SqlType.DOUBLE: "float64",
    SqlType.STRING: "int32 id",
    SqlType.BOOLEAN: "uint8",
}
_WIRE_BYTES = {
    SqlType.INT: 4,
    SqlType.FLOAT: 4,
    SqlType.DOUBLE: 8,
    SqlType.STRING: 4,
    SqlType.BOOLEAN: 1,
}


@dataclass(frozen=True)
class WireColumn:
    """One column on the wire: `offset` columns travel as int32 offsets from a per-chunk
    base when the chunk fits (else 8 bytes for that chunk); the others at `bytes` each."""

    name: str
    type: SqlType
    offset: bool
    bytes: int  # per row when the chunk is narrow (validity not counted)

    def describe(self) -> str:
        kind = "int32+base" if self.offset else _WIRE_NAMES[self.type]
        return f"{self.name} {kind}"


def wire_column(name: str, sql_type: SqlType) -> WireColumn:
    if sql_type in OFFSET_TYPES:
        return WireColumn(name, sql_type, True, 4)
    return WireColumn(name, sql_type, False, _WIRE_BYTES[sql_type])


def wire_columns(lift: LiftExec) -> tuple[WireColumn, ...]:
    """The wire form of every column the lift reads, in the kernels' parameter order."""
    return tuple(wire_column(c.name, c.type) for c in lift.scan.columns)


def describe_wire(lift: LiftExec) -> str:
    """EXPLAIN's `16 B/tuple (ts int32+base, key int32+base, value float64)`: the bytes per
    tuple of NULL-free chunks whose 64-bit columns fit int32 offsets (the common case)."""
    columns = wire_columns(lift)
    total = sum(c.bytes for c in columns)
    return f"{total} B/tuple (" + ", ".join(c.describe() for c in columns) + ")"


__all__ = ["OFFSET_TYPES", "WireColumn", "describe_wire", "wire_column", "wire_columns"]
