"""The Spark planner pass: how a planned window query runs inside Spark, as frozen plan data.

It decides native or two-stage (`native.choose_native`, by cost or forced), the stage-1 kind
("arrow": Arrow's hash aggregation after a native projection; "kernels": the backend's fused
lift), the key buckets of stage 2, and the placement of stage 1's steps; and it builds the
Spark side of EXPLAIN as `explain.PlanNode`s, printed by compiler/explain's generic node
formatting under a title line. The session builds DataFrames from this data.
Join queries (`plan_join`) choose the key pairs whose hash buckets both sides' rows
(`bucket_key_pairs`: a group must not span buckets) and print their own Spark side.
"""

from __future__ import annotations

from dataclasses import dataclass

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import (
    Parameter,
    PlanNode,
    explain_text,
    format_duration,
    format_expression,
)
from mangonel.compiler.holistic import timed_fields
from mangonel.compiler.logical import WindowKind
from mangonel.errors import PlanError
from mangonel.runtime.spark import native as native_module
from mangonel.runtime.spark import native_stage2 as native_stage2_module
from mangonel.runtime.spark.join_metrics import OBSERVATION
from mangonel.runtime.spark.schema import quote
from mangonel.runtime.spark.sql import aggregate_sql, lift_sql

STAGE1_KINDS = ("arrow", "kernels", "reader")
STAGE2_KINDS = ("native", "python")
# Largest windows per pane (w / gcd(w, s)) for which the reader path's stage 2 runs as
# Spark's own aggregation over the partials. Measured on 2 cores, 4 M tuples, 1000 keys
# (docs/performance/spark.md, "Inside Spark: Spark's own stage 2"): mangonel's Python stage 2 is
# 1.1-1.2x faster at 10 windows per pane and 2.3x at 100; at 1 they tie. So by default the
# reader path keeps the Python stage 2 (a pane in one window means w/s <= 1, which runs as
# Spark's native plan over its own source); stage2="native" forces Spark's.
NATIVE_STAGE2_MAX_WINDOWS_PER_PANE = 1
# sources whose rows mangonel reads itself, in the reader (reader.py, pane_reader.py)
READER_SOURCES = ("generator", "parquet", "csv")
# where the planner takes the reader unasked: the generator (its rows are made in Python
# anyway) and CSV (parsed by mangonel's rules, as standalone). A Parquet stream reads through
# Spark's vectorized reader, then Arrow stage 1: faster than the reader on this project's
# measurements (docs/performance/spark.md, "Inside Spark: Spark's own stage 2"); stage1="reader"
# forces the reader there
READER_DEFAULT_SOURCES = ("generator", "csv")
PARQUET_THROUGH_SPARK = (
    "a Parquet stream is read by Spark's vectorized reader, then stage 1 runs on its Arrow "
    "batches: faster than mangonel's reader where measured (stage1='reader' forces the reader)"
)
LATE_ROWS_REFUSED = "late_rows= does not run in this plan inside Spark"
COUNT_STAGE1 = (
    "count windows run stage 1 as the window operator's per-tuple partials (stage1='kernels')"
)
SESSION_STAGE1 = (
    "session windows in the two stages run stage 1 as the window operator's per-tuple "
    "partials (stage1='kernels')"
)

# Why a query with holistic functions runs as the two stages, whatever its shape (EXPLAIN).
SPARK_HOLISTIC_STAGES = (
    "holistic functions run in mangonel's stages: stage 1 ships each (key, pane)'s values, "
    "stage 2 keeps them per pane and evaluates each window at its close"
)


