"""The Spark planner pass: its choices are plan data, and EXPLAIN prints them through the
generic node formatting (no Spark session needed: planning starts no Spark job)."""

from __future__ import annotations

import pytest

import mangonel as mg
from mangonel.compiler import physical as ph
from mangonel.errors import PlanError
from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

CREATE = (
    "CREATE STREAM t (ts TIMESTAMP, k BIGINT, v DOUBLE) "
    "WITH (event_time = 'ts', watermark = '200 milliseconds')"
)
QUERY = (
    "SELECT k, SUM(v) AS s FROM t [RANGE 1 SECOND SLIDE 250 MILLISECONDS] WHERE v > 0 GROUP BY k"
)


def _plan(query: str = QUERY) -> ph.ProjectExec:
    session = mg.Session(backend="cpu")
    session.execute(CREATE)
    return session.sql(query).plan


def test_choices_are_plan_data() -> None:
    planned = plan_spark(QUERY, _plan(), partitions=3)
    assert (planned.buckets, planned.stage1, planned.native) == (6, "arrow", False)
    assert planned.stage1_placements == ()
    forced = plan_spark(QUERY, _plan(), partitions=3, buckets=5, native=True)
    assert forced.native and forced.buckets == 5 and "native=True" in forced.native_reason


COUNT_QUERY = "SELECT k, SUM(v) AS s FROM t [ROWS 4 SLIDE 2] GROUP BY k"


def test_count_windows_plan_per_tuple_partials() -> None:
    planned = plan_spark(COUNT_QUERY, _plan(COUNT_QUERY), partitions=2)
    assert (planned.stage1, planned.native) == ("kernels", False)
    text = spark_stages_text(planned)
    assert (
        "Stage1 mapInArrow: preaggregate=none (per-tuple partials) order=(partition, row)" in text
    )
    assert "fires=last_tuple_ts<watermark" in text
    with pytest.raises(PlanError, match="no native Spark plan"):
        plan_spark("", _plan(COUNT_QUERY), partitions=2, native=True)
    with pytest.raises(PlanError, match="per-tuple partials"):
        plan_spark("", _plan(COUNT_QUERY), partitions=2, stage1="arrow")


def test_gpu_kernels_stage_one_places_preaggregation_on_the_cpu() -> None:
    plan = ph.with_backend(_plan(), "gpu", "test")
    planned = plan_spark(QUERY, plan, partitions=2)
    assert planned.stage1 == "kernels"
    assert [(p.step, p.backend) for p in planned.stage1_placements] == [
        ("lift", "gpu"),
        ("preaggregate", "gpu"),
    ]
    lines = spark_stages_text(planned).splitlines()
    assert lines[0] == "Spark:"
    stage1 = next(i for i, line in enumerate(lines) if "Stage1 mapInArrow:" in line)
    assert "preaggregate=gpu-lift-kernels" in lines[stage1]
    # executors choose: the GPU plan where they have a GPU, else the CPU plan
    assert "executor=per executor: gpu where it has one, else cpu" in lines[stage1]
    stage2 = next(i for i, line in enumerate(lines) if "Stage2 applyInPandasWithState:" in line)
    assert "executor=per executor" in lines[stage2]
    assert not any(line.lstrip().startswith("!") for line in lines)  # nothing leaves the GPU
    cpu = spark_stages_text(plan_spark(QUERY, _plan(), partitions=2, stage1="kernels"))
    assert "preaggregate=cpu-lift-kernels" in cpu and "!" not in cpu
    assert "executor=" not in cpu


def test_native_stages_text() -> None:
    planned = plan_spark(QUERY, _plan(), partitions=2, native=True)
    lines = spark_stages_text(planned).splitlines()
    assert lines[0].startswith("Spark: native window aggregation (reason: native=True requested")
    assert lines[1].startswith("  StreamingAggregate: group_by=[window(ts, 1s, 250ms), `k`]")
    assert lines[2] == "    Filter: where=`v` > 0"  # Spark SQL, as Spark runs it
    assert lines[3] == "      EventTimeWatermark: column=ts delay=200ms"
    assert lines[4] == "        Source: stream=t"


JOIN_CREATE = (
    "CREATE STREAM u (ts TIMESTAMP, k INT, j STRING, w DOUBLE) "
    "WITH (event_time = 'ts', watermark = '100 milliseconds')"
)


def _join_plan(query: str) -> ph.ProjectExec:
    session = mg.Session(backend="cpu")
    session.execute(CREATE)
    session.execute(JOIN_CREATE)
    session.execute("CREATE TABLE d (k BIGINT, name STRING)")
    return session.sql(query).plan


