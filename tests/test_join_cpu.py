"""The join operator on the CPU against the join oracle (tests/oracle_join.py): fixed cases,
then random ones (two streams, random arrival interleaving, disorder, NULL keys and times,
skewed keys, sliding and tumbling windows, inner and outer joins, residual and WHERE, with
and without aggregation, both algorithms, snapshot/restore at a random arrival)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from fuzz_join_cases import check_join, draw_join_case, shrink_join
from oracle import rows_of
from oracle_join import JoinInput, JoinOracle, JoinOracleQuery, canonical

from mangonel.errors import CatalogError, DataError
from mangonel.runtime.local.query import LocalQuery
from mangonel.session import Session

S = 1_000_000
CLICKS = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())])
VIEWS = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())])
ADS = pa.schema([("k", pa.int64()), ("c", pa.string())])
LEFT = JoinInput("l", "clicks", {"ts": "timestamp", "k": "bigint", "x": "bigint"}, "ts", 0)
RIGHT = JoinInput("r", "views", {"ts": "timestamp", "k": "int", "y": "double"}, "ts", 0)
TABLE = JoinInput("a", "ads", {"k": "bigint", "c": "string"})


def session(algorithm: str = "hash", delays: tuple[int, int] = (0, 0)) -> Session:
    s = Session("cpu", join_algorithm=algorithm)
    s.execute(
        "CREATE STREAM clicks (ts TIMESTAMP, k BIGINT, x BIGINT) WITH (event_time = 'ts', "
        f"watermark = '{delays[0]} microseconds')"
    )
    s.execute(
        "CREATE STREAM views (ts TIMESTAMP, k INT, y DOUBLE) WITH (event_time = 'ts', "
        f"watermark = '{delays[1]} microseconds')"
    )
    s.execute("CREATE TABLE ads (k BIGINT, c STRING)")
    return s


def batch(schema: pa.Schema, rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def engine_rows(table: pa.Table) -> list[dict]:
    return rows_of(table)


def run_engine(
    query, arrivals: list[tuple[str, pa.RecordBatch]], restore_at: int | None = None
) -> list[dict]:  # noqa: ANN001
    """Rows of the query over the arrivals; with `restore_at`, the operator state is saved
    after that many arrivals and a new runner restored from it goes on."""
    if restore_at is None:
        return engine_rows(query.run(arrivals))
    runner = LocalQuery(query.plan)
    out = []
    tables = [(n, b) for n, b in arrivals if n == "ads"]
    streams = [(n, b) for n, b in arrivals if n != "ads"]
    for name, b in tables + streams[:restore_at]:
        out += runner.process(b, name)
    saved = runner.snapshot()
    runner = LocalQuery(query.plan)
    runner.restore(saved)
    for name, b in streams[restore_at:]:
        out += runner.process(b, name)
    out += runner.finish()
    return engine_rows(pa.Table.from_batches(out, schema=runner.schema))


def run_oracle(oracle_query: JoinOracleQuery, arrivals) -> tuple[list[dict], JoinOracle]:  # noqa: ANN001
    oracle = JoinOracle(oracle_query)
    rows = []
    for name, b in sorted(arrivals, key=lambda a: a[0] != "ads"):  # the table first
        rows += oracle.process(name, b)
    rows += oracle.finish()
    return rows, oracle


def assert_same(actual: list[dict], expected: list[dict]) -> None:
    got, want = canonical(actual), canonical(expected)
    assert len(got) == len(want), f"{len(got)} rows where {len(want)} were expected"
    for a, e in zip(got, want, strict=True):
        assert a.keys() == e.keys()
        for name in a:
            if isinstance(e[name], float) and a[name] is not None:
                assert a[name] == pytest.approx(e[name], rel=1e-9, abs=1e-9), (a, e)
            else:
                assert a[name] == e[name], (a, e)


def window_order(rows: list[dict]) -> bool:
    starts = [row["start"] for row in rows if "start" in row]
    return starts == sorted(starts)


# -- fixed cases ------------------------------------------------------------------------

ARRIVALS = [
    ("clicks", batch(CLICKS, [{"ts": 100_000, "k": 1, "x": 1}, {"ts": 700_000, "k": 2, "x": 2}])),
    (
        "views",
        batch(VIEWS, [{"ts": 300_000, "k": 1, "y": 20.0}, {"ts": 800_000, "k": 1, "y": 5.0}]),
    ),
    (
        "clicks",
        batch(CLICKS, [{"ts": 1_600_000, "k": 1, "x": 3}, {"ts": 900_000, "k": None, "x": 4}]),
    ),
    (
        "views",
        batch(VIEWS, [{"ts": 1_100_000, "k": 1, "y": 30.0}, {"ts": 200_000, "k": 2, "y": 1.0}]),
    ),
    ("views", batch(VIEWS, [{"ts": 2_900_000, "k": 2, "y": 2.0}])),
]
ROWS_SQL = (
    "SELECT l.x, r.y, window_start AS start FROM clicks [RANGE 1 SECOND SLIDE 500 MILLISECONDS]"
    " AS l {kind} JOIN views [RANGE 1 SECOND SLIDE 500 MILLISECONDS] AS r ON l.k = r.k{residual}"
)
ROWS_OUT = (("x", ["col", "l.x"]), ("y", ["col", "r.y"]), ("start", ["bound", "start"]))


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
def test_sliding_window_join_rows(kind: str, algorithm: str) -> None:
    residual = " AND r.y > 2"
    sql = ROWS_SQL.format(kind="" if kind == "inner" else kind.upper(), residual=residual)
    query = session(algorithm).sql(sql)
    oracle_query = JoinOracleQuery(
        LEFT,
        RIGHT,
        kind,
        S,
        S // 2,
        ("k",),
        ("k",),
        residual=[">", ["col", "r.y"], ["lit", 2]],
        outputs=ROWS_OUT,
    )
    expected, oracle = run_oracle(oracle_query, ARRIVALS)
    actual = run_engine(query, ARRIVALS)
    assert_same(actual, expected)
    assert window_order(actual)
    metrics = query.metrics
    assert dict(metrics.late_by_input) == oracle.late
    assert metrics.late_tuples_dropped == sum(oracle.late.values())


def test_aggregation_over_the_join_with_where_and_having() -> None:
    sql = (
        "SELECT l.k, window_start AS start, COUNT(*) AS n, SUM(l.x * r.y) AS s, MAX(r.y) AS m "
        "FROM clicks [RANGE 1 SECOND] AS l FULL JOIN views [RANGE 1 SECOND] AS r "
        "ON l.k = r.k WHERE r.y IS NULL OR r.y < 25 GROUP BY l.k HAVING COUNT(*) >= 1"
    )
    oracle_query = JoinOracleQuery(
        LEFT,
        RIGHT,
        "full",
        S,
        S,
        ("k",),
        ("k",),
        where=["or", ["is_null", ["col", "r.y"]], ["<", ["col", "r.y"], ["lit", 25]]],
        keys=("l.k",),
        aggregates=(
            ("count_star", None),
            ("sum", ["*", ["col", "l.x"], ["col", "r.y"]]),
            ("max", ["col", "r.y"]),
        ),
        having=[">=", ["agg", 0], ["lit", 1]],
        outputs=(
            ("k", ["col", "l.k"]),
            ("start", ["bound", "start"]),
            ("n", ["agg", 0]),
            ("s", ["agg", 1]),
            ("m", ["agg", 2]),
        ),
    )
    expected, _ = run_oracle(oracle_query, ARRIVALS)
    for algorithm in ("hash", "sort-merge"):
        actual = run_engine(session(algorithm).sql(sql), ARRIVALS)
        assert_same(actual, expected)
        assert window_order(actual)


def test_stream_joined_with_a_table() -> None:
    ads = batch(ADS, [{"k": 1, "c": "one"}, {"k": 1, "c": "uno"}, {"k": None, "c": "none"}])
    clicks = [arrival for arrival in ARRIVALS if arrival[0] == "clicks"]
    arrivals = [*clicks, ("ads", ads)]  # the table is read first wherever it stands
    rows_query = session().sql("SELECT l.x, a.c FROM clicks AS l LEFT JOIN ads AS a ON l.k = a.k")
    oracle_query = JoinOracleQuery(
        LEFT,
        TABLE,
        "left",
        None,
        None,
        ("k",),
        ("k",),
        outputs=(("x", ["col", "l.x"]), ("c", ["col", "a.c"])),
    )
    assert_same(run_engine(rows_query, arrivals), run_oracle(oracle_query, arrivals)[0])
    counted = session().sql(
        "SELECT a.c, window_start AS start, COUNT(*) AS n FROM clicks [RANGE 1 SECOND] AS l "
        "JOIN ads AS a ON l.k = a.k GROUP BY a.c"
    )
    oracle_query = JoinOracleQuery(
        LEFT,
        TABLE,
        "inner",
        S,
        S,
        ("k",),
        ("k",),
        keys=("a.c",),
        aggregates=(("count_star", None),),
        outputs=(("c", ["col", "a.c"]), ("start", ["bound", "start"]), ("n", ["agg", 0])),
    )
    assert_same(run_engine(counted, arrivals), run_oracle(oracle_query, arrivals)[0])


def test_a_table_declared_with_files_is_read_from_them(tmp_path) -> None:  # noqa: ANN001
    """`CREATE TABLE .. WITH (source = 'csv' | 'parquet', path = ..)` declared files nothing
    read (the join found an empty table); a run now reads them when the inputs hold no batch
    of the table, and the inputs' batches when they do."""
    rows = [{"k": 1, "c": "one"}, {"k": 1, "c": "uno"}, {"k": None, "c": "none"}]
    (tmp_path / "ads.csv").write_text("K,c\n1,one\n1,uno\n,none\n")  # header in any case
    clicks = [arrival for arrival in ARRIVALS if arrival[0] == "clicks"]
    text = "SELECT l.x, a.c FROM clicks AS l LEFT JOIN ads AS a ON l.k = a.k"
    want = run_engine(session().sql(text), [*clicks, ("ads", batch(ADS, rows))])
    declared = session()
    declared.execute(
        f"CREATE OR REPLACE TABLE ads (k BIGINT, c STRING) WITH (source = 'csv', path = "
        f"'{tmp_path / 'ads.csv'}')"
    )
    query = declared.sql(text)
    assert sorted(map(str, run_engine(query, clicks))) == sorted(map(str, want))
    given = run_engine(query, [*clicks, ("ads", batch(ADS, rows[:1]))])  # the inputs' rows
    assert {row["c"] for row in given} == {"one", None}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ("k = '1'", "table 't': options without a source"),
        ("source = 'generator'", "source = 'generator', which a table cannot read"),
        ("source = 'csv'", "needs the option 'path'"),
        ("source = 'parquet', path = 'x', header = 'true'", "unknown option 'header'"),
    ],
)
def test_table_options_that_nothing_reads_are_refused(options: str, problem: str) -> None:
    with pytest.raises(CatalogError, match=problem):
        Session("cpu").execute(f"CREATE TABLE t (k BIGINT) WITH ({options})")


