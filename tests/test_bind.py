"""The binder: every wave-1 query form binds to the logical plan it means."""

from __future__ import annotations

import pytest
from sqlglot import exp

from mangonel.catalog.catalog import Catalog, Schema, Table
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.bind import BoundQuery, bind
from mangonel.compiler.limits import MAX_PANES_PER_WINDOW, MAX_ROWS_PER_WINDOW
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.logical import WindowKind
from mangonel.compiler.nodes import AggregateRef, Explain, WindowBound
from mangonel.compiler.parse import parse_statement
from mangonel.compiler.streams import stream_from_ddl
from mangonel.errors import CatalogError, PlanError, SqlError

SECOND = 1_000_000


@pytest.fixture
def catalog() -> Catalog:
    catalog = Catalog()
    for ddl in (
        "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT, "
        "venue INT, Flag BOOLEAN) WITH (event_time = 'ts', watermark = '500 milliseconds')",
        "CREATE STREAM clicks (event_time TIMESTAMP, user_id BIGINT) "
        "WITH (event_time = 'event_time')",
    ):
        catalog.add_stream(stream_from_ddl(parse_statement(ddl)))
    catalog.add_table(Table("symbols", Schema(())))
    return catalog


def bound(catalog: Catalog, text: str) -> BoundQuery:
    statement = parse_statement(text)
    if isinstance(statement, Explain):
        statement = statement.this
    return bind(statement, catalog)


def unwrap(query: BoundQuery):
    """(outputs, having, window aggregate, where, scan) of the one wave-1 shape."""
    project = query.logical
    node = project.child
    having = None
    if isinstance(node, lg.Filter):
        having, node = node.predicate, node.child
    aggregate = node
    assert isinstance(aggregate, lg.WindowAggregate)
    node = aggregate.child
    where = None
    if isinstance(node, lg.Filter):
        where, node = node.predicate, node.child
    assert isinstance(node, lg.StreamScan)
    return project.outputs, having, aggregate, where, node


def col(name: str) -> exp.Column:
    return exp.Column(this=exp.Identifier(this=name, quoted=True))


def ref(index: int) -> AggregateRef:
    return AggregateRef(this=index)


def test_the_design_example(catalog: Catalog) -> None:
    query = bound(
        catalog,
        """SELECT symbol, window_start, window_end,
                  COUNT(*) AS n, AVG(price) AS avg_price,
                  SUM(price * volume) / SUM(volume) AS vwap
           FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
           WHERE volume > 0
           GROUP BY symbol""",
    )
    outputs, having, aggregate, where, scan = unwrap(query)
    assert [o.name for o in outputs] == [
        "symbol",
        "window_start",
        "window_end",
        "n",
        "avg_price",
        "vwap",
    ]
    assert [o.type for o in outputs] == [
        SqlType.STRING,
        SqlType.TIMESTAMP,
        SqlType.TIMESTAMP,
        SqlType.BIGINT,
        SqlType.DOUBLE,
        SqlType.DOUBLE,
    ]
    assert outputs[0].expression == col("symbol")
    assert outputs[1].expression == WindowBound(this="start")
    assert outputs[2].expression == WindowBound(this="end")
    assert outputs[3].expression == ref(0)
    assert outputs[5].expression == exp.Div(this=ref(2), expression=ref(3))
    assert having is None
    assert aggregate.window == lg.WindowSpec(WindowKind.TIME, SECOND, 10_000, 500_000)
    assert [k.name for k in aggregate.keys] == ["symbol"]
    assert aggregate.aggregates == (
        lg.Aggregate(F.COUNT_STAR, None, SqlType.BIGINT),
        lg.Aggregate(F.AVG, col("price"), SqlType.DOUBLE),
        lg.Aggregate(F.SUM, exp.Mul(this=col("price"), expression=col("volume")), SqlType.DOUBLE),
        lg.Aggregate(F.SUM, col("volume"), SqlType.BIGINT),
    )
    assert query.argument_types == {1: SqlType.DOUBLE, 2: SqlType.DOUBLE, 3: SqlType.BIGINT}
    assert where == exp.GT(this=col("volume"), expression=exp.Literal.number(0))
    # only the columns read, in schema order, the event time always included
    assert [c.name for c in scan.columns] == ["ts", "symbol", "price", "volume"]
    assert query.stream.name == "trades"
    assert query.window == aggregate.window


