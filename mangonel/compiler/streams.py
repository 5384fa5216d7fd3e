"""CREATE STREAM -> a catalog Stream: the event-time column, the watermark and the options
checked (the DDL twin of `Session.create_stream`)."""

from __future__ import annotations

from mangonel.catalog.catalog import Schema, Stream
from mangonel.catalog.options import check_stream_options
from mangonel.catalog.types import SqlType
from mangonel.compiler.ddl import CreateStream
from mangonel.compiler.durations import parse_duration
from mangonel.errors import CatalogError, SqlError


def stream_from_ddl(statement: CreateStream) -> Stream:
    """Validate a CREATE STREAM's options into a catalog Stream.

    event_time (required) names a TIMESTAMP column; watermark is a duration (default 0);
    `source` and its options (`catalog.options`) are kept verbatim (key lower-case) in
    Stream.options; any other option is refused.
    """
    schema = Schema(statement.columns)
    timestamps = [c.name for c in statement.columns if c.type is SqlType.TIMESTAMP]
    timestamp_hint = (
        "TIMESTAMP columns: " + ", ".join(timestamps)
        if timestamps
        else "declare a TIMESTAMP column for the event time"
    )
    event_time = statement.option("event_time")
    if event_time is None:
        line, column = statement.position
        raise SqlError(
            f"stream {statement.name!r} needs an event_time option",
            line=line,
            column=column,
            construct=statement.name,
            hint=f"add WITH (event_time = '<column>'); {timestamp_hint}",
        )
    event_column = schema.find(event_time)
    if event_column is None or event_column.type is not SqlType.TIMESTAMP:
        line, column = statement.option_position("event_time")
        problem = (
            f"has no column {event_time!r}"
            if event_column is None
            else f"column {event_column.name!r} is {event_column.type}, not TIMESTAMP"
        )
        raise (CatalogError if event_column is None else SqlError)(
            f"event_time must name a TIMESTAMP column: stream {statement.name!r} {problem}",
            line=line,
            column=column,
            construct=f"event_time = '{event_time}'",
            hint=timestamp_hint,
        )
    delay = 0
    watermark = statement.option("watermark")
    if watermark is not None:
        line, column = statement.option_position("watermark")
        try:
            delay = parse_duration(watermark)
        except SqlError as error:
            # Point into the option's value: its text starts one past the opening quote.
            inner_column = (error.column or 1) if (error.line or 1) == 1 else 1
            raise SqlError(
                error.message,
                line=line,
                column=column + inner_column,
                construct=f"watermark = '{watermark}'",
                hint=error.hint,
            ) from None
        if delay < 0:
            raise SqlError(
                f"watermark must not be negative, got {watermark!r}",
                line=line,
                column=column,
                construct=f"watermark = '{watermark}'",
                hint="the watermark is the out-of-orderness bound, e.g. '500 milliseconds'",
            )
    problem = check_stream_options(statement.name, statement.options)
    if problem is not None:
        line, column = statement.option_position(problem.key, of_key=True)
        raise SqlError(
            problem.message,
            line=line,
            column=column,
            construct=f"{problem.key} = '{statement.option(problem.key)}'",
            hint=problem.hint,
        )
    options = tuple(
        (key, value) for key, value in statement.options if key not in ("event_time", "watermark")
    )
    return Stream(
        name=statement.name,
        schema=schema,
        event_time=event_column.name,
        watermark_delay_us=delay,
        options=options,
    )
