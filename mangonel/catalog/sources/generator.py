"""The built-in generator source: synthetic streams with a chosen rate, key count, key skew
and disorder, reproducible from a seed. Used by `mangonel run`, the benchmarks, the tests
and the Spark generator source, so every one of them sees the same data for a seed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mangonel.catalog.catalog import Schema
from mangonel.catalog.types import SqlType

DEFAULT_START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z, aligned to every window


class GeneratorSettingError(ValueError):
    """A GeneratorConfig field out of range; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# Upper bounds of the whole-number settings: event times are whole microseconds of int64
# (`tuples * 1e6` must fit) and key ids fit an INT column.
MAX_SETTING = {
    "tuples": 10**12,
    "rate": 10**12,
    "keys": 2**31 - 1,
    "batch_size": 10**9,
}
MAX_SKEWED_KEYS = 10**8  # with skew, each key's weight is tabulated (8 bytes a key)
MAX_SKEW = 100.0  # a Zipf exponent past it puts every tuple on the first key anyway
# Below this many keys their STRING spellings are made once, above per batch
SPELLED_KEYS = 1 << 20


@dataclass(frozen=True)
class GeneratorConfig:
    """rate: tuples per second of event time. delay_us: each tuple's timestamp is moved back
    by a uniform amount in [0, delay_us) (disorder). skew: Zipf exponent of key popularity
    (0 = uniform). tuples: how many tuples in all. null_fraction: share of NULLs in value
    columns (never in keys or the event time)."""

    tuples: int = 1_000_000
    rate: int = 1_000_000
    keys: int = 1000
    skew: float = 0.0
    delay_us: int = 0
    batch_size: int = 100_000
    seed: int = 0
    start_us: int = DEFAULT_START_US
    null_fraction: float = 0.0

    def __post_init__(self) -> None:
        for name in ("tuples", "rate", "keys", "batch_size"):
            if getattr(self, name) <= 0:
                raise GeneratorSettingError(
                    name, f"generator {name} must be positive, got {getattr(self, name)}"
                )
            if getattr(self, name) > MAX_SETTING[name]:
                raise GeneratorSettingError(
                    name,
                    f"generator {name} must be at most {MAX_SETTING[name]:,}, "
                    f"got {getattr(self, name):,}",
                )
        if self.skew > MAX_SKEW:
            raise GeneratorSettingError(
                "skew", f"generator skew must be at most {MAX_SKEW}, got {self.skew}"
            )
        if self.skew > 0 and self.keys > MAX_SKEWED_KEYS:
            raise GeneratorSettingError(
                "keys",
                f"generator keys must be at most {MAX_SKEWED_KEYS:,} with skew > 0 (their "
                f"popularity is tabulated), got {self.keys:,}",
            )
        for name in ("delay_us", "skew", "seed"):
            if getattr(self, name) < 0:
                raise GeneratorSettingError(
                    name, f"generator {name} must be >= 0, got {getattr(self, name)}"
                )
        if not 0 <= self.null_fraction < 1:
            raise GeneratorSettingError(
                "null_fraction",
                f"generator null_fraction must be in [0, 1), got {self.null_fraction}",
            )


def default_key_columns(schema: Schema, event_time: str) -> tuple[str, ...]:
    """The column that carries keys when none is named: the first STRING or integer column."""
    for column in schema.columns:
        if column.name != event_time and (column.type is SqlType.STRING or column.type.is_integer):
            return (column.name,)
    return ()


def _key_ids(rng: np.random.Generator, config: GeneratorConfig, count: int) -> np.ndarray:
    if config.skew == 0:
        return rng.integers(0, config.keys, size=count, dtype=np.int64)
    weights = 1.0 / np.arange(1, config.keys + 1, dtype=np.float64) ** config.skew
    cumulative = np.cumsum(weights)
    draws = rng.random(count) * cumulative[-1]
    return np.searchsorted(cumulative, draws, side="right").astype(np.int64)


def _values(
    rng: np.random.Generator, sql_type: SqlType, count: int, timestamps: np.ndarray
) -> pa.Array:
    if sql_type is SqlType.TIMESTAMP:
        return pa.array(timestamps, pa.timestamp("us", tz="UTC"))
    if sql_type is SqlType.DOUBLE:
        return pa.array(rng.random(count) * 100.0)
    if sql_type is SqlType.FLOAT:
        return pa.array((rng.random(count) * 100.0).astype(np.float32))
    if sql_type is SqlType.BIGINT:
        return pa.array(rng.integers(1, 1000, size=count, dtype=np.int64))
    if sql_type is SqlType.INT:
        return pa.array(rng.integers(1, 1000, size=count, dtype=np.int32))
    if sql_type is SqlType.BOOLEAN:
        return pa.array(rng.random(count) < 0.5)
    return pa.array(np.char.add("v", rng.integers(0, 100, size=count).astype(str)))


def _key_array(sql_type: SqlType, ids: np.ndarray, dictionary: pa.Array | None) -> pa.Array:
    if sql_type is SqlType.STRING:
        if dictionary is None:  # many keys: spelled for this batch only
            return pc.binary_join_element_wise("k", pc.cast(pa.array(ids), pa.string()), "")
        return pc.take(dictionary, pa.array(ids))
    return pa.array(ids.astype(sql_type.info.numpy))


def generate(
    schema: Schema,
    event_time: str,
    config: GeneratorConfig,
    key_columns: tuple[str, ...] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of `config.batch_size` rows (the last may be shorter) for a stream schema.

    Event time advances `1 / rate` seconds per tuple from `start_us`; key columns draw key
    ids from [0, keys) (strings spell them `k<id>`); other columns get random values.
    """
    rng = np.random.default_rng(config.seed)
    if key_columns is None:
        key_columns = default_key_columns(schema, event_time)
    arrow_schema = schema.to_arrow()
    dictionary = (
        pa.array([f"k{i}" for i in range(config.keys)]) if config.keys <= SPELLED_KEYS else None
    )
    produced = 0
    while produced < config.tuples:
        count = min(config.batch_size, config.tuples - produced)
        positions = np.arange(produced, produced + count, dtype=np.int64)
        timestamps = config.start_us + positions * 1_000_000 // config.rate
        if config.delay_us > 0:
            timestamps = timestamps - rng.integers(0, config.delay_us, size=count)
        ids = _key_ids(rng, config, count)
        arrays = []
        for column in schema.columns:
            if column.name == event_time:
                array = pa.array(timestamps, pa.timestamp("us", tz="UTC"))
            elif column.name in key_columns:
                array = _key_array(column.type, ids, dictionary)
            else:
                array = _values(rng, column.type, count, timestamps)
                if config.null_fraction > 0 and column.nullable:
                    nulls = pa.array(rng.random(count) < config.null_fraction)
                    array = pc.if_else(nulls, pa.scalar(None, array.type), array)
            arrays.append(array.cast(arrow_schema.field(column.name).type))
        produced += count
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