def test_tumbling_window_and_global_aggregate(catalog: Catalog) -> None:
    query = bound(catalog, "SELECT COUNT(*) FROM trades [RANGE 1 SECOND]")
    outputs, _, aggregate, where, scan = unwrap(query)
    assert aggregate.window == lg.WindowSpec(WindowKind.TIME, SECOND, SECOND, 500_000)
    assert aggregate.keys == ()
    assert where is None
    assert [c.name for c in scan.columns] == ["ts"]
    assert outputs[0].name == "COUNT(*)"
    assert query.argument_types == {}


def test_rows_window_without_watermark_takes_the_streams(catalog: Catalog) -> None:
    query = bound(catalog, "SELECT COUNT(*) FROM trades [ROWS 100]")
    assert query.window == lg.WindowSpec(WindowKind.COUNT, 100, 100, 500_000)


def test_rows_window(catalog: Catalog) -> None:
    query = bound(
        catalog, "SELECT user_id, COUNT(*) FROM clicks [ROWS 1024 SLIDE 2] GROUP BY user_id"
    )
    _, _, aggregate, _, scan = unwrap(query)
    assert aggregate.window == lg.WindowSpec(WindowKind.COUNT, 1024, 2, 0)
    assert [c.name for c in scan.columns] == ["event_time", "user_id"]


def test_watermark_in_the_clause_overrides_the_streams(catalog: Catalog) -> None:
    query = bound(catalog, "SELECT MAX(price) FROM trades [RANGE 2 SECONDS WATERMARK 0 s]")
    assert query.window.watermark_delay_us == 0
    query = bound(catalog, "SELECT MAX(price) FROM trades [ROWS 10 WATERMARK 1 MINUTE]")
    assert query.window.watermark_delay_us == 60 * SECOND


def test_interval_durations(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT COUNT(*) FROM trades [RANGE INTERVAL '5' MINUTE SLIDE INTERVAL '30 seconds']",
    )
    assert (query.window.size, query.window.slide) == (300 * SECOND, 30 * SECOND)


def test_multiple_keys_and_having(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT venue, symbol, COUNT(*) AS n FROM trades [RANGE 1 SECOND] "
        "GROUP BY symbol, venue HAVING COUNT(*) > 10 AND MIN(price) > 1",
    )
    outputs, having, aggregate, _, scan = unwrap(query)
    assert [k.name for k in aggregate.keys] == ["symbol", "venue"]
    assert having == exp.And(
        this=exp.GT(this=ref(0), expression=exp.Literal.number(10)),
        expression=exp.GT(this=ref(1), expression=exp.Literal.number(1)),
    )
    assert aggregate.aggregates[1] == lg.Aggregate(F.MIN, col("price"), SqlType.DOUBLE)
    assert [c.name for c in scan.columns] == ["ts", "symbol", "price", "venue"]
    assert [o.type for o in outputs] == [SqlType.INT, SqlType.STRING, SqlType.BIGINT]


def test_having_may_name_a_select_alias(catalog: Catalog) -> None:
    query = bound(catalog, "SELECT COUNT(*) AS n FROM trades [RANGE 1 SECOND] HAVING n >= 2")
    _, having, aggregate, _, _ = unwrap(query)
    assert having == exp.GTE(this=ref(0), expression=exp.Literal.number(2))
    assert len(aggregate.aggregates) == 1


def test_a_having_alias_shadowing_an_ungrouped_column_is_the_alias(catalog: Catalog) -> None:
    """As Spark resolves it (found by probing against Spark SQL: `MIN(price) AS price ..
    HAVING price < 0` was refused as an ungrouped column); a grouped column keeps its name."""
    query = bound(
        catalog,
        "SELECT symbol, SUM(volume) AS total, MIN(price) AS price FROM trades [RANGE 1 SECOND] "
        "GROUP BY symbol HAVING price < 0",
    )
    _, having, aggregate, _, _ = unwrap(query)
    assert aggregate.aggregates[1] == lg.Aggregate(F.MIN, col("price"), SqlType.DOUBLE)
    assert having == exp.LT(this=ref(1), expression=exp.Literal.number(0))
    grouped = bound(
        catalog,
        "SELECT symbol, COUNT(*) AS venue FROM trades [RANGE 1 SECOND] "
        "GROUP BY symbol, venue HAVING venue > 1",
    )
    _, having, aggregate, _, _ = unwrap(grouped)
    assert aggregate.aggregates[0].function is F.COUNT_STAR
    assert having.this != ref(0)  # the grouped column, not COUNT(*)