@dataclass(frozen=True)
class SparkQueryPlan:
    """What one `sql()` builds: mangonel's plan and the Spark side of it."""

    text: str
    plan: ph.ProjectExec
    buckets: int
    stage1: str  # "arrow" (CPU: Arrow hash aggregation) or "kernels" (the backend's lift)
    native: bool = False  # planned as Spark's own window aggregation (native.py)
    native_reason: str = ""
    # where stage 1's steps run when its kind is "kernels" (lift, preaggregate); the window
    # operator of stage 1 obeys them
    stage1_placements: tuple[ph.Placement, ...] = ()
    # join queries: the key pairs (positions in the join's keys) whose hash picks the bucket
    # of both sides' rows, and why these (EXPLAIN prints it)
    join_keys: tuple[int, ...] = ()
    join_reason: str = ""
    # the reader path's stage 2: "python" (mangonel's window operator per key bucket,
    # applyInPandasWithState) or "native" (Spark's own aggregation over the pane partials,
    # native_stage2.py), and why (EXPLAIN's title)
    stage2: str = "python"
    stage2_reason: str = ""
    stage1_reason: str = ""  # why stage 1 is not the reader of a stream mangonel reads

    @property
    def window(self) -> ph.WindowAggregateExec:
        return ph.find(self.plan, ph.WindowAggregateExec)

    @property
    def join(self) -> ph.WindowJoinExec | None:
        joins = [node for node in ph.walk(self.plan) if isinstance(node, ph.WindowJoinExec)]
        return joins[0] if joins else None

    @property
    def backend(self) -> str:
        join = self.join
        return join.backend if join is not None else self.window.backend


def plan_spark(
    text: str,
    plan: ph.ProjectExec,
    *,
    partitions: int,
    buckets: int | None = None,
    stage1: str | None = None,
    native: bool | None = None,
    late_rows: bool = False,
    stage2: str | None = None,
) -> SparkQueryPlan:
    """The Spark planner pass over a physical plan (see the module docstring). `late_rows`:
    the query hands out its late rows (late.py): two stages with Arrow stage 1 (count and
    session windows: their per-tuple stage 1; joins: the join's stage). `stage2`
    forces the reader path's stage 2 ("native" or "python"; `choose_stage2`)."""
    if stage2 not in (None, *STAGE2_KINDS):
        raise PlanError(f"stage2 must be 'native' or 'python', not {stage2!r}")
    if any(isinstance(node, ph.WindowJoinExec) for node in ph.walk(plan)):
        # late rows: the rows already reach the join's stateful stage (spark/join.py)
        return plan_join(text, plan, partitions=partitions, buckets=buckets)
    window = ph.find(plan, ph.WindowAggregateExec)
    holistic = [a.call_name for a in window.aggregates if a.holistic]
    if holistic:
        if native:
            raise PlanError(
                f"native=True: Spark's streaming aggregation cannot run {', '.join(holistic)} "
                "(it rejects COUNT(DISTINCT) in streaming and has no Python window functions)",
                hint="leave native unset: the two stages run holistic functions",
            )
    counted = window.window.kind is WindowKind.COUNT
    sessions = window.window.kind is WindowKind.SESSION
    if sessions and holistic:
        # Spark's session_window aggregation cannot run them: the per-tuple stages, whose
        # partials carry each tuple's values as count windows' do
        native = False
    if sessions and late_rows:
        # Spark's own session_window aggregation drops late rows unseen: the per-tuple stages
        if native:
            raise PlanError(
                f"{LATE_ROWS_REFUSED}: Spark's native session_window aggregation drops them unseen",
                hint="leave native unset: late_rows= runs session windows in mangonel's stages",
            )
        native = False
    if sessions and native is False:
        # per-tuple partials, as count windows ship them: sessions have no panes
        if stage1 not in (None, "kernels"):
            raise PlanError(f"{SESSION_STAGE1}; stage1={stage1!r} pre-aggregates panes")
        stage1 = "kernels"
    if counted:
        # per-tuple partials (their order per key is final only at stage 2) and no native
        # counterpart: the window operator's own stage 1, tuples ordered as they arrived
        if native:
            raise PlanError("count windows (ROWS n SLIDE m) have no native Spark plan")
        if stage1 == "arrow":
            raise PlanError(f"{COUNT_STAGE1}; stage1='arrow' pre-aggregates panes")
        stage1, native = "kernels", False
    reader, why_not = reader_applies(window, late_rows)
    if stage1 == "reader" and not reader:
        raise PlanError(f"stage1='reader' does not apply: {why_not}")
    two_stages = not native_module.choose_native(window, native).native
    stage1_reason = ""
    if stage1 is None and reader and (stage2 is not None or two_stages):
        # where the cost rule keeps the two stages (w/s > 1), stage 1 runs in the reader of
        # the streams it is the default for; where each tuple falls in one window Spark's own
        # aggregation still wins, also against the reader path (docs/performance/spark.md, "Inside
        # Spark: the reader path"); a forced stage2 names the reader path's stage 2, so it
        # takes the reader
        if stage2 is not None or stream_source(window) in READER_DEFAULT_SOURCES:
            stage1 = "reader"
        else:
            stage1_reason = PARQUET_THROUGH_SPARK
    if stage1 == "reader":
        if native is True:
            raise PlanError("stage1='reader' runs the two stages; native=True runs Spark's own")
        native = False
    kind = stage1 or ("kernels" if window.backend == "gpu" else "arrow")
    if late_rows and not (counted or sessions):
        if native:
            raise PlanError(f"{LATE_ROWS_REFUSED}: Spark's native aggregation drops them unseen")
        if stage1 == "kernels":
            raise PlanError(f"{LATE_ROWS_REFUSED}: only Arrow stage 1 carries the rows")
        kind, native = "arrow", False  # the rows travel beside Arrow stage 1's partials
    # count and session windows: their stage 1 is per tuple, and each partial carries its row
    # (sessions' holistic values travel per tuple: their own reason, `SESSION_STAGES`)
    choice = (
        native_module.NativeChoice(False, f"{SPARK_HOLISTIC_STAGES} ({', '.join(holistic)})")
        if holistic and not (counted or sessions)
        else native_module.choose_native(window, native)
    )
    placements: tuple[ph.Placement, ...] = ()
    if kind in ("kernels", "reader"):
        # the pane pre-aggregation runs where the lift does (the GPU's: a device key map of
        # (slot, pane) pairs and the merge kernel): only the partials leave the device
        lift = ph.placement(window, "lift")
        placements = (lift, ph.Placement("preaggregate", lift.backend, lift.reason))
    second, second_reason = "python", ""
    if kind == "reader":
        second, second_reason = choose_stage2(window, stage2)
    elif stage2 == "native":
        raise PlanError(
            "stage2='native' runs over the reader's pane partials: the stream must be one "
            f"mangonel reads ({', '.join(READER_SOURCES)}) in the two-stage plan"
        )
    return SparkQueryPlan(
        text,
        plan,
        buckets or 2 * partitions,
        kind,
        choice.native,
        choice.reason,
        placements,
        stage2=second,
        stage2_reason=second_reason,
        stage1_reason=stage1_reason,
    )