@pytest.mark.parametrize(
    ("kind", "group_by", "pairs", "buckets"),
    [
        ("JOIN", "a.k", (0,), 6),
        ("JOIN", "b.k", (0,), 6),
        ("LEFT JOIN", "a.k", (0,), 6),
        ("LEFT JOIN", "b.k", (), 1),  # b.k is NULL in a's unmatched rows: spans buckets
        ("RIGHT JOIN", "b.k", (0,), 6),
        ("FULL JOIN", "a.k", (), 1),
        ("JOIN", "b.j", (), 1),  # groups across join keys
    ],
)
def test_join_buckets_keep_each_group_in_one_bucket(kind, group_by, pairs, buckets) -> None:
    query = (
        f"SELECT {group_by}, COUNT(*) AS n FROM t [RANGE 1 SECOND] AS a {kind} "
        f"u [RANGE 1 SECOND] AS b ON a.k = b.k GROUP BY {group_by}"
    )
    planned = plan_spark(query, _join_plan(query), partitions=3)
    assert (planned.join_keys, planned.buckets) == (pairs, buckets)
    assert planned.join is not None and planned.backend == "cpu"


def test_join_stages_text_hashes_both_sides_alike() -> None:
    query = (
        "SELECT a.v, b.w, window_start FROM t [RANGE 1 SECOND] AS a "
        "JOIN u [RANGE 1 SECOND] AS b ON a.k = b.k"
    )
    lines = spark_stages_text(plan_spark(query, _join_plan(query), partitions=2)).splitlines()
    assert lines[0] == "Spark: window join (buckets: rows of equal keys meet in one bucket)"
    projects = [line for line in lines if "Project: side=" in line]
    bucket = "bucket=pmod(hash(CAST(`k` AS BIGINT)), 4)"  # INT and BIGINT keys hash alike
    assert len(projects) == 2 and all(bucket in line for line in projects)
    assert "EventTimeWatermark: column=ts delay=100ms" in "\n".join(lines)
    static = "SELECT a.v, d.name FROM t AS a JOIN d ON a.k = d.k"
    text = spark_stages_text(plan_spark(static, _join_plan(static), partitions=2))
    assert "Static Project: side=1 columns=[`k`, `name`]" in text and "Union" not in text


def _stage2_line(planned) -> str:  # noqa: ANN001
    return next(line for line in spark_stages_text(planned).splitlines() if "Stage2" in line)


@pytest.mark.parametrize(
    ("query", "gpu_join", "runs_on"),
    [
        # pairwise (a residual): with gpu_join the join and its aggregation on the GPU
        (
            "SELECT a.k, COUNT(*) AS n FROM t [RANGE 1 SECOND] AS a JOIN u [RANGE 1 SECOND] "
            "AS b ON a.k = b.k AND a.v < b.w GROUP BY a.k",
            True,
            "gpu",
        ),
        (
            "SELECT a.k, COUNT(*) AS n FROM t [RANGE 1 SECOND] AS a JOIN u [RANGE 1 SECOND] "
            "AS b ON a.k = b.k AND a.v < b.w GROUP BY a.k",
            False,
            "cpu",
        ),
        # factorised cells are host arrays: the join runs on the CPU in a GPU plan
        (
            "SELECT a.k, COUNT(*) AS n FROM t [RANGE 1 SECOND] AS a JOIN u [RANGE 1 SECOND] "
            "AS b ON a.k = b.k GROUP BY a.k",
            True,
            "cpu",
        ),
    ],
)
def test_join_stage_two_says_where_a_gpu_plans_join_runs(query, gpu_join, runs_on) -> None:
    """EXPLAIN inside Spark names the backend the bucket's join runs on (a GPU plan may keep
    it on the CPU) and prints every step of the bucket placed off the plan's backend."""
    plan = ph.with_backend(_join_plan(query), "gpu", "test", gpu_join=gpu_join)
    join = ph.find(plan, ph.WindowJoinExec)
    assert join.backend == "gpu" and ph.placement(join, "join").backend == runs_on
    planned = plan_spark(query, plan, partitions=2)
    line = _stage2_line(planned)
    assert f"backend={runs_on}" in line and "metrics=observe(mangonel_join)" in line
    text = spark_stages_text(planned).splitlines()
    stage2 = next(i for i, line in enumerate(text) if "Stage2" in line)
    off = [line.strip() for line in text[stage2 + 1 :] if line.strip().startswith("!")]
    steps = [p for node in ph.walk(plan) for p in getattr(node, "placements", ())]
    expected = {f"! {p.step} runs on cpu because {p.reason}" for p in steps if p.backend == "cpu"}
    assert set(off) == expected and off  # finalize/project always stay on the host
    if runs_on == "cpu":
        assert any(line.startswith("! join runs on cpu") for line in off)
    # the CPU plan of the same query: nothing off its backend
    assert "!" not in spark_stages_text(plan_spark(query, _join_plan(query), partitions=2))
