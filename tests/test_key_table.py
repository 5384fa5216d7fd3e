"""The CPU key table (runtime/cpu/keys.py): keys -> dense slots in first-seen order, with and
without the direct array of one-column keys, against a plain dict; across batches that widen
or leave the direct range, NULL keys, excluded rows, growth, and a snapshot in between."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import keys as cpu_keys


def _reference(batches: list[tuple[list, np.ndarray]]) -> list[list[int]]:
    slots: dict = {}
    out = []
    for values, include in batches:
        batch = []
        for value, keep in zip(values, include, strict=True):
            if not keep:
                batch.append(-1)
                continue
            batch.append(slots.setdefault(value, len(slots)))
        out.append(batch)
    return out


def _batches(rng: np.random.Generator, kind: str) -> list[tuple[list, np.ndarray]]:
    batches = []
    for b in range(6):
        n = int(rng.integers(0, 3000))
        if kind == "small":
            values = rng.integers(-20, 20 + 100 * b, n).tolist()
        elif kind == "wide":  # leaves the direct span after the second batch
            values = rng.integers(0, 50 if b < 2 else 10**12, n).tolist()
        else:  # mixed: a small range, then a far-away cluster
            values = (rng.integers(0, 30, n) + (0 if b % 2 else 5 * 10**6)).tolist()
        values = [None if rng.random() < 0.05 else v for v in values]
        batches.append((values, rng.random(n) > 0.1))
    return batches


@pytest.mark.parametrize("kind", ["small", "wide", "mixed"])
@pytest.mark.parametrize("direct_span", [cpu_keys.DIRECT_SPAN, 0])
def test_slots_are_first_seen_order_with_and_without_the_direct_array(
    monkeypatch, kind: str, direct_span: int
) -> None:
    monkeypatch.setattr(cpu_keys, "DIRECT_SPAN", direct_span)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        batches = _batches(rng, kind)
        want = _reference(batches)
        table = cpu_keys.KeyTable((SqlType.BIGINT,))
        for i, ((values, include), expected) in enumerate(zip(batches, want, strict=True)):
            if i == 3:  # a snapshot in between: the direct array is rebuilt, slots stay
                table = cpu_keys.KeyTable.from_arrays(table.types, table.to_arrays("k_"), "k_")
            got = table.map_columns([pa.array(values, pa.int64())], include)
            assert got.tolist() == expected, (kind, seed, i)
        if direct_span and kind == "small":
            assert len(table.direct) > 0  # the path under test ran
        decoded = table.decode(np.arange(table.n_slots))[0].to_pylist()
        met = [v for vs, inc in batches for v, k in zip(vs, inc, strict=True) if k]
        first_seen = list(dict.fromkeys(met))
        assert decoded == first_seen


def test_two_column_keys_take_the_hash_path() -> None:
    table = cpu_keys.KeyTable((SqlType.INT, SqlType.INT))
    a, b = pa.array([1, 1, 2, None, 1]), pa.array([1, 2, 1, 1, 1])
    assert table.map_columns([a, b], np.ones(5, np.bool_)).tolist() == [0, 1, 2, 3, 0]
    assert len(table.direct) == 0


@pytest.mark.parametrize(
    ("sql_type", "arrow_type"),
    [
        (SqlType.BIGINT, pa.int64()),
        (SqlType.INT, pa.int32()),
        (SqlType.DOUBLE, pa.float64()),
        (SqlType.TIMESTAMP, pa.timestamp("us")),
    ],
)
def test_lookup_columns_reads_one_column_in_place_as_the_key_rows_give(
    sql_type: SqlType, arrow_type: pa.DataType
) -> None:
    """`lookup_columns` of one column without NULLs reads its codes in place
    (`_lookup_codes`, through the direct array where the codes' range is short): the slots
    the key-matrix lookup (`_lookup_rows`) gives, -1 for keys the table does not hold and
    excluded rows, before and after more keys come; a column with NULLs takes the
    matrix."""
    rng = np.random.default_rng(3)
    table = cpu_keys.KeyTable((sql_type,))
    known = rng.integers(-500, 500, 400)
    if sql_type is SqlType.TIMESTAMP:
        known = np.abs(known)
    column = pa.array(known.astype(arrow_type.to_pandas_dtype()), arrow_type)
    if sql_type is SqlType.DOUBLE:
        column = pa.array(np.append(known[:-3] / 7, [-0.0, np.nan, np.inf]), arrow_type)
    if sql_type is not SqlType.DOUBLE:  # a far key: the first batch gets no direct array
        far = pa.array(np.array([10**9]).astype(arrow_type.to_pandas_dtype()), arrow_type)
        table.map_columns([pa.concat_arrays([column, far])], np.ones(len(column) + 1, np.bool_))
        assert len(table.direct) == 0  # the lookups below make it and record what they find
    else:
        table.map_columns([column], np.ones(len(column), np.bool_))
    probe = pa.concat_arrays([column, column.slice(0, 50)])
    if sql_type is SqlType.DOUBLE:
        probe = pa.concat_arrays([probe, pa.array([0.0, 12345.5], arrow_type)])
    else:
        unknown = np.full(2, 10**6).astype(arrow_type.to_pandas_dtype())
        probe = pa.concat_arrays([probe, pa.array(unknown, arrow_type)])
    include = rng.random(len(probe)) > 0.2
    want = np.empty(len(probe), np.int64)
    cpu_keys._lookup_rows(
        table.encode([probe], len(probe)), include, table.table, table.slot_rows, want
    )
    got = table.lookup_columns([probe], include)
    assert got.tolist() == want.tolist()
    assert (got[~include] == -1).all() and (got[include] >= -1).all()
    assert (got[-2:][include[-2:]] == -1).all() or sql_type is SqlType.DOUBLE
    with_null = pa.concat_arrays([probe, pa.nulls(1, arrow_type)])
    got = table.lookup_columns([with_null], np.append(include, True))
    assert got[:-1].tolist() == want.tolist() and got[-1] == -1
    # keys inserted after the direct array recorded lookups, codes beside its range: the
    # direct path and the hash path still agree with the key matrix's lookup
    more = pa.array((np.arange(5) + 2000).astype(arrow_type.to_pandas_dtype()), arrow_type)
    if sql_type is SqlType.DOUBLE:
        more = pa.array(np.arange(5) + 2000.5, arrow_type)
    table.map_columns([more], np.ones(5, np.bool_))
    probe = pa.concat_arrays([probe, more, probe])
    include = rng.random(len(probe)) > 0.2
    want = np.empty(len(probe), np.int64)
    cpu_keys._lookup_rows(
        table.encode([probe], len(probe)), include, table.table, table.slot_rows, want
    )
    for _ in range(2):  # the second time from the direct array where it covers the codes
        assert table.lookup_columns([probe], include).tolist() == want.tolist()
    assert len(table.direct) > 0 or sql_type is SqlType.DOUBLE