def stream_source(window: ph.WindowAggregateExec) -> str:
    """The `source` option of the stream the window reads ("" for a registered DataFrame)."""
    return (window.lift.scan.stream.option("source") or "").lower()


def choose_stage2(window: ph.WindowAggregateExec, forced: str | None) -> tuple[str, str]:
    """The reader path's stage 2 and why: Spark's own aggregation over the pane partials
    where every aggregate merges with a Spark function (native_stage2.py) and each pane
    lies in at most NATIVE_STAGE2_MAX_WINDOWS_PER_PANE windows (Spark copies a partial into
    each of them); else mangonel's Python stage 2, whose cost per micro-batch is fixed."""
    why_not = native_stage2_module.unmergeable(window)
    if forced == "native":
        if why_not is not None:
            raise PlanError(f"stage2='native' cannot run this query: {why_not}")
        return "native", "stage2='native' requested"
    if forced == "python":
        return "python", "stage2='python' requested"
    if why_not is not None:
        return "python", why_not
    per_pane = window.window.size // window.pane_length
    shape = f"{per_pane} windows per pane"
    if per_pane > NATIVE_STAGE2_MAX_WINDOWS_PER_PANE:
        return "python", (
            f"{shape} > {NATIVE_STAGE2_MAX_WINDOWS_PER_PANE}: Spark would copy each partial into "
            f"{per_pane} windows; mangonel's stage 2 merges each pane once"
        )
    return "native", (
        f"{shape} <= {NATIVE_STAGE2_MAX_WINDOWS_PER_PANE} and every aggregate merges with a "
        "Spark function: no Python stateful operator"
    )


def reader_applies(window: ph.WindowAggregateExec, late_rows: bool) -> tuple[bool, str]:
    """Whether stage 1 can run inside mangonel's own reader of the stream (reader.py), and
    why not: the stream must be one mangonel reads (a CREATE STREAM source option), the
    partials must be pane partials (not count windows' per-tuple ones), and nothing may need
    the rows themselves after stage 1 (late rows as data) or Spark's own aggregation
    (session windows)."""
    source = stream_source(window)
    if source not in READER_SOURCES:
        reason = f"source = '{source}'" if source else "a registered DataFrame"
        return False, f"the stream is {reason}; the reader reads {', '.join(READER_SOURCES)}"
    if window.window.kind in (WindowKind.COUNT, WindowKind.SESSION):
        return False, f"{window.window.kind.value} windows have no pane partials"
    if late_rows:
        return False, "late_rows= needs the rows beside the partials (Arrow stage 1)"
    return True, ""


