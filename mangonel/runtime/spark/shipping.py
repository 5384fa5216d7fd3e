"""Plans shipped to Spark's Python workers once per process, not once per task.

Spark deserializes a callback's closure anew for every task (each micro-batch). A plan that
carries a Python window function then holds a new function object each time, and both numba
(which compiles the evaluation loop per function object) and the per-process caches of
`functions.py` (keyed by the plan, whose function compares by identity) would start over
every micro-batch. `shipped` puts such a plan in the closure as its pickled bytes and
deserializes it once per worker process (keyed by their digest): reused workers (Spark's
default) keep one plan object, its compiled functions and its cached operators for all the
query's tasks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from pyspark import cloudpickle

from mangonel.compiler import physical as ph
from mangonel.compiler.physical import NodeT

_PLANS: dict[str, ph.PhysicalNode] = {}
MAX_PLANS = 16  # per worker: the oldest is forgotten first (it is only a cache)


def has_python_function(node: ph.PhysicalNode) -> bool:
    """Whether a window under `node` calls a Python window function."""
    return any(
        a.python is not None
        for found in ph.walk(node)
        if isinstance(found, ph.WindowAggregateExec)
        for a in found.aggregates
    )


def shipped(node: NodeT) -> Callable[[], NodeT]:
    """`node` as bytes in the callback's closure, deserialized once per worker process (the
    node itself where it calls no Python function: nothing is compiled per object)."""
    if not has_python_function(node):
        return lambda: node
    payload = cloudpickle.dumps(node)
    digest = hashlib.sha256(payload).hexdigest()

    def load() -> NodeT:
        cached = _PLANS.get(digest)
        if cached is None:
            if len(_PLANS) >= MAX_PLANS:
                del _PLANS[next(iter(_PLANS))]
            cached = _PLANS[digest] = cloudpickle.loads(payload)
        return cached  # type: ignore[return-value]

    return load