def test_identical_aggregate_calls_share_one_slot(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT SUM(price) AS a, sum(PRICE) + 1 AS b, VARIANCE(price) AS v, "
        "VAR_SAMP(price) AS w, STDDEV(price) AS s, STDDEV_SAMP(price) AS t "
        "FROM trades [RANGE 1 SECOND] HAVING SUM(price) > 0",
    )
    outputs, having, aggregate, _, _ = unwrap(query)
    assert [a.function for a in aggregate.aggregates] == [F.SUM, F.VAR_SAMP, F.STDDEV_SAMP]
    assert outputs[1].expression == exp.Add(this=ref(0), expression=exp.Literal.number(1))
    assert outputs[3].expression == ref(1)
    assert having.this == ref(0)


def test_aggregate_result_types(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT COUNT(price), COUNT(symbol), SUM(volume), SUM(venue), SUM(price), MIN(venue), "
        "MAX(ts), AVG(volume), VAR_POP(volume), STDDEV_POP(venue) FROM trades [RANGE 1 SECOND]",
    )
    assert [o.type for o in query.outputs] == [
        SqlType.BIGINT,
        SqlType.BIGINT,
        SqlType.BIGINT,
        SqlType.BIGINT,
        SqlType.DOUBLE,
        SqlType.INT,
        SqlType.TIMESTAMP,
        SqlType.DOUBLE,
        SqlType.DOUBLE,
        SqlType.DOUBLE,
    ]
    functions = [a.function for a in unwrap(query)[2].aggregates]
    assert functions[:3] == [F.COUNT, F.COUNT, F.SUM]
    assert query.argument_types[1] is SqlType.STRING


def test_expressions_around_and_inside_aggregates(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT window_end, ROUND(SUM(price * volume) / SUM(volume), 2) AS vwap, "
        "MAX(CASE WHEN Flag THEN price ELSE 0 END) AS m "
        "FROM trades [RANGE 1 SECOND SLIDE 500 MILLISECONDS] WHERE NOT flag OR price > 1",
    )
    outputs, _, aggregate, where, scan = unwrap(query)
    assert outputs[1].type is SqlType.DOUBLE
    assert isinstance(outputs[1].expression, exp.Round)
    assert aggregate.aggregates[2].argument.find(exp.Column) == col("Flag")
    assert where.find(exp.Column) == col("Flag")  # schema spelling, whatever was written
    assert [c.name for c in scan.columns] == ["ts", "price", "volume", "Flag"]


def test_columns_resolve_case_insensitively_with_qualifiers(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT t.SYMBOL, trades.Symbol AS s2, MAX(T.price) FROM trades [RANGE 1 SECOND] AS t "
        "GROUP BY Symbol",
    )
    outputs = query.outputs
    assert outputs[0].name == "symbol"
    assert outputs[0].expression == col("symbol")
    assert outputs[1].expression == col("symbol")
    assert all(
        c.args.get("table") is None
        for c in query.logical.outputs[2].expression.walk()
        if isinstance(c, exp.Column)
    )


def test_unnamed_outputs_are_named_by_their_text(catalog: Catalog) -> None:
    query = bound(
        catalog,
        "SELECT sum(price*volume)/sum(volume), window_start AS ws, count(*) + 1 "
        "FROM trades [RANGE 1 SECOND]",
    )
    # The user's text (as Spark names outputs), not sqlglot's normalised SQL.
    assert [o.name for o in query.outputs] == [
        "sum(price*volume)/sum(volume)",
        "ws",
        "count(*) + 1",
    ]