def bucket_key_pairs(plan: ph.ProjectExec) -> tuple[tuple[int, ...], str]:
    """The join key pairs that may pick a row's bucket, and why.

    Rows of both sides with equal keys must meet in one bucket: any subset of the key pairs
    does that, since a pair matches only if every key pair is equal. With GROUP BY over the
    join, every group must also live in one bucket (a bucket's aggregates are final), so only
    key pairs the groups determine may be used: a GROUP BY column that is one side's key and
    is never NULL-padded (the left key unless the join keeps unmatched right rows, and the
    mirror). None of them (no GROUP BY, or groups across keys): one bucket."""
    join = ph.find(plan, ph.WindowJoinExec)
    pairs = range(len(join.left_keys))
    aggregates = [node for node in ph.walk(plan) if isinstance(node, ph.JoinAggregateExec)]
    if not aggregates:
        return tuple(pairs), "rows of equal keys meet in one bucket"
    groups = {key.name for key in aggregates[0].keys}
    covered = tuple(
        i
        for i in pairs
        if (join.left_keys[i].name in groups and not join.kind.keeps_right)
        or (join.right_keys[i].name in groups and not join.kind.keeps_left)
    )
    if covered:
        names = ", ".join(join.left_keys[i].name for i in covered)
        return covered, f"GROUP BY holds the join key ({names}): each group in one bucket"
    return (), (
        "GROUP BY does not hold a join key of a side that is never NULL-padded: a group may "
        "span keys, so one bucket aggregates it all"
    )


def plan_join(
    text: str, plan: ph.ProjectExec, *, partitions: int, buckets: int | None = None
) -> SparkQueryPlan:
    """A join query inside Spark (runtime/spark/join.py): both sides' rows, tagged by side,
    grouped by a bucket of their join key; each bucket's join operator is its state."""
    pairs, reason = bucket_key_pairs(plan)
    count = (buckets or 2 * partitions) if pairs else 1
    return SparkQueryPlan(text, plan, count, "", join_keys=pairs, join_reason=reason)


def join_bucket_sql(
    join: ph.WindowJoinExec, side: int, pairs: tuple[int, ...], buckets: int
) -> str:
    """Spark SQL of a row's bucket on one side of a join (its own column names): Spark's hash
    of the chosen key columns, integers as BIGINT so INT and BIGINT keys hash alike."""
    if not pairs or buckets == 1:
        return "0"
    keys = join.left_keys if side == 0 else join.right_keys
    prefix = join.aliases[side] + "."
    parts = []
    for i in pairs:
        name = quote(keys[i].name[len(prefix) :])
        parts.append(name if keys[i].type is SqlType.STRING else f"CAST({name} AS BIGINT)")
    return f"pmod(hash({', '.join(parts)}), {buckets})"


def _source(stream) -> PlanNode:  # noqa: ANN001 - a catalog Stream
    parameters = [Parameter("stream", stream.name, stream.name)]
    if stream.option("source"):
        parameters.append(Parameter("source", stream.option("source"), stream.option("source")))
    return PlanNode("Source", tuple(parameters))


def _watermark(window: ph.WindowAggregateExec, stream, child: PlanNode) -> PlanNode:  # noqa: ANN001
    delay = window.window.watermark_delay_us
    return PlanNode(
        "EventTimeWatermark",
        (
            Parameter("column", stream.event_time, stream.event_time),
            Parameter("delay", format_duration(delay), delay),
        ),
        (child,),
    )


