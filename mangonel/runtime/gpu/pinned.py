"""Pinned host buffers shared by every stager and output path of the process.

cudaHostAlloc is slow (about 10 ms for a 16 MB buffer on the H100 host, measured 2026-11-26),
and each run of a query makes new operators: with buffers owned by an operator, every
`Query.run()` paid ~50 ms of allocation before its first copy, and two runs alive at once
(the last runner is still referenced while the next is built) never shared them. Here a
buffer is borrowed for one use and handed back with the event of the last copy that reads
or writes it; the next borrower waits for that event only if it takes the same buffer
before the copy is done. CuPy's own pinned pool would reuse a freed block, but only once
the garbage collector frees its owner.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from mangonel.runtime.gpu import device

_ALIGN = 64  # bytes: each array's place in a buffer that several share starts aligned

MIN_BYTES = 1 << 20
KEEP = 8  # free buffers kept; beyond that the smallest go back to CuPy
# a borrower waits on a busy buffer only when this many of the size are already busy: chunk
# c + 1 fills one while chunk c's copy reads another (the stager's ring of three)
RING = 3


@dataclass
class PinnedBuffer:
    """A page-locked host buffer (`memory`, CuPy's) and its bytes as a uint8 array."""

    memory: Any
    view: np.ndarray
    owner: Any  # the CuPy module that allocated it (tests swap in host stand-ins)
    event: Any = None  # the last copy that used it, or None when nothing is in flight

    @property
    def nbytes(self) -> int:
        return self.view.size

    def wait(self) -> None:
        """Block until the last copy that used the buffer is done."""
        if self.event is not None:
            self.event.synchronize()
            self.event = None


# reentrant: a block lent to Arrow results comes back from its lease's __del__, which the
# garbage collector may run in this thread while the lock is held
_LOCK = threading.RLock()
_FREE: list[PinnedBuffer] = []


def _remove(buffer: PinnedBuffer) -> None:
    """Take `buffer` off the free list, found by identity (a dataclass compares its fields:
    two buffers' arrays); gone already (a reentrant give_back trimmed it): nothing."""
    for i, free in enumerate(_FREE):
        if free is buffer:
            del _FREE[i]
            return


def borrow(nbytes: int) -> PinnedBuffer:
    """A pinned buffer of at least `nbytes`, idle (its last copy done): the smallest free one
    that is large enough and whose copy has finished; else, when RING such buffers are
    still busy, the one of them handed back first (waiting for its copy); else a new one of
    at least MIN_BYTES."""
    cp = device.cupy()
    with _LOCK:
        fitting = [b for b in _FREE if b.nbytes >= nbytes and b.owner is cp]
        done = [b for b in fitting if b.event is None or b.event.done]
        chosen = None
        if done:
            chosen = min(done, key=lambda b: b.nbytes)
        elif len(fitting) >= RING:
            chosen = fitting[0]  # handed back first: its copy was queued first
        if chosen is not None:
            _remove(chosen)
    if chosen is None:
        size = max(nbytes, MIN_BYTES)
        memory = cp.cuda.alloc_pinned_memory(size)
        chosen = PinnedBuffer(memory, np.frombuffer(memory, np.uint8, size), cp)
    chosen.wait()
    return chosen


def give_back(buffer: PinnedBuffer, event: Any = None) -> None:
    """Return a buffer; `event`: the copy stream's event after its last queued copy (None:
    nothing in flight). The smallest free buffers beyond KEEP are released."""
    buffer.event = event
    released = []
    with _LOCK:
        _FREE.append(buffer)
        if len(_FREE) > KEEP:
            by_size = sorted(_FREE, key=lambda b: b.nbytes, reverse=True)
            released = by_size[KEEP:]
            for extra in released:
                _remove(extra)
    for extra in released:  # CuPy may reuse the memory at once: its copies must be done
        extra.wait()


def download(arrays: list[Any]) -> list[np.ndarray]:  # noqa: ANN401
    """Device arrays on the host, each a new numpy array: copied into one borrowed buffer
    (pinned: the copies run at the full device-to-host rate, and no pinned allocation per
    call), then out of it, and the buffer handed back (the copies are synchronous: nothing
    is in flight)."""
    cp = device.cupy()
    contiguous = [cp.ascontiguousarray(a) for a in arrays]
    sizes = [int(a.nbytes) for a in contiguous]
    starts = np.cumsum([0] + [device.round_up(size, _ALIGN) for size in sizes])
    buffer = borrow(int(starts[-1]))
    try:
        out = []
        for array, start, size in zip(contiguous, starts[:-1], sizes, strict=True):
            host = buffer.view[start : start + size].view(array.dtype).reshape(array.shape)
            array.get(out=host)
            out.append(host.copy())
    finally:
        give_back(buffer)
    return out


def download_one(array: Any) -> np.ndarray:  # noqa: ANN401
    """One device array on the host (`download`)."""
    return download([array])[0]


def free_count() -> int:
    """Free buffers held (for tests)."""
    with _LOCK:
        return len(_FREE)


__all__ = ["PinnedBuffer", "borrow", "download", "free_count", "give_back"]
