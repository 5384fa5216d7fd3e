"""HyperLogLog++ on the CPU (numba): hash, build one register set per (key, pane) cell from a
batch in one pass, merge sets of cells, estimate. The definition (precision, constants,
estimate rule, what differs from Spark) is `mangonel.aggregates.sketches`; docs/sketches.md.

Registers are a `[cells, 2^p]` uint8 array (Spark packs ten 6-bit registers per long; one byte
each keeps the update a plain store and the merge a vectorisable max). The hash is XXH64 with
seed 42 over the bytes Spark hashes (`XxHash64Function`): 8 bytes of a BIGINT/TIMESTAMP, 4 of
an INT/BOOLEAN, the IEEE bits of a DOUBLE (4 of a FLOAT) after Spark's normalisation (-0.0
as 0.0, every NaN as the canonical NaN), the UTF-8 bytes of a STRING.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from mangonel.aggregates.sketches import (
    HLL_SEED,
    hll_bins,
    hll_estimate_of_sums,
    hll_from_bytes,
    hll_hash_width,
    hll_registers,
    hll_to_bytes,
)
from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu.intrinsics import bytes_at, prefetch_for_writing
from mangonel.runtime.cpu.sketch_inputs import batch_rows, groups

# XXH64's primes (Yann Collet's xxHash specification)
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_U0 = np.uint64(0)
_MASK32 = np.uint64(0xFFFFFFFF)
_CANONICAL_NAN = 0x7FF8000000000000  # Java's doubleToLongBits(NaN)
_CANONICAL_NAN32 = 0x7FC00000  # Java's floatToIntBits(NaN)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@_jit
def _round(acc: np.uint64, lane: np.uint64) -> np.uint64:
    acc = acc + lane * _P2
    return _rotl(acc, 31) * _P1


@_jit
def _avalanche(h: np.uint64) -> np.uint64:
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@_jit
def _tail8(h: np.uint64, lane: np.uint64) -> np.uint64:
    h ^= _round(_U0, lane)
    return _rotl(h, 27) * _P1 + _P4


@_jit
def _tail4(h: np.uint64, lane32: np.uint64) -> np.uint64:
    h ^= lane32 * _P1
    return _rotl(h, 23) * _P2 + _P3


@_jit
def xxh64_long(value: np.uint64, seed: np.uint64) -> np.uint64:
    """XXH64 of the 8 little-endian bytes of `value` (Spark's XXH64.hashLong)."""
    h = seed + _P5 + np.uint64(8)
    return _avalanche(_tail8(h, value))


@_jit
def xxh64_int(value: np.uint64, seed: np.uint64) -> np.uint64:
    """XXH64 of the 4 little-endian bytes of the low 32 bits of `value` (XXH64.hashInt)."""
    h = seed + _P5 + np.uint64(4)
    return _avalanche(_tail4(h, value & _MASK32))


@_jit
def _read64(data: np.ndarray, at: int) -> np.uint64:
    v = _U0
    for k in range(8):
        v |= np.uint64(data[at + k]) << np.uint64(8 * k)
    return v


@_jit
def xxh64_bytes(data: np.ndarray, start: int, end: int, seed: np.uint64) -> np.uint64:
    """XXH64 of data[start:end] (uint8), the full algorithm: 32-byte stripes, then 8-, 4- and
    1-byte tails (Spark's XXH64.hashUnsafeBytes over a string's UTF-8 bytes)."""
    length = end - start
    at = start
    if length >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        limit = end - 32
        while at <= limit:
            v1 = _round(v1, _read64(data, at))
            v2 = _round(v2, _read64(data, at + 8))
            v3 = _round(v3, _read64(data, at + 16))
            v4 = _round(v4, _read64(data, at + 24))
            at += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h ^= _round(_U0, v)
            h = h * _P1 + _P4
    else:
        h = seed + _P5
    h += np.uint64(length)
    while at + 8 <= end:
        h = _tail8(h, _read64(data, at))
        at += 8
    if at + 4 <= end:
        lane = _U0
        for k in range(4):
            lane |= np.uint64(data[at + k]) << np.uint64(8 * k)
        h = _tail4(h, lane)
        at += 4
    while at < end:
        h ^= np.uint64(data[at]) * _P5
        h = _rotl(h, 11) * _P1
        at += 1
    return _avalanche(h)


# How a row's value becomes its hash: hashLong / hashInt of an integer word, of a double's /
# float's IEEE bits after Spark's normalisation, or the value is a hash already (strings).
_LONG, _INT, _DOUBLE, _FLOAT, _HASHED, _DOUBLE_KEY = 0, 1, 2, 3, 4, 5
_ABS64, _INF64, _SIGN64 = np.uint64(2**63 - 1), np.uint64(0x7FF0000000000000), np.uint64(2**63)
_ABS32, _INF32, _SIGN32 = np.uint64(2**31 - 1), np.uint64(0x7F800000), np.uint64(2**31)
_NAN64, _NAN32 = np.uint64(_CANONICAL_NAN), np.uint64(_CANONICAL_NAN32)


@_jit
def _hash_one(words: np.ndarray, i: int, mode: int, seed: np.uint64) -> np.uint64:
    """words: the column as integers; a DOUBLE/FLOAT column as its IEEE bits (a view), which
    are normalised here as Spark does (every NaN is Java's canonical NaN, -0.0 is 0.0) with
    integer tests only: a branch reading the doubles as floats made this loop 20x slower, its
    integer path too (numba 0.68)."""
    bits = np.uint64(words[i])
    if mode == _LONG:
        return xxh64_long(bits, seed)
    if mode == _INT:
        return xxh64_int(bits & _MASK32, seed)
    if mode == _DOUBLE:
        if bits & _ABS64 > _INF64:
            bits = _NAN64
        elif bits == _SIGN64:
            bits = _U0
        return xxh64_long(bits, seed)
    if mode == _DOUBLE_KEY:
        # a DOUBLE's order key (aggregates.holistic.order_keys): its bits made monotone,
        # already normalised (-0.0 as 0.0, one NaN); decoded as the GPU's kernel does
        if bits & _SIGN64:
            bits ^= _ABS64
        return xxh64_long(bits, seed)
    if mode == _FLOAT:
        bits &= _MASK32
        if bits & _ABS32 > _INF32:
            bits = _NAN32
        elif bits == _SIGN32:
            bits = _U0
        return xxh64_int(bits, seed)
    return bits


@_jit
def _hash_all(words: np.ndarray, mode: int, seed: np.uint64) -> np.ndarray:
    out = np.empty(words.shape[0], np.uint64)
    for i in range(words.shape[0]):
        out[i] = _hash_one(words, i, mode, seed)
    return out


@_jit
def _hash_strings(offsets: np.ndarray, data: np.ndarray, seed: np.uint64) -> np.ndarray:
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = xxh64_bytes(data, offsets[i], offsets[i + 1], seed)
    return out


def _words(values: np.ndarray, argument: SqlType | None) -> tuple[np.ndarray, int]:
    """(words, mode) the kernels read: the column as integers, a DOUBLE or FLOAT column as a
    view of its IEEE bits (no copy when it is already contiguous). argument None: the values
    are hashes already."""
    if argument is None:
        values = np.ascontiguousarray(values)
        words = values.view(np.int64) if values.dtype == np.uint64 else values.astype(np.int64)
        return words, _HASHED
    width = hll_hash_width(argument)
    if width == 0:
        raise TypeError("STRING values hash by their UTF-8 bytes: use hash_strings")
    if values.dtype.kind not in "iubf":
        raise TypeError(f"cannot hash a {values.dtype} array as {argument}")
    if argument is SqlType.DOUBLE:
        return np.ascontiguousarray(values, np.float64).view(np.int64), _DOUBLE
    if argument is SqlType.FLOAT:
        return np.ascontiguousarray(values, np.float32).view(np.int32), _FLOAT
    return np.ascontiguousarray(values, np.int64), _LONG if width == 8 else _INT


def hash_values(values: np.ndarray, argument: SqlType) -> np.ndarray:
    """Spark's xxhash64 (seed 42) of every value of a numeric/BOOLEAN/TIMESTAMP column, as
    uint64 (view as int64 to compare with Spark's signed result)."""
    if argument is None:
        raise TypeError("hash_values needs the argument's SQL type")
    return _hash_all(*_words(values, argument), np.uint64(HLL_SEED))


def hash_strings(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Spark's xxhash64 (seed 42) of every string of an Arrow-style string column: string i is
    data[offsets[i]:offsets[i + 1]] (UTF-8). A dictionary-encoded column hashes its
    dictionary once and takes hashes[ids]."""
    return _hash_strings(
        np.ascontiguousarray(offsets, np.int64),
        np.ascontiguousarray(data, np.uint8),
        np.uint64(HLL_SEED),
    )


@intrinsic
def _leading_zeros(typingctx, x):
    """LLVM's ctlz on a uint64 (one instruction, lzcnt): a branchy binary search here costs
    more than the hash, its branches being as random as the hash bits."""
    if x != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(1)]),
            "llvm.ctlz.i64",
        )
        return builder.call(function, [args[0], ir.Constant(ir.IntType(1), 0)])

    return types.uint64(types.uint64), codegen


@_jit
def _packed_rank(x: np.uint64, p: int) -> np.uint32:
    """A hash's register and rank as one word, index << 8 | rank: the top p bits, and the
    number of leading zeros of the remaining bits (padded with a 1 at bit p - 1 so the rank
    is at most 65 - p) + 1."""
    index = x >> np.uint64(64 - p)
    w = (x << np.uint64(p)) | (np.uint64(1) << np.uint64(p - 1))
    return np.uint32((index << np.uint64(8)) | (_leading_zeros(w) + np.uint64(1)))


# rows hashed per step of a build: their packed ranks stay in L1 until the registers read
# them (a whole batch's would be a fresh array to fault in and stream through memory)
_RANK_CHUNK = 2048
# rows ahead whose register a build prefetches: a row's register is a random byte of its
# cell's 2^p, so the scatter waits on cache misses one after the other without it (the
# table build 10 % faster, 2026-11-27)
_PREFETCH_AHEAD = 32


@_jit
def _ranks_of(words, mode, seed, p, out, start, end):  # noqa: ANN001, ANN202
    for i in range(start, end):
        out[i - start] = _packed_rank(_hash_one(words, i, mode, seed), p)


@_jit
def _ranks(words, mode, seed, p, out, start, end):  # noqa: ANN001, ANN202
    """`_packed_rank` of rows start..end-1 (valid or not: no branch per row) into out[0:],
    one loop per mode with the mode a constant in it, so each loop vectorises (XXH64's
    64-bit multiplies and the leading-zero count in SIMD lanes: twice the scalar hash's
    rate here, 2026-11-27)."""
    if mode == _LONG:
        _ranks_of(words, _LONG, seed, p, out, start, end)
    elif mode == _INT:
        _ranks_of(words, _INT, seed, p, out, start, end)
    elif mode == _DOUBLE:
        _ranks_of(words, _DOUBLE, seed, p, out, start, end)
    elif mode == _FLOAT:
        _ranks_of(words, _FLOAT, seed, p, out, start, end)
    elif mode == _DOUBLE_KEY:
        _ranks_of(words, _DOUBLE_KEY, seed, p, out, start, end)
    else:
        _ranks_of(words, _HASHED, seed, p, out, start, end)


@_jit
def _raise(registers, cell, packed):  # noqa: ANN001, ANN202
    """registers[cell, index] = max(itself, rank) for packed = index << 8 | rank."""
    index = packed >> np.uint32(8)
    rank = np.uint8(packed & np.uint32(0xFF))
    registers[cell, index] = max(registers[cell, index], rank)


@_jit
def _update(registers, cells, words, mode, seed, p, valid):  # noqa: ANN001, ANN202
    """registers[cells[i]] raised by row i's value, valid rows only: rows hashed a chunk at
    a time (vectorised), then the chunk's registers raised (a random access per row, which
    keeps a fused hash loop from vectorising)."""
    n = words.shape[0]
    packed = np.empty(_RANK_CHUNK, np.uint32)
    base, m = registers.ctypes.data, registers.shape[1]
    for start in range(0, n, _RANK_CHUNK):
        end = min(start + _RANK_CHUNK, n)
        _ranks(words, mode, seed, p, packed, start, end)
        for i in range(start, end):
            ahead = i + _PREFETCH_AHEAD
            if ahead < end:
                prefetch_for_writing(base + cells[ahead] * m + np.int64(packed[ahead - start] >> 8))
            if valid[i]:
                _raise(registers, cells[i], packed[i - start])


@_jit
def _table_offsets_of(
    words, mode, seed, p, panes, slots, keep, low, span, width, offsets, ranks, start, end
):  # noqa: ANN001, ANN202
    """Rows start..end-1 of a table build: each row's register as a flat offset into the
    table ((panes[i] - low) * width + slots[i]) * 2^p + index, and its rank, into
    offsets/ranks[0:]; an unkept row gets rank 0 at offset 0 (raising nothing). True where
    a kept row lies outside the table. No branch per row, so the hash, the offset and the
    bounds test vectorise together."""
    m = np.int64(1) << p
    outside = 0  # an integer: a bool accumulator kept the loop from vectorising
    for i in range(start, end):
        x = _hash_one(words, i, mode, seed)
        index = np.int64(x >> np.uint64(64 - p))
        w = (x << np.uint64(p)) | (np.uint64(1) << np.uint64(p - 1))
        kept = np.int64(keep[i])
        ranks[i - start] = np.uint8((_leading_zeros(w) + np.uint64(1)) * np.uint64(kept))
        q = panes[i] - low
        slot = slots[i]
        outside |= kept & ((q < 0) | (q >= span) | (slot < 0) | (slot >= width))
        offsets[i - start] = ((q * width + slot) * m + index) * kept
    return outside != 0


@_jit
def _update_table(registers, panes, slots, words, mode, seed, p, keep, low, span, width):  # noqa: ANN001, ANN202
    """`_update` into a table of `span` x `width` cells, row i's cell (panes[i] - low) *
    width + slots[i]; False (and stop, the table half built) at a kept row outside the
    table. A chunk of rows at a time: their register offsets and ranks in one vectorised
    pass (`_table_offsets_of`), then every row's register raised with no branch (a random
    byte each: the table's rows of one pane stay in L2, so this beat prefetching the
    chunk's registers and marking the cells written row by row, 2026-11-27)."""
    n = words.shape[0]
    offsets = np.empty(_RANK_CHUNK, np.int64)
    ranks = np.empty(_RANK_CHUNK, np.uint8)
    flat = registers.reshape(-1)
    for start in range(0, n, _RANK_CHUNK):
        end = min(start + _RANK_CHUNK, n)
        # the mode a constant in each loop (see `_ranks`); the arguments spelled out (passed
        # as a tuple, the loop did not vectorise)
        # fmt: off
        if mode == _DOUBLE:
            outside = _table_offsets_of(words, _DOUBLE, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        elif mode == _DOUBLE_KEY:
            outside = _table_offsets_of(words, _DOUBLE_KEY, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        elif mode == _LONG:
            outside = _table_offsets_of(words, _LONG, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        elif mode == _INT:
            outside = _table_offsets_of(words, _INT, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        elif mode == _FLOAT:
            outside = _table_offsets_of(words, _FLOAT, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        else:
            outside = _table_offsets_of(words, _HASHED, seed, p, panes, slots, keep,
                                        low, span, width, offsets, ranks, start, end)
        # fmt: on
        if outside:
            return False
        for i in range(end - start):
            at = offsets[i]
            flat[at] = max(flat[at], ranks[i])
    return True


@_jit
def _written(registers, seen):  # noqa: ANN001, ANN202
    """seen[c] = cell c holds a register above 0: it received a row (a kept row raises one
    of its registers to at least 1)."""
    for c in range(registers.shape[0]):
        held = np.uint8(0)
        for j in range(registers.shape[1]):
            held |= registers[c, j]
        seen[c] = held != 0


def new_registers(cells: int, p: int) -> np.ndarray:
    """Empty register sets (all 0: the estimate of an empty set is 0) for `cells` cells."""
    return np.zeros((cells, hll_registers(p)), np.uint8)


def _words_of(values: np.ndarray, argument: SqlType | None, order_keys: bool) -> tuple:
    """(words, mode) of `update`'s values (see there)."""
    if order_keys and argument is SqlType.DOUBLE:
        return np.ascontiguousarray(values, np.int64), _DOUBLE_KEY
    return _words(values, argument)


def update(
    registers: np.ndarray,
    cells: np.ndarray,
    values: np.ndarray,
    valid: np.ndarray | None,
    argument: SqlType,
    p: int,
    order_keys: bool = False,
) -> None:
    """Add a batch to the register sets in place: row i's value (skipped where not valid:
    NULL, or not contributing) goes into registers[cells[i]]. STRING values come as hashes
    (`hash_strings`) with argument=None. `order_keys`: the values are the holistic lift's
    order keys (a DOUBLE's are decoded in the hash loop; other types' keys are their
    values)."""
    words, mode = _words_of(values, argument, order_keys)
    cells, valid = batch_rows(cells, words, valid, registers.shape[0])
    if registers.ndim != 2 or registers.dtype != np.uint8 or registers.shape[1] != hll_registers(p):
        raise ValueError(
            f"registers must be uint8 [cells, 2^{p}], got {registers.dtype} {registers.shape}"
        )
    _update(registers, cells, words, mode, np.uint64(HLL_SEED), p, valid)


def build_table(
    panes: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    keep: np.ndarray,
    pane_range: tuple[int, int],
    width: int,
    argument: SqlType | None,
    p: int,
    order_keys: bool = False,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Register sets of a batch's kept rows over a table of (pane, key slot) cells, row i's
    cell (panes[i] - first pane) * width + slots[i] (no cell numbering first): (registers
    [panes x width, 2^p], which cells received a row); None where a kept row lies outside
    `pane_range` (first, last) or [0, width)."""
    low, high = pane_range
    span = high - low + 1
    registers = new_registers(span * width, p)
    words, mode = _words_of(values, argument, order_keys)
    panes = np.ascontiguousarray(panes, np.int64)
    slots = np.ascontiguousarray(slots, np.int64)
    keep = np.ascontiguousarray(keep, np.bool_)
    if not panes.shape == slots.shape == keep.shape == words.shape:
        raise ValueError("one pane, key slot and keep flag per value needed")
    seed = np.uint64(HLL_SEED)
    if not _update_table(registers, panes, slots, words, mode, seed, p, keep, low, span, width):
        return None
    seen = np.empty(span * width, np.bool_)
    _written(registers, seen)
    return registers, seen


def build(
    cells: np.ndarray,
    n_cells: int,
    values: np.ndarray,
    valid: np.ndarray | None,
    argument: SqlType | None,
    p: int,
    order_keys: bool = False,
) -> np.ndarray:
    """One register set per cell 0..n_cells-1 from one batch (see `update`)."""
    registers = new_registers(n_cells, p)
    update(registers, cells, values, valid, argument, p, order_keys)
    return registers


@_jit
def _merge_groups(registers: np.ndarray, members: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    groups = offsets.shape[0] - 1
    m = registers.shape[1]
    out = np.zeros((groups, m), np.uint8)
    for g in range(groups):
        target = out[g]
        for k in range(offsets[g], offsets[g + 1]):
            row = registers[members[k]]
            for j in range(m):  # max(), not a branch: the loop vectorises
                target[j] = max(target[j], row[j])
    return out


@_jit
def _merge_pair_groups(first, second, members, offsets):  # noqa: ANN001, ANN202
    """`_merge_groups` over two arrays taken as one (member ids past `first`'s register sets
    are `second`'s), read in place."""
    groups = offsets.shape[0] - 1
    m = first.shape[1]
    split = first.shape[0]
    out = np.zeros((groups, m), np.uint8)
    for g in range(groups):
        target = out[g]
        for k in range(offsets[g], offsets[g + 1]):
            member = members[k]
            row = first[member] if member < split else second[member - split]
            for j in range(m):  # max(), not a branch: the loop vectorises
                target[j] = max(target[j], row[j])
    return out


def merge_pair(
    first: np.ndarray, second: np.ndarray, members: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """`merge_groups` of `first` and `second` concatenated, without the concatenation (a
    pane's sets with a batch's, a block set with its next pane: each merge would copy both)."""
    if first.ndim != 2 or second.ndim != 2 or first.shape[1] != second.shape[1]:
        raise ValueError(f"register sets of one width needed, got {first.shape}, {second.shape}")
    members, offsets = groups(members, offsets, first.shape[0] + second.shape[0])
    return _merge_pair_groups(
        np.ascontiguousarray(first, np.uint8),
        np.ascontiguousarray(second, np.uint8),
        members,
        offsets,
    )


def merge_groups(registers: np.ndarray, members: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Group g = the element-wise max of registers[members[offsets[g]:offsets[g + 1]]] (a
    window from its panes' cells); an empty group is an empty set."""
    return _merge_groups(registers, *groups(members, offsets, registers.shape[0]))


@_jit
def _histograms(registers: np.ndarray, bins: int) -> np.ndarray:
    """Per register set the count of registers holding each value 0 .. bins - 1. Four
    partial histograms, one per register j % 4: most registers hold one of a few values, and
    consecutive increments of one counter wait for each other (store to load)."""
    out = np.zeros((registers.shape[0], bins), np.int64)
    partial = np.zeros((4, bins), np.int64)
    m = registers.shape[1]  # a multiple of 16
    for c in range(registers.shape[0]):
        partial[:] = 0
        for j in range(0, m, 4):
            partial[0, registers[c, j]] += 1
            partial[1, registers[c, j + 1]] += 1
            partial[2, registers[c, j + 2]] += 1
            partial[3, registers[c, j + 3]] += 1
        for b in range(bins):
            out[c, b] = partial[0, b] + partial[1, b] + partial[2, b] + partial[3, b]
    return out


@_jit
def _member(rows, k, m):  # noqa: ANN001, ANN202
    """Register set k of a group list, read in place from its address `rows[k]` (no
    reference count: the caller keeps the arrays alive; reading the sets through a typed
    list of arrays cost a third of the answer in reference counting)."""
    return numba.carray(bytes_at(rows[k]), (m,))


@_jit
def _merged_histograms(rows, offsets, chosen, m, bins):  # noqa: ANN001, ANN202
    """`_histograms` of `_merge_groups`' groups `chosen` without materialising them, as
    `hll_estimate` reads them: float64 [bins, groups] (counts, exact). Per group the max of
    its members (member k: the register set at address `rows[k]`) in one scratch row,
    counted at once; a group of one member is counted in place."""
    out = np.zeros((bins, chosen.shape[0]), np.float64)
    partial = np.zeros((4, bins), np.int64)
    scratch = np.zeros(m, np.uint8)
    for at in range(chosen.shape[0]):
        g = chosen[at]
        first, end = offsets[g], offsets[g + 1]
        if end - first == 1:
            row = _member(rows, first, m)
        else:
            scratch[:] = 0
            for k in range(first, end):
                member = _member(rows, k, m)
                for j in range(m):  # max(), not a branch: the loop vectorises
                    scratch[j] = max(scratch[j], member[j])
            row = scratch
        partial[:] = 0
        for j in range(0, m, 4):
            partial[0, row[j]] += 1
            partial[1, row[j + 1]] += 1
            partial[2, row[j + 2]] += 1
            partial[3, row[j + 3]] += 1
        for b in range(bins):
            out[b, at] = partial[0, b] + partial[1, b] + partial[2, b] + partial[3, b]
    return out


@_jit
def _merged_sums(rows, offsets, m, cap, sums, zeros, highest):  # noqa: ANN001, ANN202
    """Per group (as `_merged_histograms` reads them), of its members' register maximum
    M[j]: sums[g] = sum_j 2^(cap - min(M[j], cap)) (an integer: exact), zeros[g] = the
    registers at 0, highest[g] = max_j M[j]. A group of one or two members is read in
    place (the maximum taken register by register: a window from its two blocked sets),
    more through one scratch row. One pass over each register, no histogram: the loop
    vectorises (a scatter into histogram bins does not)."""
    groups = offsets.shape[0] - 1
    scratch = np.zeros(m, np.uint8)
    one = np.uint64(1)
    top = np.uint8(cap)
    for g in range(groups):
        first, end = offsets[g], offsets[g + 1]
        if end - first == 1:
            a = _member(rows, first, m)
            b = a
        elif end - first == 2:
            a = _member(rows, first, m)
            b = _member(rows, first + 1, m)
        else:  # none (every register 0) or three and more
            scratch[:] = 0
            for k in range(first, end):
                member = _member(rows, k, m)
                for j in range(m):
                    scratch[j] = max(scratch[j], member[j])
            a = scratch[:]
            b = a
        total = np.uint64(0)
        empty = 0
        most = np.uint8(0)
        for j in range(m):
            r = max(a[j], b[j])
            most = max(most, r)
            empty += r == 0
            total += one << np.uint64(top - min(r, top))
        sums[g] = total
        zeros[g] = empty
        highest[g] = most


def _register_sums_cap(p: int) -> int:
    """The largest register value whose 2^-M[j] terms still add exactly in float64 in any
    order: sums of m = 2^p terms 2^-k, k <= cap, are multiples of 2^-cap up to 2^p, exact
    while p + cap <= 53 (so `hll_estimate`'s k-ascending sum is the exact sum too)."""
    return 53 - p


def merged_estimates(
    sets: list[np.ndarray], members: np.ndarray, offsets: np.ndarray, p: int
) -> np.ndarray:
    """`estimate(merge_groups(concatenated sets, members, offsets), p)` without the
    concatenation, the merged registers or (mostly) their histograms: member ids number the
    sets' register sets one set after the other, as for `merge_groups`. Bit-identical to
    the histograms' estimate: a group whose registers all lie at or below
    `_register_sums_cap(p)` (a register above it needs a hash with that many leading zeros
    past its index bits: about one value in 2^cap) has its sum of 2^-M[j] taken exactly in
    integers (`_merged_sums`), which is the value `hll_estimate`'s float sum reaches; the
    others, and the groups in Ertl's band (whose estimate reads the whole histogram), are
    counted into histograms (`_merged_histograms`) and take `hll_estimate`'s path."""
    m = hll_registers(p)
    sizes = np.array([s.shape[0] for s in sets], np.int64)
    if any(s.ndim != 2 or s.shape[1] != m or s.dtype != np.uint8 for s in sets):
        raise ValueError(f"register sets must be uint8 [cells, 2^{p}]")
    members, offsets = groups(members, offsets, int(sizes.sum()))
    # the kernels read each member's registers at its address: `arrays` keeps them alive
    arrays = [np.ascontiguousarray(s) for s in sets]
    starts = np.cumsum(sizes) - sizes
    set_of = np.searchsorted(starts, members, side="right") - 1
    bases = np.array([a.ctypes.data for a in arrays], np.int64)
    rows = bases[set_of] + (members - starts[set_of]) * m
    n_groups = offsets.shape[0] - 1
    cap = _register_sums_cap(p)
    sums = np.empty(n_groups, np.uint64)
    zeros = np.empty(n_groups, np.int64)
    highest = np.empty(n_groups, np.uint8)
    _merged_sums(rows, offsets, m, cap, sums, zeros, highest)
    z_inverse = sums.astype(np.float64) * 2.0**-cap  # exact: sums <= 2^53
    bins = hll_bins(p)

    def histograms_of(chosen: np.ndarray) -> np.ndarray:
        """The histograms (float64 [bins, groups]) of groups `chosen` only."""
        return _merged_histograms(rows, offsets, chosen, m, bins)

    inexact = np.flatnonzero(highest > cap)
    if len(inexact):  # registers past the cap: hll_estimate's own float sum, from histograms
        counts = histograms_of(inexact)
        held = np.zeros(len(inexact))
        for k in range(bins):
            held += counts[k] * 2.0**-k  # as hll_estimate adds (zero terms change nothing)
        z_inverse[inexact] = held
    estimates = hll_estimate_of_sums(
        z_inverse,
        zeros,
        p,
        lambda band: histograms_of(np.flatnonzero(band)),
        highest <= cap,  # exact sums: the band needs no histograms
    )
    del arrays  # alive until here: the kernels read through addresses
    return estimates


def histograms(registers: np.ndarray, p: int) -> np.ndarray:
    """The register histograms (int64 [cells, hll_bins(p)]) `hll_estimate` reads."""
    registers = np.atleast_2d(registers)
    m = hll_registers(p)
    if registers.shape[1] != m:
        raise ValueError(f"registers have {registers.shape[1]} columns, p = {p} needs {m}")
    return _histograms(np.ascontiguousarray(registers, np.uint8), hll_bins(p))


def estimate(registers: np.ndarray, p: int) -> np.ndarray:
    """APPROX_COUNT_DISTINCT of each register set (int64): Spark's estimate, except in the
    band where Spark subtracts its empirical bias (see aggregates.sketches). The histograms
    are `merged_estimates`' (each set a group of its own): the same estimate as
    `aggregates.sketches.hll_estimate` of their histograms (the GPU's), bit for bit."""
    registers = np.atleast_2d(registers)
    cells = registers.shape[0]
    if registers.shape[1] != hll_registers(p):
        raise ValueError(
            f"registers have {registers.shape[1]} columns, p = {p} needs {hll_registers(p)}"
        )
    return merged_estimates(
        [np.ascontiguousarray(registers, np.uint8)],
        np.arange(cells, dtype=np.int64),
        np.arange(cells + 1, dtype=np.int64),
        p,
    )


def to_bytes(registers: np.ndarray, p: int) -> bytes:
    """Snapshot of register sets (`aggregates.sketches.hll_to_bytes`)."""
    return hll_to_bytes(registers, p)


def from_bytes(blob: bytes) -> tuple[np.ndarray, int]:
    return hll_from_bytes(blob)
