"""The oracle of ARRAY and STRUCT results (docs/semantics.md, "ARRAY and STRUCT results"),
beside tests/oracle.py and sharing no code with the engine.

- A percentile over an ARRAY of p (`PERCENTILE(x, ARRAY(0.25, 0.5))`, PERCENTILE_CONT,
  PERCENTILE_DISC, APPROX_PERCENTILE) is, element by element in the order of the ps, the
  single-p percentile at each p as tests/oracle.py defines it; the whole list is NULL where
  the window has no non-NULL value (Spark's: NULL, not a list of NULLs).
- Spark's `window` / `session_window` column is the struct {start, end} of the window's
  bounds.

`ArrayOracle` runs the window oracle over the query with each array aggregate expanded into
its single-p aggregates and the struct into its two bounds, then puts the lists and structs
together again. Aggregate names: "percentile_cont:[0.25,0.5]" (also percentile,
percentile_disc) and "approx_percentile:[0.1,0.9]:<accuracy>"; the output expression
["window_struct"] is the struct. `explode` turns rows of lists and structs into scalar
columns, so `oracle.first_difference` compares them element by element (its tolerances and
`Approximate` bounds included).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from typing import Any

from oracle import Expr, Oracle, OracleQuery

WINDOW_STRUCT = ["window_struct"]
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def array_name(function: str, ps: list[float], accuracy: int | None = None) -> str:
    """The oracle name of a percentile over an ARRAY of p."""
    name = f"{function}:{json.dumps(ps, separators=(',', ':'))}"
    return name if accuracy is None else f"{name}:{accuracy}"


def _single_names(function: str) -> list[str] | None:
    """The single-p oracle names of an array aggregate, in the order of its ps; None for
    any other aggregate."""
    parts = function.split(":")
    if len(parts) < 2 or not parts[1].startswith("["):
        return None
    rest = parts[2:]
    return [":".join([parts[0], repr(float(p)), *rest]) for p in json.loads(parts[1])]


def _renumber(expr: Expr | None, mapping: dict[int, int]) -> Expr | None:
    if not isinstance(expr, list) or not expr:
        return expr
    if expr[0] == "agg":
        return ["agg", mapping[expr[1]]]
    if expr[0] in ("col", "lit", "bound"):
        return expr
    return [expr[0], *(_renumber(e, mapping) for e in expr[1:])]


def _reads(expr: Expr | None, numbers: set[int]) -> bool:
    if not isinstance(expr, list) or not expr:
        return False
    if expr[0] == "agg":
        return expr[1] in numbers
    return any(_reads(e, numbers) for e in expr[1:] if isinstance(e, list))


class ArrayOracle:
    """`oracle.Oracle` for queries with array aggregates and struct outputs (module
    docstring): `process`, `finish`, `tolerances` and the metrics as the window oracle's."""

    def __init__(self, query: OracleQuery) -> None:
        aggregates: list[tuple[str, Expr | None]] = []
        self.arrays: dict[int, list[int]] = {}  # array aggregate -> its single-p positions
        first: dict[int, int] = {}  # any aggregate -> its (first) expanded position
        for number, (function, argument) in enumerate(query.aggregates):
            singles = _single_names(function)
            first[number] = len(aggregates)
            if singles is None:
                aggregates.append((function, argument))
                continue
            self.arrays[number] = list(range(len(aggregates), len(aggregates) + len(singles)))
            aggregates += [(single, argument) for single in singles]
        arrays = set(self.arrays)
        if _reads(query.having, arrays):
            raise ValueError("an ARRAY result in HAVING: the engine refuses it")
        outputs: list[tuple[str, Expr]] = []
        self.array_outputs: dict[str, int] = {}  # output name -> number of elements
        self.struct_outputs: list[str] = []
        for name, expr in query.outputs:
            if expr == WINDOW_STRUCT:
                self.struct_outputs.append(name)
                outputs += [
                    (f"{name}.start", ["bound", "start"]),
                    (f"{name}.end", ["bound", "end"]),
                ]
            elif expr[0] == "agg" and expr[1] in arrays:
                positions = self.arrays[expr[1]]
                self.array_outputs[name] = len(positions)
                outputs += [(f"{name}[{j}]", ["agg", p]) for j, p in enumerate(positions)]
            elif _reads(expr, arrays):
                raise ValueError(f"output {name} computes with an ARRAY: the engine refuses it")
            else:
                outputs.append((name, _renumber(expr, first)))
        expanded = replace(
            query,
            aggregates=tuple(aggregates),
            having=_renumber(query.having, first),
            outputs=tuple(outputs),
        )
        self.oracle = Oracle(expanded)
        self.names = [name for name, _ in query.outputs]
        self.tolerances: list[dict] = []

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the metrics of the oracle
        return getattr(self.oracle, name)

    def process(self, rows: list[dict]) -> list[dict]:
        return self._assembled(self.oracle.process(rows))

    def finish(self) -> list[dict]:
        return self._assembled(self.oracle.finish())

    def _assembled(self, rows: list[dict]) -> list[dict]:
        self.tolerances = list(self.oracle.tolerances)  # keyed by the exploded names
        out = []
        for row in rows:
            assembled = {}
            for name in self.names:
                if name in self.struct_outputs:
                    assembled[name] = {"start": row[f"{name}.start"], "end": row[f"{name}.end"]}
                elif name in self.array_outputs:
                    values = [row[f"{name}[{j}]"] for j in range(self.array_outputs[name])]
                    # a percentile is NULL only over no non-NULL value: then at every p
                    assembled[name] = None if all(v is None for v in values) else values
                else:
                    assembled[name] = row[name]
            out.append(assembled)
        return out


def _micros(value: Any) -> Any:  # noqa: ANN401
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // datetime.timedelta(microseconds=1)
    return value


def explode(rows: list[dict], arrays: set[str] | dict) -> list[dict]:
    """Rows with each list column of `arrays` as `name[j]` columns and `name is null`, each
    struct as `name.field` columns (timestamps as microseconds): what `first_difference`
    compares."""
    out = []
    for row in rows:
        flat: dict[str, Any] = {}
        for name, value in row.items():
            if name in arrays:
                flat[f"{name} is null"] = value is None
                for j, element in enumerate(value or []):
                    flat[f"{name}[{j}]"] = element
            elif isinstance(value, dict):
                for field, element in value.items():
                    flat[f"{name}.{field}"] = _micros(element)
            else:
                flat[name] = value
        out.append(flat)
    return out
