"""Random streams through the CPU engine and the oracle: same rows after every batch.

Random disorder (up to several windows), batch boundaries, window shapes (few and many panes
per window), 1 to 1000 keys (integer, string, two columns, none), NULLs everywhere, a WHERE
on a boolean column, and a snapshot/restore at a random batch. Derandomized, so CI is
reproducible; 330 cases per run in all.
"""

from __future__ import annotations

import pyarrow as pa
from fuzzer import engine_rows as _rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import rows_close
from plans import make_plan, oracle_for
from sqlglot import exp

from mangonel.catalog.types import SqlType as T
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.runtime.local.query import LocalQuery

STAMP = pa.timestamp("us", tz="UTC")
COLUMNS = [
    ("ts", T.TIMESTAMP),
    ("ik", T.BIGINT),
    ("sk", T.STRING),
    ("x", T.BIGINT),
    ("v", T.DOUBLE),
    ("ok", T.BOOLEAN),
]
AGGREGATES = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("v")),
    (F.SUM, exp.column("x")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("v")),
    (F.AVG, exp.column("v")),
    (F.VAR_POP, exp.column("v")),
    (F.VAR_SAMP, exp.column("x")),
    (F.STDDEV_POP, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("v")),
    (F.SUM, exp.column("v")),
    (F.MIN, exp.column("ts")),
]
KEY_CHOICES = {"int": ["ik"], "string": ["sk"], "both": ["sk", "ik"], "none": []}
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _maybe_null(draw, values, rate):
    return [None if draw(st.floats(0, 1)) < rate else value for value in values]


def random_batches(
    draw, spacing: int, disorder: int, key_counts: tuple[int, int], most_rows: int, outlier: bool
) -> tuple[str, list[pa.RecordBatch]]:
    """A key choice (of `KEY_CHOICES`) and batches of `COLUMNS` rows: event times `spacing`
    apart plus up to `disorder` (some NULL; with `outlier`, at times one far ahead), up to
    `key_counts` (few, many) distinct keys, up to `most_rows` rows, NULLs in every column at
    a drawn rate, cut at up to 6 drawn places."""
    keys = draw(st.sampled_from(sorted(KEY_CHOICES)))
    few, many = key_counts
    key_count = draw(st.one_of(st.integers(1, few), st.integers(1, many)))
    rows = draw(st.integers(0, most_rows))
    start = draw(st.integers(-50, 50))
    ts = [start + i * spacing + draw(st.integers(0, disorder)) for i in range(rows)]
    if outlier and rows and draw(st.integers(0, 7)) == 0:  # far ahead: sparse pane segments
        ts[draw(st.integers(0, rows - 1))] += 10**8
    ts = _maybe_null(draw, ts, draw(st.sampled_from([0.0, 0.05])))
    null_rate = draw(st.sampled_from([0.0, 0.1, 0.5]))
    ik = _maybe_null(draw, [draw(st.integers(0, key_count - 1)) for _ in range(rows)], null_rate)
    sk = [None if k is None else f"s{k % 7}" for k in ik]
    x = _maybe_null(draw, [draw(st.integers(-1000, 1000)) for _ in range(rows)], null_rate)
    v = _maybe_null(draw, [draw(st.integers(-400, 400)) / 4 for _ in range(rows)], null_rate)
    ok = [draw(st.sampled_from([True, True, False, None])) for _ in range(rows)]
    table = pa.table(
        [
            pa.array(ts, pa.int64()).cast(STAMP),
            pa.array(ik, pa.int64()),
            pa.array(sk, pa.string()),
            pa.array(x, pa.int64()),
            pa.array(v, pa.float64()),
            pa.array(ok, pa.bool_()),
        ],
        names=[c for c, _ in COLUMNS],
    )
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=6)))
    bounds = [0, *cuts, rows]
    batches = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = table.slice(a, b - a)
        columns = [column.combine_chunks() for column in part.columns]
        batches.append(pa.RecordBatch.from_arrays(columns, schema=table.schema))
    return keys, batches


@st.composite
def streams(draw, kind: str):
    if kind == "time":
        slide = draw(st.integers(1, 12))
        size = draw(st.one_of(st.integers(1, 6).map(lambda f: f * slide), st.integers(slide, 60)))
        spacing = draw(st.integers(0, 3))
        # delays on the slide grid make window ends land exactly on the watermark
        delay = draw(
            st.one_of(st.integers(0, 3 * size), st.integers(0, 3).map(lambda k: k * slide))
        )
        disorder = draw(st.integers(0, 3 * size))
    else:
        size = draw(st.integers(1, 6))
        slide = draw(st.integers(1, size))
        spacing = draw(st.integers(0, 3))
        delay = draw(st.integers(0, 20))
        disorder = draw(st.integers(0, 20))
    keys, batches = random_batches(draw, spacing, disorder, (5, 1000), 120, outlier=True)
    plan = make_plan(
        COLUMNS,
        keys=KEY_CHOICES[keys],
        kind=kind,
        size=size,
        slide=slide,
        delay=delay,
        aggregates=AGGREGATES,
        where=exp.column("ok") if draw(st.booleans()) else None,
        windows_per_batch=draw(st.sampled_from([None, 1, 2, 3, 8])),
    )
    snapshot_at = draw(st.one_of(st.none(), st.integers(0, len(batches))))
    return plan, batches, snapshot_at


def _check(plan, batches, snapshot_at) -> None:
    query = LocalQuery(plan)
    oracle = oracle_for(plan)
    for position, batch in enumerate(batches):
        if position == snapshot_at:
            saved = query.snapshot()
            query = LocalQuery(plan)
            query.restore(saved)
        got = _rows(query.process(batch))
        want = oracle.process(batch)
        assert rows_close(got, want), f"after batch {position}:\n{got}\n!=\n{want}"
    got = _rows(query.finish())
    want = oracle.finish()
    assert rows_close(got, want), f"at end of input:\n{got}\n!=\n{want}"
    m = query.metrics
    assert (m.tuples_in, m.late_tuples_dropped, m.null_event_time_dropped) == (
        oracle.tuples_in,
        oracle.late,
        oracle.null_event_time,
    )


@settings(max_examples=250, **SETTINGS)
@given(streams("time"))
def test_time_windows_match_the_oracle(case):
    _check(*case)


@settings(max_examples=80, **SETTINGS)
@given(streams("count"))
def test_count_windows_match_the_oracle(case):
    _check(*case)
