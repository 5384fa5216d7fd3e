"""numba's on-disk cache under processes that compile side by side
(`mangonel.runtime.cpu.numba_cache`): two writers that both read the index before either
wrote, one of them writing in between the other's two writes (index, data). numba's own
`save` can then leave the index naming a file that holds the other key's code (the crash
the GPU machine saw); the replacement never does: a key loads its own code, or nothing
(compiled again)."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from numba.core import caching

from mangonel.runtime.cpu import numba_cache


def _writers(tmp_path) -> tuple[caching.IndexDataCacheFile, caching.IndexDataCacheFile]:
    """Two handles on one function's cache, as two processes hold them."""
    return tuple(
        caching.IndexDataCacheFile(str(tmp_path), "kernel-10.py312", ("stamp", 1)) for _ in range(2)
    )


def _race(tmp_path, save, interrupted_write: int) -> dict[str, object]:
    """Writer A saves key "a" while writer B, which read the index when A did (empty),
    saves key "b" between A's file writes (before A's `interrupted_write`-th write);
    returns what a later process loads for each key."""
    first, second = _writers(tmp_path)
    writes = itertools.count()
    for handle in (first, second):
        handle._load_index = dict  # both read it empty

    def interrupting(write):
        def wrapped(*arguments):
            if next(writes) == interrupted_write:
                save(second, ("b",), "code for b")
            return write(*arguments)

        return wrapped

    first._save_index = interrupting(first._save_index)
    first._save_data = interrupting(first._save_data)
    save(first, ("a",), "code for a")
    later = caching.IndexDataCacheFile(str(tmp_path), "kernel-10.py312", ("stamp", 1))
    return {key: later.load((key,)) for key in ("a", "b")}


@pytest.mark.parametrize("interrupted_write", [0, 1])
def test_a_key_loads_its_own_code_or_nothing_whatever_the_interleaving(tmp_path, interrupted_write):
    loaded = _race(tmp_path, numba_cache._save, interrupted_write)
    assert loaded["a"] in ("code for a", None) and loaded["b"] in ("code for b", None)
    assert loaded["a"] == "code for a" or loaded["b"] == "code for b"  # the last index


def test_numbas_own_save_can_hand_one_key_the_others_code(tmp_path):
    """What the replacement closes (so the test above can fail): numba's `save` numbers
    both files 1; B's index then names the file A wrote last."""
    loaded = _race(tmp_path, numba_cache.NUMBA_SAVE, interrupted_write=1)
    assert loaded["b"] == "code for a"


def test_a_session_installs_it():
    import mangonel.session  # noqa: F401  (imports runtime.cpu: GPU queries have it too)

    numba_cache.install()  # idempotent
    assert caching.IndexDataCacheFile.save is numba_cache._save


def test_an_index_that_starts_over_removes_its_old_unused_files(tmp_path):
    """numba's numbering overwrote a stale index's files; unique names would pile up: a
    new or stale index removes the function's files older than `UNUSED_AFTER_SECONDS`, and
    keeps younger ones (another process may be about to name them) and other functions'."""
    old = caching.IndexDataCacheFile(str(tmp_path), "kernel-10.py312", ("stamp", 1))
    numba_cache._save(old, ("a",), "code for a")
    (unused,) = {p.name for p in tmp_path.glob("kernel-10.py312.*.nbc")}
    young = tmp_path / "kernel-10.py312.0123456789abcdef.nbc"
    young.write_bytes(b"")
    other = tmp_path / "kernel-20.py312.fedcba9876543210.nbc"
    other.write_bytes(b"")
    long_ago = time.time() - 2 * numba_cache.UNUSED_AFTER_SECONDS
    for path in (tmp_path / unused, other):
        os.utime(path, (long_ago, long_ago))
    edited = caching.IndexDataCacheFile(str(tmp_path), "kernel-10.py312", ("stamp", 2))
    numba_cache._save(edited, ("a",), "new code for a")
    names = {p.name for p in tmp_path.glob("*.nbc")}
    assert unused not in names and {young.name, other.name} <= names
    assert edited.load(("a",)) == "new code for a"
