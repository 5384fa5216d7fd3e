"""Flink's window join (`TABLE(TUMBLE(..)) AS l JOIN TABLE(TUMBLE(..)) AS r ON l.k = r.k AND
l.window_start = r.window_start AND l.window_end = r.window_end`, or each side as `(SELECT *
FROM TABLE(..)) l`): the CQL join's plan (EXPLAIN equal), its results on the same arrivals
and the oracle's, an outer join's missing side with NULL bounds as in Flink, and the errors at
their constructs (the texts: tests/golden/errors.sql, `flink_join_*`)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from fuzz_join_cases import FORMS, S, check_join, draw_join_case, engine_join_rows
from oracle import rows_of
from oracle_join import canonical
from sql_positions import line_and_column

import mangonel
from mangonel.errors import SqlError

TUMBLE = "TABLE(TUMBLE(TABLE {}, DESCRIPTOR(ts), INTERVAL '1' SECOND))"
HOP = "TABLE(HOP(TABLE {}, DESCRIPTOR(ts), INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND))"
BOUNDS = "l.window_start = r.window_start AND l.window_end = r.window_end"
CLICKS = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("ad_id", pa.int64()),
        ("user_id", pa.int64()),
        ("bid", pa.float64()),
    ]
)
VIEWS = pa.schema([("ts", pa.timestamp("us")), ("ad_id", pa.int64()), ("price", pa.float64())])


def session() -> mangonel.Session:
    s = mangonel.Session("cpu")
    s.execute(
        "CREATE STREAM clicks (ts TIMESTAMP, ad_id BIGINT, user_id BIGINT, bid DOUBLE) "
        "WITH (event_time = 'ts', watermark = '200 milliseconds')"
    )
    s.execute(
        "CREATE STREAM views (ts TIMESTAMP, ad_id BIGINT, price DOUBLE) WITH (event_time = 'ts')"
    )
    s.execute("CREATE TABLE ads (ad_id BIGINT, campaign STRING)")
    return s


# (Flink's form, the CQL join it must plan exactly as)
SAME_PLANS = {
    "inner_rows_subqueries": (
        "SELECT L.ad_id, L.user_id, R.price, L.window_start, L.window_end\n"
        f"FROM (SELECT * FROM {TUMBLE.format('clicks')}) L\n"
        f"JOIN (SELECT * FROM {TUMBLE.format('views')}) R\n"
        "  ON L.ad_id = R.ad_id AND L.window_start = R.window_start\n"
        "  AND L.window_end = R.window_end",
        "SELECT L.ad_id, L.user_id, R.price, window_start, window_end "
        "FROM clicks [RANGE 1 SECOND] L JOIN views [RANGE 1 SECOND] R ON L.ad_id = R.ad_id",
    ),
    "left_bare_functions_with_residual": (
        f"SELECT l.ad_id, r.price, l.window_end AS closes FROM {TUMBLE.format('clicks')} AS l "
        f"LEFT OUTER JOIN {TUMBLE.format('views')} AS r "
        f"ON {BOUNDS} AND l.ad_id = r.ad_id AND r.price > 10 WHERE l.bid > 1",
        "SELECT l.ad_id, r.price, window_end AS closes FROM clicks [RANGE 1 SECOND] AS l "
        "LEFT JOIN views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id AND r.price > 10 "
        "WHERE l.bid > 1",
    ),
    "unaliased_functions_unqualified_bounds": (
        f"SELECT clicks.user_id, window_start FROM {TUMBLE.format('clicks')} "
        f"JOIN {TUMBLE.format('views')} ON clicks.ad_id = views.ad_id AND "
        "views.window_end = clicks.window_end AND clicks.window_start = views.window_start",
        "SELECT clicks.user_id, window_start FROM clicks [RANGE 1 SECOND] "
        "JOIN views [RANGE 1 SECOND] ON clicks.ad_id = views.ad_id",
    ),
    "right_join_bounds_of_the_missing_side": (
        f"SELECT l.user_id, r.price, l.window_start, r.window_end FROM {TUMBLE.format('clicks')} "
        f"AS l RIGHT JOIN {TUMBLE.format('views')} AS r ON l.ad_id = r.ad_id AND {BOUNDS}",
        "SELECT l.user_id, r.price, CASE WHEN l.ts IS NOT NULL THEN window_start END AS "
        "window_start, window_end FROM clicks [RANGE 1 SECOND] AS l RIGHT JOIN views "
        "[RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id",
    ),
    "full_join_coalesced_bounds": (
        "SELECT l.user_id, r.price, COALESCE(l.window_start, r.window_start) AS window_start "
        f"FROM {TUMBLE.format('clicks')} AS l FULL JOIN {TUMBLE.format('views')} AS r "
        f"ON l.ad_id = r.ad_id AND {BOUNDS}",
        "SELECT l.user_id, r.price, COALESCE(CASE WHEN l.ts IS NOT NULL THEN window_start END, "
        "CASE WHEN r.ts IS NOT NULL THEN window_start END) AS window_start FROM clicks "
        "[RANGE 1 SECOND] AS l FULL JOIN views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id",
    ),
    "aggregated": (
        "SELECT l.ad_id, l.window_start, COUNT(*) AS n, SUM(l.bid * r.price) AS spend "
        f"FROM {TUMBLE.format('clicks')} AS l JOIN {TUMBLE.format('views')} AS r "
        f"ON l.ad_id = r.ad_id AND {BOUNDS} "
        "GROUP BY l.ad_id, l.window_start, l.window_end HAVING COUNT(*) > 1",
        "SELECT l.ad_id, window_start, COUNT(*) AS n, SUM(l.bid * r.price) AS spend "
        "FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] AS r "
        "ON l.ad_id = r.ad_id GROUP BY l.ad_id HAVING COUNT(*) > 1",
    ),
    "aggregated_full_join_bounds_are_the_window": (
        "SELECT r.window_end, COUNT(l.bid) AS n FROM "
        f"{TUMBLE.format('clicks')} AS l FULL JOIN {TUMBLE.format('views')} AS r "
        f"ON l.ad_id = r.ad_id AND {BOUNDS} GROUP BY r.window_start, l.window_end",
        "SELECT window_end, COUNT(l.bid) AS n FROM clicks [RANGE 1 SECOND] AS l FULL JOIN "
        "views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id",
    ),
    "hop_sliding_named_arguments": (
        "SELECT l.ad_id, l.window_time, MAX(r.price) AS high FROM TABLE(HOP(DATA => TABLE "
        "clicks, TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '1' SECOND, SLIDE => INTERVAL "
        f"'250' MILLISECOND)) AS l JOIN {HOP.format('views')} AS r "
        f"ON {BOUNDS} AND l.ad_id = r.ad_id GROUP BY l.window_start, l.window_end, l.ad_id",
        "SELECT l.ad_id, window_time, MAX(r.price) AS high FROM clicks "
        "[RANGE 1 SECOND SLIDE 250 MILLISECONDS] AS l JOIN views "
        "[RANGE 1 SECOND SLIDE 250 MILLISECONDS] AS r ON l.ad_id = r.ad_id GROUP BY l.ad_id",
    ),
}


@pytest.mark.parametrize("name", sorted(SAME_PLANS))
def test_flink_window_join_plans_as_the_cql_join(name: str) -> None:
    flink, cql = SAME_PLANS[name]
    s = session()
    assert s.sql(flink).explain() == s.sql(cql).explain()
    assert s.sql(flink).explain(format="json") == s.sql(cql).explain(format="json")


# -- results: random join cases in every form, equal to each other and to the oracle ------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("kind", "aggregated", "slides"),
    [
        ("inner", False, 1),
        ("left", False, 1),
        ("inner", True, 1),
        ("full", False, 4),
        ("right", True, 2),
    ],
)
def test_flink_form_results_equal_the_cql_form_and_the_oracle(
    seed: int, kind: str, aggregated: bool, slides: int
) -> None:
    drawn = draw_join_case(7919 * seed + 11)
    case = replace(drawn, kind=kind, aggregated=aggregated, slide=drawn.size // slides)
    results = {}
    for form in FORMS:
        written = replace(case, form=form)
        problem = check_join(written)
        assert problem is None, f"{form}: {problem}\n{written.describe()}"
        rows, late = engine_join_rows(written)
        results[form] = (canonical(rows), late)
    assert results["flink"] == results["clause"] == results["flink-subquery"]


def test_an_outer_joins_missing_side_has_null_bounds_as_in_flink() -> None:
    s = session()
    query = s.sql(
        "SELECT l.user_id, r.price, l.window_start AS l_start, r.window_start AS r_start, "
        "COALESCE(l.window_end, r.window_end) AS window_end "
        f"FROM {TUMBLE.format('clicks')} AS l FULL JOIN {TUMBLE.format('views')} AS r "
        f"ON l.ad_id = r.ad_id AND {BOUNDS}"
    )
    clicks = [{"ts": 100_000, "ad_id": 1, "user_id": 7, "bid": 1.0}]
    clicks.append({"ts": 1_500_000, "ad_id": 3, "user_id": 8, "bid": 2.0})
    views = [{"ts": 200_000, "ad_id": 1, "price": 5.0}, {"ts": 300_000, "ad_id": 2, "price": 6.0}]
    result = query.run(
        [
            ("clicks", pa.RecordBatch.from_pylist(clicks, schema=CLICKS)),
            ("views", pa.RecordBatch.from_pylist(views, schema=VIEWS)),
        ]
    )
    rows = canonical(rows_of(result))
    assert rows == canonical(
        [
            {"user_id": 7, "price": 5.0, "l_start": 0, "r_start": 0, "window_end": S},
            {"user_id": None, "price": 6.0, "l_start": None, "r_start": 0, "window_end": S},
            {"user_id": 8, "price": None, "l_start": S, "r_start": None, "window_end": 2 * S},
        ]
    )


# -- errors at their constructs (the texts: tests/golden/errors.sql) -----------------------


@pytest.mark.parametrize(
    ("query", "at"),
    [
        (
            f"SELECT l.ad_id FROM {TUMBLE.format('clicks')} AS l\n"
            f"JOIN views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id",
            "views [RANGE",
        ),
        (
            f"SELECT l.ad_id FROM {TUMBLE.format('clicks')} AS l\n"
            f"JOIN {HOP.format('views')} AS r ON l.ad_id = r.ad_id AND {BOUNDS}",
            "TABLE(HOP",
        ),
        (
            f"SELECT l.ad_id FROM {TUMBLE.format('clicks')} AS l JOIN {TUMBLE.format('views')} "
            "AS r\n  ON l.ad_id = r.ad_id AND l.window_start = r.window_start",
            "l.ad_id = r.ad_id AND",
        ),
        (
            f"SELECT l.ad_id FROM {TUMBLE.format('clicks')} AS l JOIN {TUMBLE.format('views')} "
            f"AS r\n  ON l.ad_id = r.ad_id AND {BOUNDS} AND r.window_time > l.ts",
            "r.window_time",
        ),
        (
            f"SELECT l.ad_id, COUNT(*) FROM {TUMBLE.format('clicks')} AS l JOIN "
            f"{TUMBLE.format('views')} AS r ON l.ad_id = r.ad_id AND {BOUNDS}\nGROUP BY l.ad_id",
            "GROUP BY",
        ),
        (
            "SELECT l.ad_id FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(user_id), INTERVAL '1' "
            f"SECOND)) AS l JOIN {TUMBLE.format('views')} AS r ON l.ad_id = r.ad_id AND {BOUNDS}",
            "user_id",
        ),
        (
            f"SELECT l.ad_id FROM {TUMBLE.format('clicks')} AS l\nJOIN ads AS a ON "
            "l.ad_id = a.ad_id",
            "ads AS a",
        ),
        (
            "SELECT l.ad_id FROM clicks [SESSION GAP 1 SECOND] AS l\n"
            "JOIN views [SESSION GAP 1 SECOND] AS r ON l.ad_id = r.ad_id",
            "clicks [SESSION",
        ),
    ],
)
def test_errors_point_at_their_construct(query: str, at: str) -> None:
    line, column = line_and_column(query, at)
    with pytest.raises(SqlError) as caught:
        session().sql(query)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)
