"""Spark's `window` and `session_window` struct columns as outputs (`SELECT window, k, SUM(v)
FROM s GROUP BY window(ts, '1 second'), k`): a STRUCT<start: TIMESTAMP, end: TIMESTAMP> column
against the array oracle's struct (tests/oracle_arrays.py: the window's bounds), its Arrow and
SQL types, EXPLAIN, and the refusals (the struct computed with, or without a window)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fuzzer import Scenario
from holistic_stream import COLUMNS, DDL, batch_of, cpu_session
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import OracleQuery
from oracle_arrays import WINDOW_STRUCT
from test_holistic import SETTINGS
from test_percentile_arrays import check_arrays

from mangonel.catalog.types import WINDOW_STRUCT as STRUCT_TYPE
from mangonel.errors import MangonelError


@st.composite
def struct_scenarios(draw, kind: str) -> Scenario:
    if kind == "session":
        size = slide = draw(st.integers(1, 12))
        grouping = f"session_window(ts, '{size} microseconds')"
        name = "session_window"
    else:
        slide = draw(st.integers(1, 10))
        size = draw(st.one_of(st.just(slide), st.integers(1, 5).map(lambda f: f * slide)))
        grouping = f"window(ts, '{size} microseconds', '{slide} microseconds')"
        name = "window"
    delay = draw(st.integers(0, 20))
    rows = draw(st.integers(0, 60))
    data = [
        {
            "ts": i + draw(st.integers(0, 25)),
            "k": draw(st.integers(0, 3)),
            "x": draw(st.one_of(st.none(), st.integers(-9, 9))),
            "n": 0,
            "v": None,
        }
        for i in range(rows)
    ]
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=3)))
    batches = [data[a:b] for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    alias = draw(st.sampled_from([None, "w"]))
    output = name if alias is None else alias
    item = name if alias is None else f"{name} AS {alias}"
    query = f"SELECT {item}, k, SUM(x) AS total FROM s GROUP BY {grouping}, k"
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind="session" if kind == "session" else "time",
        size=size,
        slide=slide,
        delay=delay,
        keys=("k",),
        aggregates=(("sum", ["col", "x"]),),
        outputs=((output, WINDOW_STRUCT), ("k", ["col", "k"]), ("total", ["agg", 0])),
    )
    snapshot = tuple(sorted(set(draw(st.lists(st.integers(0, len(batches)), max_size=1)))))
    return Scenario(DDL.format(delay=delay), query, oracle, batches, snapshot)


@settings(max_examples=40, **SETTINGS)
@given(struct_scenarios("time"))
def test_the_window_struct_matches_the_oracle(scenario):
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=25, **SETTINGS)
@given(struct_scenarios("session"))
def test_the_session_window_struct_matches_the_oracle(scenario):
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


def test_the_struct_is_named_typed_and_explained():
    query = cpu_session().sql(
        "SELECT window, k, COUNT(*) AS n FROM s GROUP BY window(ts, '10 microseconds'), k"
    )
    assert query.schema.field("window").type == STRUCT_TYPE.info.arrow
    assert "window:STRUCT<start: TIMESTAMP, end: TIMESTAMP>=window" in query.explain()
    table = query.run([batch_of([{"ts": 3, "k": 1}])])
    column = table.column("window").combine_chunks()
    assert column.field("start").cast(pa.int64()).to_pylist() == [0]
    assert column.field("end").cast(pa.int64()).to_pylist() == [10]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "SELECT k FROM s GROUP BY window(ts, '10 microseconds'), k HAVING window IS NULL",
            "the window struct is output as a column as it is",
        ),
        (
            "SELECT COALESCE(window, window) FROM s GROUP BY window(ts, '10 microseconds')",
            "the window struct is output as a column as it is",
        ),
        (
            "SELECT session_window IS NULL FROM s GROUP BY session_window(ts, '3 microseconds')",
            "the session_window struct is output as a column as it is",
        ),
        ("SELECT window, k FROM s [RANGE 10 MICROSECONDS] GROUP BY k", "needs a window"),
    ],
)
def test_the_struct_is_refused_where_it_is_not_an_output(query, message):
    with pytest.raises(MangonelError) as raised:
        cpu_session().sql(query)
    assert message in str(raised.value)