@pytest.mark.parametrize(
    ("select", "names"),
    [
        # sqlglot reads both as exp.Variance: names from its node collided
        (
            "symbol, VAR_SAMP(price), VARIANCE(price)",
            ["symbol", "VAR_SAMP(price)", "VARIANCE(price)"],
        ),
        ("VAR_POP(price), STDDEV(price)", ["VAR_POP(price)", "STDDEV(price)"]),
        ("MAX(CEILING(price)), SUM(POW(price, 2))", ["MAX(CEILING(price))", "SUM(POW(price, 2))"]),
        ("SUM(SIGNUM(price))", ["SUM(SIGNUM(price))"]),
        ('SUM(`price`), MIN("price")', ["SUM(`price`)", 'MIN("price")']),
        ("COUNT(*) /* x */, COUNT( /* y */ volume )", ["COUNT(*)", "COUNT( volume )"]),
        ("SUM(price)\n  +\t1 -- trailing\n", ["SUM(price) + 1"]),
    ],
)
def test_unnamed_outputs_keep_the_users_spelling(
    catalog: Catalog, select: str, names: list[str]
) -> None:
    query = bound(catalog, f"SELECT {select} FROM trades [RANGE 1 SECOND] GROUP BY symbol")
    assert [o.name for o in query.outputs] == names


def test_unnamed_outputs_in_explain_keep_the_users_spelling(catalog: Catalog) -> None:
    statement = parse_statement(
        "EXPLAIN SELECT VAR_SAMP(price), VARIANCE(price) FROM trades [RANGE 1 SECOND]"
    )
    assert isinstance(statement, Explain)
    names = [o.name for o in bind(statement.this, catalog).outputs]
    assert names == ["VAR_SAMP(price)", "VARIANCE(price)"]


def test_two_outputs_with_one_name_are_refused_naming_both(catalog: Catalog) -> None:
    with pytest.raises(SqlError) as error:
        bound(
            catalog, "SELECT SUM(price), MAX(price) AS x, sum(price) FROM trades [RANGE 1 SECOND]"
        )
    message = str(error.value)
    assert "SELECT items 1 (SUM(price)) and 3 (sum(price)) are both named 'sum(price)'" in message
    assert "line 1, column 37" in message and "in: sum(price)" in message


def test_windows_without_aggregates(catalog: Catalog) -> None:
    query = bound(
        catalog, "SELECT symbol, window_start FROM trades [RANGE 1 SECOND] GROUP BY symbol"
    )
    _, _, aggregate, _, _ = unwrap(query)
    assert aggregate.aggregates == ()


def test_group_by_key_not_selected(catalog: Catalog) -> None:
    query = bound(catalog, "SELECT COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY venue")
    assert [k.name for k in unwrap(query)[2].keys] == ["venue"]


def test_explain_binds_its_query(catalog: Catalog) -> None:
    query = bound(catalog, "EXPLAIN CODEGEN SELECT AVG(price) FROM trades [RANGE 1 SECOND]")
    assert query.outputs[0].type is SqlType.DOUBLE


def test_quoted_names(catalog: Catalog) -> None:
    catalog.add_stream(
        stream_from_ddl(
            parse_statement(
                'CREATE STREAM `odd stream` ("my ts" TIMESTAMP, `a"b` BIGINT) '
                "WITH (event_time = 'my ts')"
            )
        )
    )
    query = bound(catalog, 'SELECT SUM(`a"b`) AS total FROM `odd stream` [RANGE 1 SECOND]')
    aggregate = unwrap(query)[2].aggregates[0]
    assert aggregate.argument == col('a"b')
    assert [c.name for c in unwrap(query)[4].columns] == ["my ts", 'a"b']


# -- a few errors beyond the golden file: their class and position --------------------------


