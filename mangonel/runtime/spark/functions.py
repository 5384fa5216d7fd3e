"""What Spark's Python workers run for mangonel's two stages, free of pyspark: the GPU
machine (no Java, no Spark) runs and tests these directly, with Arrow batches shaped as Spark
passes them. `stage1.py` and `stage2.py` wrap them in Spark's callbacks.

- `stage1_preaggregate`: stage 1 (`mapInArrow`, one call per partition and micro-batch): the
  window operator's stateless `preaggregate` of the partition's rows.
- `bucket_tree`: stage 2 (`applyInPandasWithState`, one call per key bucket and
  micro-batch): the query's operator tree, which the caller restores from the bucket's state,
  feeds and snapshots.

Decided once per executor process, not per call:
- the backend (`executor_backend`): a GPU plan runs on the GPU where this process sees one,
  and otherwise as the same plan replanned for the CPU, with the reason in its placements
  (EXPLAIN's Spark stages say `per executor`). Executors of one cluster may differ; window
  snapshots hold host arrays, so a bucket's state moves between GPU and CPU executors.
- the kernels: one kernels object per backend per process (compiled modules, pinned staging
  buffers, device scratch, the string dictionary), shared by every operator built here, so no
  call builds kernels, compiles or allocates pinned memory again.
- stage 1's operator: stateless between calls, so one per (window node, placements) and thread.
Stage 2's operator objects are built per call over the shared kernels (host objects; its
state comes from the snapshot) because each bucket's state is its own.
The caches key on the plan; a plan that calls a Python window function would compare unequal
after every task's unpickling (its function compares by identity), so the Spark callbacks
hand such a plan in as one object per process (`shipping.shipped`).
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.runtime.gpu.probe import gpu_status
from mangonel.runtime.operators.kernels import WindowKernels
from mangonel.runtime.operators.tree import OperatorTree

# one kernels object per backend for every operator this process builds (see the docstring)
_KERNELS: dict[str, WindowKernels] = {}
# per thread: the driver-side reader pre-aggregates a micro-batch's parts on several threads
# (reader_ahead.py), and an operator's caches are not shared between threads
_STAGE1 = threading.local()
_EXECUTOR_PLANS: dict[Any, Any] = {}


def executor_backend(backend: str) -> tuple[str, str]:
    """(backend, reason) this executor process runs a `backend` plan's steps on: a GPU plan
    runs on the CPU where no GPU can be used here."""
    if backend != "gpu":
        return backend, "the plan's backend"
    available, why = gpu_status()
    if available:
        return "gpu", f"this executor has a GPU ({why})"
    return "cpu", f"this executor has no GPU ({why}), so it runs the CPU plan"


def executor_plan(root: ph.NodeT) -> ph.NodeT:
    """`root` as this executor runs it: itself, or replanned for the CPU (`executor_backend`)."""
    found = _EXECUTOR_PLANS.get(root)
    if found is None:
        planned = ph.plan_backend(root)
        backend, reason = executor_backend(planned)
        found = root if backend == planned else ph.with_backend(root, backend, reason)
        _EXECUTOR_PLANS[root] = found
    return found


def stage1_preaggregate(
    window: ph.WindowAggregateExec,
    placements: tuple[ph.Placement, ...],
    table: pa.Table | pa.RecordBatch,
) -> pa.RecordBatch:
    """One partition's (key, pane) partials (`partial_schema`), by this executor's backend.
    `placements` are the Spark planner's stage-1 placements of the plan's backend; a CPU
    executor of a GPU plan runs every step on the CPU, so they do not apply there."""
    return stage1_leaf(window, placements).preaggregate(table)


def stage1_leaf(window: ph.WindowAggregateExec, placements: tuple[ph.Placement, ...]) -> Any:  # noqa: ANN401
    """Stage 1's window operator of this process and thread (made once: it is stateless
    between calls)."""
    leaves = getattr(_STAGE1, "leaves", None)
    if leaves is None:
        leaves = _STAGE1.leaves = {}
    leaf = leaves.get((window, placements))
    if leaf is None:
        node = executor_plan(window)
        extra = placements if node is window else ()
        leaf = OperatorTree(node, extra_placements=extra, kernels=_KERNELS).leaf()
        leaves[(window, placements)] = leaf
    return leaf


def bucket_tree(plan: ph.ProjectExec) -> OperatorTree:
    """A new operator tree of `plan` for one stage-2 call, on this executor's backend, over
    the process's shared kernels."""
    return OperatorTree(executor_plan(plan), kernels=_KERNELS)


def process_kernels() -> dict[str, WindowKernels]:
    """The kernels objects this process made so far, by backend (tests read it)."""
    return dict(_KERNELS)
