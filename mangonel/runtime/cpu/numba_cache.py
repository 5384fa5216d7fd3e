"""numba's on-disk cache (`cache=True`), made safe for processes compiling side by side.

numba keeps a function's compiled overloads in one index file (`<function>.nbi`, key ->
data file) and numbers the data files (`<function>.1.nbc`, `.2.nbc`, ...) by what the
index held when the process read it. Two processes that compile new overloads of one
function at once both read the same index, take the same number and write different code
under the same name; the index one of them writes can then name the file the other wrote,
and a later process loads machine code compiled for other argument types: a segmentation
fault (seen on the GPU machine, 2026-11-27, docs/performance/gpu.md). That is the situation of
Spark's Python workers (several per host, one cache directory: the package's
`__pycache__` or `NUMBA_CACHE_DIR`) and of test processes running in parallel.

`install` (run when `mangonel.runtime.cpu` is imported, which every session does:
`mangonel.session` and the Spark session import its `python_window`; so GPU queries, whose
host loops are numba's too, run with it) replaces the index's `save` with one that names
each new data file uniquely (a random suffix, as numba already does for its temporary
files) and writes the data before the index: an index entry can then only name a file
holding its own key's code. Two processes adding overloads at once can still each write an
index without the other's entry; that entry is compiled again by a later process (a lost
cache hit, never a wrong one) and its file stays unused. Unused files are removed when an
index starts over (new, or stale: the source changed, where numba's numbering would have
overwritten them), if older than `UNUSED_AFTER_SECONDS`: a younger one may be another
process's write whose index entry is still to come (removing it would only cost a
compile: a load that finds no file compiles again).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from numba.core import caching

# numba's own `save`, kept on the class when `install` replaces it (its presence says so)
NUMBA_SAVE = getattr(caching.IndexDataCacheFile, "_numba_save", caching.IndexDataCacheFile.save)
UNUSED_AFTER_SECONDS = 600.0


def _save(self: caching.IndexDataCacheFile, key: Any, data: Any) -> None:  # noqa: ANN401
    overloads = self._load_index()
    data_name = overloads.get(key)
    if data_name is None:
        base = self._index_name[: -len(".nbi")]
        if not overloads:
            _remove_unused(self._cache_path, base)
        data_name = f"{base}.{uuid.uuid4().hex[:16]}.nbc"
        self._save_data(data_name, data)  # before the index names it
        overloads[key] = data_name
        self._save_index(overloads)
        return
    # the key is there already (another process compiled it too): its file is rewritten
    # with code for the same key, atomically (`_open_for_write` replaces the file)
    self._save_data(data_name, data)


def _remove_unused(directory: str, base: str) -> None:
    """Remove the function's data files older than `UNUSED_AFTER_SECONDS` (its index is
    new or stale, so it names none of them)."""
    cutoff = time.time() - UNUSED_AFTER_SECONDS
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        suffix = name[len(base) + 1 : -len(".nbc")]
        if not (name.startswith(base + ".") and name.endswith(".nbc") and suffix.isalnum()):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.getmtime(path) < cutoff:
                os.remove(path)
        except OSError:  # removed by another process meanwhile
            continue


def install() -> None:
    """Unique data file names for every cache index of this process (idempotent)."""
    if hasattr(caching.IndexDataCacheFile, "_numba_save"):
        return
    caching.IndexDataCacheFile._numba_save = NUMBA_SAVE
    caching.IndexDataCacheFile.save = _save


install()