def error_of(catalog: Catalog, text: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        bound(catalog, text)
    return caught.value


def test_unknown_stream_is_a_catalog_error(catalog: Catalog) -> None:
    error = error_of(catalog, "SELECT COUNT(*) FROM nope [RANGE 1 SECOND]")
    assert isinstance(error, CatalogError)
    assert (error.line, error.column) == (1, 22)
    assert error.hint == "known streams: clicks, trades"


def test_unknown_column_points_at_it(catalog: Catalog) -> None:
    error = error_of(catalog, "SELECT COUNT(*)\nFROM trades [RANGE 1 SECOND]\nWHERE  prize > 1")
    assert isinstance(error, CatalogError)
    assert (error.line, error.column) == (3, 8)
    assert error.hint.startswith("columns of trades: ts, symbol, price")


def test_type_errors_point_at_the_expression(catalog: Catalog) -> None:
    error = error_of(catalog, "SELECT SUM(symbol) FROM trades [RANGE 1 SECOND]")
    assert (error.line, error.column) == (1, 8)
    assert error.construct == "SUM(symbol)"


def test_where_must_be_boolean(catalog: Catalog) -> None:
    error = error_of(catalog, "SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE price + 1")
    assert error.message == "WHERE needs a BOOLEAN condition, got DOUBLE"
    assert error.column == 52


def test_panes_per_window_are_bounded_at_sql_time(catalog: Catalog) -> None:
    with pytest.raises(PlanError) as error:
        bound(catalog, "SELECT COUNT(*) FROM trades [RANGE 1 DAY SLIDE 1 MICROSECOND]")
    assert "86,400,000,000 panes of 1 MICROSECOND" in error.value.message
    assert f"at most {MAX_PANES_PER_WINDOW:,} panes per window" in error.value.message
    assert (error.value.line, error.value.column) == (1, 48)
    # gcd(RANGE, SLIDE) decides, not SLIDE alone: 1 SECOND + 1 us over 1 SECOND is 1 us panes
    with pytest.raises(PlanError):
        bound(catalog, "SELECT COUNT(*) FROM trades [RANGE 1000001 us SLIDE 1 SECOND]")


def test_the_largest_pane_count_is_accepted(catalog: Catalog) -> None:
    query = bound(
        catalog, f"SELECT COUNT(*) FROM trades [RANGE {MAX_PANES_PER_WINDOW} ms SLIDE 1 ms]"
    )
    assert query.window.size // query.window.slide == MAX_PANES_PER_WINDOW


def test_rows_per_count_window_are_bounded(catalog: Catalog) -> None:
    bound(catalog, f"SELECT COUNT(*) FROM trades [ROWS {MAX_ROWS_PER_WINDOW}]")
    with pytest.raises(PlanError, match="rows a count window may hold"):
        bound(catalog, "SELECT COUNT(*) FROM trades [ROWS 100000000000000000000]")


def test_timestamp_literals_are_bound_as_utc_text(catalog: Catalog) -> None:
    # the WHERE clause also runs as Spark SQL: the literal names its zone, so Spark reads the
    # same instant whatever its session time zone
    query = bound(
        catalog,
        "SELECT COUNT(*) FROM trades [RANGE 1 SECOND] "
        "WHERE ts > TIMESTAMP '2026-01-01T01:00:00+01:00'",
    )
    predicate = unwrap(query)[3]
    assert predicate.sql(dialect="spark") == (
        "`ts` > CAST('2026-01-01 00:00:00.000000Z' AS TIMESTAMP)"
    )
    # years before 1000 keep four digits (strftime's %Y wrote "1-01-01", refused on reading)
    early = bound(
        catalog, "SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE ts > TIMESTAMP '0001-01-02'"
    )
    assert unwrap(early)[3].sql(dialect="spark") == (
        "`ts` > CAST('0001-01-02 00:00:00.000000Z' AS TIMESTAMP)"
    )


def test_a_350_term_chain_and_deep_parentheses_plan_explain_and_run() -> None:
    """These raised RecursionError; within the limits they compile, explain and evaluate."""
    import pyarrow as pa

    from mangonel.session import Session

    session = Session(backend="cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, v BIGINT) WITH (event_time = 'ts')")
    chain = " + ".join(["v"] * 350)
    nested = "(" * 98 + "v" + ")" * 98
    query = session.sql(
        f"SELECT SUM({chain}) AS total, MAX({nested}) AS top FROM s [RANGE 1 SECOND] "
        f"WHERE {chain} > 0"
    )
    assert "Project" in query.explain()
    batch = pa.table(
        {"ts": pa.array([0, 1], pa.timestamp("us", tz="UTC")), "v": pa.array([1, 2], pa.int64())}
    )
    assert query.run([batch]).to_pylist() == [{"total": 350 * 3, "top": 2}]