def _join_stages(planned: SparkQueryPlan, join: ph.WindowJoinExec) -> tuple[str, PlanNode]:
    sides: list[PlanNode] = []
    for index, scan in enumerate(join.children):
        bucket = join_bucket_sql(join, index, planned.join_keys, planned.buckets)
        columns = ", ".join(quote(c.name) for c in scan.columns)
        parameters = [
            Parameter("side", str(index), index),
            Parameter("columns", f"[{columns}]", [c.name for c in scan.columns]),
            Parameter("bucket", bucket, bucket),
        ]
        if isinstance(scan, ph.TableScanExec):
            table = PlanNode("Table", (Parameter("table", scan.table.name, scan.table.name),))
            parameters.append(Parameter("read", "once at sql(), shipped per bucket", "once"))
            sides.append(PlanNode("Static Project", tuple(parameters), (table,)))
            continue
        stream = scan.stream
        delay = join.watermark_delays[index] or 0
        watermarked = PlanNode(
            "EventTimeWatermark",
            (
                Parameter("column", stream.event_time, stream.event_time),
                Parameter("delay", format_duration(delay), delay),
            ),
            (_source(stream),),
        )
        sides.append(PlanNode("Project", tuple(parameters), (watermarked,)))
    streams = [s for s in sides if s.name == "Project"]
    below = (
        streams[0]
        if len(streams) == 1
        else PlanNode(
            "Union", (Parameter("by", "name, other side's columns filled", "name"),), tuple(streams)
        )
    )
    rows = "rows of both sides, tagged by side" if len(streams) == 2 else "the stream's rows"
    exchange = PlanNode(
        "Exchange",
        (
            Parameter("partitioning", "hashpartitioning(bucket)", "bucket"),
            Parameter("rows", rows, rows),
        ),
        (below,),
    )
    children = (exchange, *[s for s in sides if s.name != "Project"])
    watermark = "min over the streams" if len(streams) == 2 else "the stream's"
    # where the join itself runs: a GPU plan may keep it on the CPU (gpu_join=False,
    # factorised cells); the plan's other steps print as `!` lines when off its backend
    join_step = ph.placement(join, "join")
    stage2 = PlanNode(
        "Stage2 applyInPandasWithState",
        (
            Parameter("key", "bucket", "bucket"),
            Parameter("buckets", str(planned.buckets), planned.buckets),
            Parameter("state", "join-operator-snapshot", "join-operator-snapshot"),
            Parameter("output_mode", "append", "append"),
            Parameter("timeout", "event-time", "event-time"),
            Parameter("watermark", watermark, watermark),
            Parameter("fires", "window_end<=watermark", "window_end<=watermark"),
            Parameter("algorithm", join.algorithm, join.algorithm),
            Parameter("backend", join_step.backend, join_step.backend),
            *_per_executor(join.backend),
            Parameter("metrics", f"observe({OBSERVATION})", OBSERVATION),
        ),
        children,
        _join_placements(planned.plan),
    )
    return f"Spark: window join (buckets: {planned.join_reason})", stage2


def _join_placements(plan: ph.ProjectExec) -> tuple[ph.Placement, ...]:
    """Every step the bucket callback runs: the join's and those of the operators over it
    (aggregation, HAVING, projection), bottom up."""
    nodes = [
        node
        for node in ph.walk(plan)
        if isinstance(
            node, (ph.WindowJoinExec, ph.JoinAggregateExec, ph.FilterExec, ph.ProjectExec)
        )
    ]
    return tuple(p for node in reversed(nodes) for p in node.placements)