def test_a_table_batch_after_the_streams_started_is_refused() -> None:
    query = session().sql("SELECT l.x, a.c FROM clicks AS l JOIN ads AS a ON l.k = a.k")
    runner = LocalQuery(query.plan)
    runner.process(ARRIVALS[0][1], runner.inputs["clicks"])
    with pytest.raises(DataError, match="after the first stream batch"):
        runner.process(batch(ADS, [{"k": 1, "c": "x"}]), runner.inputs["ads"])


def test_a_table_batch_is_conformed_as_a_stream_batch_is() -> None:
    """A static table's batch must match its declared columns (lossless widening only, NOT
    NULL kept), or it is refused with a DataError naming the column and the table: before,
    a STRING '1' or a DOUBLE 1.0 key was cast and joined the stream's key 1, a NULL in a NOT
    NULL column was taken, and a key of 5.7 raised Arrow's ArrowInvalid."""
    s = session()
    s.execute("CREATE TABLE strict_ads (k BIGINT NOT NULL, c STRING)")
    query = s.sql("SELECT l.x, a.c FROM clicks AS l JOIN strict_ads AS a ON l.k = a.k")
    clicks = batch(CLICKS, [{"ts": 0, "k": 1, "x": 7}])
    refused = [
        (pa.array(["1"]), "declared BIGINT .* the batch has string"),
        (pa.array([1.0]), "declared BIGINT .* the batch has double"),
        (pa.array([5.7]), "declared BIGINT .* the batch has double"),
        (pa.array([None], pa.int64()), "declared NOT NULL"),
    ]
    for keys, message in refused:
        table = pa.RecordBatch.from_arrays([keys, pa.array(["one"])], names=["k", "c"])
        with pytest.raises(DataError, match=f"column 'k' of table 'strict_ads' is {message}"):
            query.run([("strict_ads", table), ("clicks", clicks)])
    widened = pa.RecordBatch.from_pydict(  # int32 widens; an unread column is not looked at
        {"k": pa.array([1], pa.int32()), "c": ["one"], "extra": [b"x"]}
    )
    got = query.run([("strict_ads", widened), ("clicks", clicks)])
    assert got.to_pylist() == [{"x": 7, "c": "one"}]


