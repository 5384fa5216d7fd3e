"""Factorised aggregated joins (runtime/operators/join_factor.py; the planner's choice,
compiler/factorised.py) against the join oracle (tests/oracle_join.py): INNER joins
grouped by join keys whose aggregates each read one side, on uniform and Zipf keys, tumbling
and sliding windows, late rows, snapshot/restore, and int64 sums that wrap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from oracle_join import JoinOracleQuery
from test_join_cpu import (
    CLICKS,
    LEFT,
    RIGHT,
    VIEWS,
    assert_same,
    batch,
    run_engine,
    run_oracle,
    session,
)

from mangonel.compiler import physical as ph

S = 1_000_000
DELAY = [f.name for f in dataclasses.fields(LEFT)][4]  # the watermark delay
SELECT = (
    "SELECT l.k, window_start AS start, COUNT(*) AS n, COUNT(l.x) AS cx, SUM(l.x) AS sx, "
    "AVG(r.y) AS ay, MIN(l.x) AS mnx, MAX(r.y * 2) AS mxy, SUM(r.y) AS sy "
)
AGGREGATES = (
    ("count_star", None),
    ("count", ["col", "l.x"]),
    ("sum", ["col", "l.x"]),
    ("avg", ["col", "r.y"]),
    ("min", ["col", "l.x"]),
    ("max", ["*", ["col", "r.y"], ["lit", 2]]),
    ("sum", ["col", "r.y"]),
)
NAMES = ("n", "cx", "sx", "ay", "mnx", "mxy", "sy")


def sql(size_ms: int, slide_ms: int) -> str:
    window = f"[RANGE {size_ms} MILLISECONDS SLIDE {slide_ms} MILLISECONDS]"
    return SELECT + f"FROM clicks {window} AS l JOIN views {window} AS r ON l.k = r.k GROUP BY l.k"


def oracle_query(size: int, slide: int, delays=(0, 0)) -> JoinOracleQuery:  # noqa: ANN001
    left = dataclasses.replace(LEFT, **{DELAY: delays[0]})
    right = dataclasses.replace(RIGHT, **{DELAY: delays[1]})
    return JoinOracleQuery(
        left,
        right,
        "inner",
        size,
        slide,
        ("k",),
        ("k",),
        keys=("l.k",),
        aggregates=AGGREGATES,
        outputs=(
            ("k", ["col", "l.k"]),
            ("start", ["bound", "start"]),
            *((name, ["agg", i]) for i, name in enumerate(NAMES)),
        ),
    )


def arrivals(seed: int, skew: float, keys: int = 12, batches: int = 14) -> list:
    """Random batches of both streams, out of order within a spread (some rows late),
    NULL keys and values, Zipf-like key popularity when skew > 0."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1) ** skew
    weights /= weights.sum()
    out = []
    now = 0
    for i in range(batches):
        now += int(rng.integers(100_000, 600_000))
        n = int(rng.integers(1, 25))
        ts = now - rng.integers(0, 1_500_000, n)
        ks = rng.choice(keys, n, p=weights)
        if i % 2 == 0:
            rows = [
                {
                    "ts": max(0, int(t)),
                    "k": None if rng.random() < 0.05 else int(k),
                    "x": None if rng.random() < 0.1 else int(rng.integers(-50, 50)),
                }
                for t, k in zip(ts, ks, strict=True)
            ]
            out.append(("clicks", batch(CLICKS, rows)))
        else:
            rows = [
                {
                    "ts": max(0, int(t)),
                    "k": None if rng.random() < 0.05 else int(k),
                    "y": None if rng.random() < 0.1 else float(rng.normal()),
                }
                for t, k in zip(ts, ks, strict=True)
            ]
            out.append(("views", batch(VIEWS, rows)))
    return out