def spark_stages(planned: SparkQueryPlan) -> tuple[str, PlanNode]:
    """(title line, operators top first) of the Spark side of a planned query."""
    join = planned.join
    if join is not None:
        return _join_stages(planned, join)
    window = planned.window
    scan = window.lift.scan
    stream = scan.stream
    keys = ", ".join(quote(k.name) for k in window.keys)
    watermarked = _watermark(window, stream, _source(stream))
    if planned.native:
        calls = [aggregate_sql(plan, scan) for plan in window.aggregates]
        predicate = window.lift.predicate
        where = lift_sql(predicate, scan) if predicate is not None else "none"
        if window.window.kind is WindowKind.SESSION:
            grouping = f"session_window({stream.event_time}, {format_duration(window.window.size)})"
        else:
            grouping = (
                f"window({stream.event_time}, {format_duration(window.window.size)}, "
                f"{format_duration(window.window.slide)})"
            )
        group_by = f"{grouping}{', ' if keys else ''}{keys}"
        aggregate = PlanNode(
            "StreamingAggregate",
            (
                Parameter("group_by", f"[{group_by}]", group_by),
                Parameter("aggregates", f"[{', '.join(calls)}]", calls),
                Parameter("output_mode", "append", "append"),
                Parameter("fires", "window_end<=watermark", "window_end<=watermark"),
            ),
            (PlanNode("Filter", (Parameter("where", where, where),), (watermarked,)),),
        )
        return f"Spark: native window aggregation (reason: {planned.native_reason})", aggregate
    bucket = f"pmod(hash({keys}), {planned.buckets})" if keys else "0"
    where = f"{stream.event_time} IS NOT NULL"
    if window.lift.predicate is not None:
        where += f" AND ({format_expression(window.lift.predicate)})"
    counted = window.window.kind is WindowKind.COUNT
    one_per_tuple = native_module.per_tuple(window)
    if planned.stage1 == "arrow":
        preaggregate = "arrow-hash-aggregate"
        pane = f"floor(unix_micros({stream.event_time}) / {window.pane_length})"
        project = (Parameter("where", where, where), Parameter("pane", pane, pane))
    else:
        preaggregate = f"{window.backend}-lift-kernels"
        fused = "none (fused into the lift kernel)"
        project = (Parameter("where", fused, None),)
    group_by = f"[{keys}{', ' if keys else ''}pane]"
    shape = [Parameter("preaggregate", "none (per-tuple partials)", None)]
    if counted:  # a key's tuples in arrival order at stage 2
        shape.append(Parameter("order", "(partition, row)", "(partition, row)"))
    if not one_per_tuple:
        shape = [
            Parameter("preaggregate", preaggregate, preaggregate),
            Parameter("group_by", group_by, group_by),
        ]
        values = [f.name for f in window.fields if f.kind.holistic]
        if values:
            # the holistic functions' raw values cross the shuffle, per (key, pane)
            shipped = f"[{', '.join(values)}] (BINARY: the non-NULL values as int64 order keys)"
            shape.append(Parameter("pane_values", shipped, values))
            timed = sorted(timed_fields(window))
            if timed:  # a Python function with_timestamps: the values' event times too
                times = f"[{', '.join(timed)}] (BINARY: the values' event times, microseconds)"
                shape.append(Parameter("pane_times", times, timed))
    if planned.stage1_reason:
        shape.append(Parameter("reader", f"none: {planned.stage1_reason}", None))
    stage1 = PlanNode(
        "Stage1 mapInArrow",
        (*shape, *_per_executor(window.backend)),
        (PlanNode("Stage1 native Project/Filter", project, (watermarked,)),),
        planned.stage1_placements,
    )
    if planned.stage1 == "reader":
        stage1 = _reader_stage1(planned, group_by)
        if planned.stage2 == "native":
            return _native_stage2(planned, stage1)
    rows = "per-tuple partials" if one_per_tuple else "(key, pane) partials"
    exchange = PlanNode(
        "Exchange",
        (
            Parameter("partitioning", f"hashpartitioning(bucket={bucket})", bucket),
            Parameter("rows", rows, rows),
        ),
        (stage1,),
    )
    fires = "window_end<=watermark"
    if counted:
        fires = "last_tuple_ts<watermark, tuples in (ts, batch, partition, row) order"
    elif one_per_tuple:
        fires = "session_end<=watermark, late when ts+gap<=previous watermark"
    stage2_parameters = [
        Parameter("key", bucket, bucket),
        Parameter("buckets", str(planned.buckets), planned.buckets),
        Parameter("state", "window-operator-snapshot", "window-operator-snapshot"),
        Parameter("output_mode", "append", "append"),
        Parameter("timeout", "event-time", "event-time"),
        Parameter("fires", fires, fires),
        Parameter("backend", window.backend, window.backend),
        *_per_executor(window.backend),
    ]
    if window.holistic is not None:
        # time windows: the pane values live in the snapshot (Spark's state store) until no
        # unfired window covers their pane; count windows: the tuples' values, as standalone.
        # Each window is evaluated over them when it fires
        step = ph.placement(window, "holistic")
        holistic = f"{window.holistic.describe()} on {step.backend} at window close"
        stage2_parameters.append(Parameter("holistic", holistic, window.holistic.strategy))
    stage2 = PlanNode(
        "Stage2 applyInPandasWithState",
        tuple(stage2_parameters),
        (exchange,),
        tuple(p for p in window.placements if p.step == "holistic"),
    )
    if (window.holistic is not None or one_per_tuple) and not counted:
        # why not Spark's own: holistic functions whatever the shape; sessions (not native)
        return f"Spark: two stages (reason: {planned.native_reason})", stage2
    if planned.stage1 == "reader":
        return f"Spark: stage 2 in Python (reason: {planned.stage2_reason})", stage2
    return "Spark:", stage2