def test_inputs_by_name_round_robin_and_unknown_names() -> None:
    query = session().sql(ROWS_SQL.format(kind="", residual=""))
    by_name = {
        "clicks": [b for n, b in ARRIVALS if n == "clicks"],
        "VIEWS": [b for n, b in ARRIVALS if n == "views"],
    }
    round_robin = [
        ("clicks", by_name["clicks"][0]),
        ("views", by_name["VIEWS"][0]),
        ("clicks", by_name["clicks"][1]),
        ("views", by_name["VIEWS"][1]),
        ("views", by_name["VIEWS"][2]),
    ]
    assert query.run(by_name).equals(query.run(round_robin))
    with pytest.raises(DataError, match="not an input of this query"):
        query.run([("trades", ARRIVALS[0][1])])
    with pytest.raises(DataError, match=r"\(name, batch\) pairs"):
        query.run([ARRIVALS[0][1]])


def test_state_is_freed_as_windows_fire() -> None:
    query = session().sql(ROWS_SQL.format(kind="", residual=""))
    runner = LocalQuery(query.plan)
    rng = random.Random(3)
    sizes = []
    for step in range(60):
        name, schema = ("clicks", CLICKS) if step % 2 else ("views", VIEWS)
        rows = [
            {"ts": step * S // 4 + rng.randrange(S // 4), "k": rng.randrange(5), "x": 1, "y": 1.0}
            for _ in range(50)
        ]
        rows = [{c: r[c] for c in schema.names} for r in rows]
        runner.process(batch(schema, rows), runner.inputs[name])
        sizes.append(runner.metrics.state_bytes)
    # a steady stream keeps about a window of rows: no growth with the number of batches
    assert max(sizes[40:]) <= 1.5 * max(sizes[10:20])


# -- random cases (tests/fuzz_join_cases.py; the fuzzer draws more) -----------------------


@pytest.mark.parametrize("seed", range(40))
def test_random_joins_match_the_oracle(seed: int) -> None:
    case = draw_join_case(seed)
    problem = check_join(case)
    assert problem is None, f"{problem}\n{case.describe()}"


def test_a_planted_bug_is_found_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The join cases can fail: a kernel that loses the last pair of every match is found
    within the random cases, and the shrinker keeps a failing case of a few rows."""
    from mangonel.runtime.cpu.join import CpuJoinKernels

    original = CpuJoinKernels.match

    def loses_a_pair(self, *args):  # noqa: ANN001, ANN202
        i, j = original(self, *args)
        return i[:-1], j[:-1]

    monkeypatch.setattr(CpuJoinKernels, "match", loses_a_pair)
    failing = next(case for case in map(draw_join_case, range(200)) if check_join(case) is not None)
    shrunk = shrink_join(failing, check_join(failing))
    assert check_join(shrunk) is not None
    assert shrunk.rows <= min(failing.rows, 6)


def test_a_gpu_plan_with_gpu_join_off_runs_its_join_steps_on_the_cpu() -> None:
    """Every join step of a GPU plan with gpu_join=False is placed on the CPU: the plan runs
    here, without CuPy, and gives the CPU plan's rows."""
    from mangonel.compiler import physical as ph

    query = session().sql(ROWS_SQL.format(kind="FULL", residual=""))
    gpu_plan = ph.with_backend(query.plan, "gpu", "test", gpu_join=False)
    runner = LocalQuery(gpu_plan)
    assert set(runner.operator._kernels) <= {"cpu"}
    assert_same(engine_rows(runner.run(ARRIVALS)), engine_rows(query.run(ARRIVALS)))


def test_groups_from_join_key_slots_match_the_oracle() -> None:
    """GROUP BY a join key column takes each pair's group from its join key slot
    (join_cells.groups_by_key); outer rows (the key NULL on the grouped side) still go
    through the group map. GROUP BY r.k of a LEFT join mixes both in one group map."""
    from mangonel.compiler import physical as ph
    from mangonel.runtime.operators.join_cells import groups_follow_join_keys

    sql = (
        "SELECT r.k, window_start AS start, COUNT(*) AS n, SUM(l.x) AS s "
        "FROM clicks [RANGE 1 SECOND SLIDE 500 MILLISECONDS] AS l LEFT JOIN "
        "views [RANGE 1 SECOND SLIDE 500 MILLISECONDS] AS r ON l.k = r.k GROUP BY r.k"
    )
    oracle_query = JoinOracleQuery(
        LEFT,
        RIGHT,
        "left",
        S,
        S // 2,
        ("k",),
        ("k",),
        keys=("r.k",),
        aggregates=(("count_star", None), ("sum", ["col", "l.x"])),
        outputs=(
            ("k", ["col", "r.k"]),
            ("start", ["bound", "start"]),
            ("n", ["agg", 0]),
            ("s", ["agg", 1]),
        ),
    )
    # keys 2 and 1 first seen in different calls, then both again in later ones
    later = [
        (
            "clicks",
            batch(CLICKS, [{"ts": 3_100_000 + i, "k": 2 - i % 2, "x": i} for i in range(4)]),
        ),
        (
            "views",
            batch(VIEWS, [{"ts": 3_200_000 + i, "k": 1 + i % 2, "y": 1.0} for i in range(3)]),
        ),
        (
            "clicks",
            batch(CLICKS, [{"ts": 3_300_000, "k": 1, "x": 9}, {"ts": 3_300_000, "k": 2, "x": 8}]),
        ),
    ]
    arrivals = ARRIVALS + later
    expected, _ = run_oracle(oracle_query, arrivals)
    assert any(row["k"] is None for row in expected)  # outer rows form a NULL group
    for algorithm in ("hash", "sort-merge"):
        query = session(algorithm).sql(sql)
        assert groups_follow_join_keys(ph.find(query.plan, ph.JoinAggregateExec))
        for restore_at in (None, 2, 6):
            assert_same(run_engine(query, arrivals, restore_at), expected)
    not_a_key = session().sql(
        "SELECT l.x, COUNT(*) AS n FROM clicks [RANGE 1 SECOND] AS l "
        "JOIN views [RANGE 1 SECOND] AS r ON l.k = r.k GROUP BY l.x"
    )
    assert not groups_follow_join_keys(ph.find(not_a_key.plan, ph.JoinAggregateExec))


@pytest.mark.parametrize(("skew", "chosen"), [(0.0, {"hash"}), (1.0, {"sort-merge"})])
def test_auto_chooses_the_algorithm_per_batch_from_key_statistics(
    skew: float, chosen: set[str]
) -> None:
    """join_algorithm "auto": hash on evenly spread keys, sort-merge once one key holds over
    SKEWED_KEYS x an even share of the rows (Zipf 1 over 200 keys: ~17 % for the first, 34x
    an even share); the batches of each are counted in metrics; same rows as either forced
    algorithm."""
    from mangonel.bench_join import JoinShape, make_arrivals, make_session

    # the pair path (factorised aggregation forms no pairs: no algorithm runs)
    shape = JoinShape("auto", keys=200, skew=skew, slide_us=500_000, factorised=False)
    arrivals = make_arrivals(shape, 16_000, 4_000, 2_000, seed=3)
    query = make_session(shape).sql(shape.query())
    auto = engine_rows(query.run(arrivals))
    used = dict(query.metrics.batches_by_algorithm)
    assert set(used) == chosen and sum(used.values()) >= 7
    for forced in ("hash", "sort-merge"):
        shape = JoinShape(
            "forced", keys=200, skew=skew, slide_us=500_000, algorithm=forced, factorised=False
        )
        assert_same(engine_rows(make_session(shape).sql(shape.query()).run(arrivals)), auto)
        assert f"join_algorithm={forced} option" in make_session(shape).sql(shape.query()).explain()
