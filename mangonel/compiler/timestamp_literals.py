"""TIMESTAMP literal text: what mangonel reads (`yyyy-mm-dd[ hh:mm[:ss[.ffffff]]][Z|+hh:mm]`,
UTC without a zone) and the zone-naming text it writes for Spark. The typing rules
(`compiler.typing.timestamp_literal_value`) read literals through it."""

from __future__ import annotations

import datetime
import re

from sqlglot import exp

_TIMESTAMP_TEXT = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})"
    r"(?:[ T](?P<hour>\d{1,2}):(?P<minute>\d{1,2})"
    r"(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{1,6}))?)?)?"
    r"\s*(?P<zone>Z|UTC|[+-]\d{2}(?::?\d{2})?)?"
)
TIMESTAMP_FORMAT_HINT = (
    "write TIMESTAMP 'yyyy-mm-dd[ hh:mm[:ss[.ffffff]]][Z|+hh:mm]', e.g. "
    "TIMESTAMP '2026-01-01 00:00:00'; without a zone the time is UTC"
)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
# TIMESTAMP as sqlglot spells it after reading mangonel's dialect or Spark's (an instant)
TIMESTAMP_TYPES = (
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
)


def timestamp_text_microseconds(text: str) -> int:
    """Microseconds since the epoch of a TIMESTAMP literal's text; ValueError when it is not
    one."""
    match = _TIMESTAMP_TEXT.fullmatch(text.strip())
    if match is None:
        raise ValueError(text)
    parts = match.groupdict()
    zone = parts["zone"]
    offset = datetime.timedelta(0)
    if zone and zone not in ("Z", "UTC"):
        digits = zone[1:].replace(":", "")
        offset = datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        if zone[0] == "-":
            offset = -offset
    moment = datetime.datetime(
        int(parts["year"]),
        int(parts["month"]),
        int(parts["day"]),
        int(parts["hour"] or 0),
        int(parts["minute"] or 0),
        int(parts["second"] or 0),
        int((parts["fraction"] or "").ljust(6, "0")),
        tzinfo=datetime.timezone(offset),
    )
    return (moment - _EPOCH) // datetime.timedelta(microseconds=1)


def utc_timestamp_literal(microseconds: int) -> exp.Cast:
    """`CAST('<UTC time>Z' AS TIMESTAMP)`: a TIMESTAMP literal whose text names its zone, so
    Spark reads the same instant whatever its session time zone."""
    moment = _EPOCH + datetime.timedelta(microseconds=microseconds)
    # the year padded to four digits by hand: strftime's %Y gives "1" for year 1 on Linux,
    # a text this module then could not read back
    text = f"{moment.year:04d}-" + moment.strftime("%m-%d %H:%M:%S.%f") + "Z"
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("TIMESTAMP"))


__all__ = [
    "TIMESTAMP_FORMAT_HINT",
    "TIMESTAMP_TYPES",
    "timestamp_text_microseconds",
    "utc_timestamp_literal",
]