def _native_stage2(planned: SparkQueryPlan, reader: PlanNode) -> tuple[str, PlanNode]:
    """The reader's partials merged by Spark's own window aggregation (native_stage2.py):
    the pane start is the windowed time, the watermark stays on the partials' watermark
    time, carrier rows are filtered above it."""
    window = planned.window
    keys = ", ".join(quote(k.name) for k in window.keys)
    grouping = (
        f"window(pane_start, {format_duration(window.window.size)}, "
        f"{format_duration(window.window.slide)})"
    )
    group_by = f"{grouping}{', ' if keys else ''}{keys}"
    calls = native_stage2_module.merge_calls(window)
    pane = f"timestamp_micros(__pane * {window.pane_length})"
    carriers = "row count > 0 (carrier rows carry only the watermark time)"
    aggregate = PlanNode(
        "Stage2 native StreamingAggregate",
        (
            Parameter("group_by", f"[{group_by}]", group_by),
            Parameter("pane_start", pane, pane),
            Parameter("aggregates", f"[{', '.join(calls)}]", calls),
            Parameter("output_mode", "append", "append"),
            Parameter("fires", "window_end<=watermark", "window_end<=watermark"),
            Parameter("late", "window_end<=previous watermark, per window", "per-window"),
        ),
        (
            PlanNode(
                "Exchange",
                (
                    Parameter("partitioning", f"hashpartitioning(window, {keys or '()'})", None),
                    Parameter("rows", "(key, pane) partials", "partials"),
                ),
                (PlanNode("Filter", (Parameter("where", carriers, carriers),), (reader,)),),
            ),
        ),
    )
    return (
        f"Spark: stage 2 as Spark's native aggregation of pane partials (reason: "
        f"{planned.stage2_reason})",
        aggregate,
    )


def _reader_stage1(planned: SparkQueryPlan, group_by: str) -> PlanNode:
    """Stage 1 inside mangonel's own reader (reader.py): Spark's watermark sits on the
    partials' watermark time (the maximum event time of the partition's rows that Spark's
    watermark counts), so no row enters the JVM."""
    window = planned.window
    stream = window.lift.scan.stream
    source = stream.option("source").lower()
    parts = {
        "generator": "tuple ranges on chunk boundaries",
        "parquet": "one per row group",
        "csv": "one per file",
    }[source]
    offsets = "tuples read" if source == "generator" else "last file read, name order"
    preaggregate = f"{window.backend}-lift-kernels"
    reader = PlanNode(
        "Stage1 Python Data Source: mangonel_panes",
        (
            Parameter("source", source, source),
            Parameter("where", "fused into the lift kernel", None),
            Parameter("preaggregate", preaggregate, preaggregate),
            Parameter("group_by", group_by, group_by),
            Parameter("partitions", parts, parts),
            Parameter("offsets", offsets, offsets),
            Parameter("rows_to_jvm", "(key, pane) partials", "partials"),
            *_per_executor(window.backend),
        ),
        (_source(stream),),
        planned.stage1_placements,
    )
    delay = window.window.watermark_delay_us
    column = f"max({stream.event_time}) of each partition"
    return PlanNode(
        "EventTimeWatermark",
        (
            Parameter("column", column, stream.event_time),
            Parameter("delay", format_duration(delay), delay),
        ),
        (reader,),
    )


def _per_executor(backend: str) -> tuple[Parameter, ...]:
    """A GPU plan's Spark stages choose their backend per executor (`functions.executor_backend`):
    the GPU where the executor has one, else the same plan replanned for the CPU."""
    if backend != "gpu":
        return ()
    text = "per executor: gpu where it has one, else cpu"
    return (Parameter("executor", text, text),)


def spark_stages_text(planned: SparkQueryPlan) -> str:
    """The Spark side of a query, one operator per line, top (sink side) first."""
    title, root = spark_stages(planned)
    return title + "\n" + explain_text(root, planned.backend, depth=1)