def test_the_planner_factorises_only_the_shape_it_can() -> None:
    s = session()
    query = s.sql(sql(1000, 1000))
    assert ph.find(query.plan, ph.JoinAggregateExec).factorised is not None
    assert "fused=factorised" in query.explain()
    pairs = Session_off().sql(sql(1000, 1000))
    assert ph.find(pairs.plan, ph.JoinAggregateExec).factorised is None
    window = "[RANGE 1 SECOND]"
    source = f"FROM clicks {window} AS l {{}} JOIN views {window} AS r ON l.k = r.k{{}}"
    not_factorised = [
        ("SELECT l.k, COUNT(*) AS n ", "LEFT", " GROUP BY l.k"),  # outer
        ("SELECT l.k, COUNT(*) AS n ", "", " AND l.x > r.y GROUP BY l.k"),  # residual
        ("SELECT l.k, COUNT(*) AS n ", "", " WHERE l.x > 0 GROUP BY l.k"),  # WHERE
        ("SELECT l.x, COUNT(*) AS n ", "", " GROUP BY l.x"),  # not a join key
        ("SELECT l.k, SUM(l.x * r.y) AS n ", "", " GROUP BY l.k"),  # both sides
        ("SELECT l.k, VAR_POP(l.x) AS n ", "", " GROUP BY l.k"),  # another state kind
    ]
    for head, kind, tail in not_factorised:
        query = s.sql(head + source.format(kind, tail))
        assert ph.find(query.plan, ph.JoinAggregateExec).factorised is None, head + tail
        assert "fused=probe" in query.explain()


def Session_off():  # noqa: ANN201, N802
    from mangonel.session import Session

    s = Session("cpu", join_factorised=False)
    for statement in (
        "CREATE STREAM clicks (ts TIMESTAMP, k BIGINT, x BIGINT) WITH (event_time = 'ts')",
        "CREATE STREAM views (ts TIMESTAMP, k INT, y DOUBLE) WITH (event_time = 'ts')",
    ):
        s.execute(statement)
    return s


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("size_ms", "slide_ms"), [(1000, 1000), (1000, 250), (900, 300)])
@pytest.mark.parametrize("skew", [0.0, 1.2])
def test_random_factorised_joins_match_the_oracle(
    seed: int, size_ms: int, slide_ms: int, skew: float
) -> None:
    delays = (0, 0) if seed % 2 else (300_000, 700_000)
    cases = arrivals(seed, skew)
    expected, oracle = run_oracle(oracle_query(size_ms * 1000, slide_ms * 1000, delays), cases)
    assert len(expected) > 5
    query = session(delays=delays).sql(sql(size_ms, slide_ms))
    assert ph.find(query.plan, ph.JoinAggregateExec).factorised is not None
    for restore_at in (None, seed + 1):
        got = run_engine(query, cases, restore_at)
        assert_same(got, expected)
    assert dict(query.metrics.late_by_input) == oracle.late


def test_the_random_cases_hold_late_rows() -> None:
    late = [run_oracle(oracle_query(S, S // 4), arrivals(seed, 0.0))[1].late for seed in range(6)]
    assert any(sum(counts.values()) for counts in late)


def test_integer_sums_wrap_as_int64() -> None:
    """SUM(l.x) = s_l * n_r wraps mod 2^64 as adding n_r copies does (Spark's BIGINT sum)."""
    big = 2**62
    cases = [
        ("clicks", batch(CLICKS, [{"ts": 100, "k": 1, "x": big}, {"ts": 200, "k": 1, "x": 3}])),
        ("views", batch(VIEWS, [{"ts": 300 + i, "k": 1, "y": 1.0} for i in range(5)])),
        ("clicks", batch(CLICKS, [{"ts": 3 * S, "k": 2, "x": 0}])),
        ("views", batch(VIEWS, [{"ts": 3 * S, "k": 2, "y": 0.0}])),
    ]
    expected, _ = run_oracle(oracle_query(S, S), cases)
    got = run_engine(session().sql(sql(1000, 1000)), cases)
    assert_same(got, expected)
    want = ((big + 3) * 5 + 2**63) % 2**64 - 2**63
    assert [r["sx"] for r in got if r["k"] == 1] == [want]
