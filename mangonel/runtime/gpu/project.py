"""The GPU evaluator of Filter and Project: one generated CUDA kernel per bound expression list.

Binding renders the kernel (`compiler.codegen_project`) and compiles it once
(`compile.CompileContext.module`, without fused multiply-adds: `codegen.COMPILE_OPTIONS`). A batch
then costs: the inputs the expressions read (numbers, timestamps, booleans; never a bare
reference) through the pinned stager, one launch, and one device-to-host copy of every
output's values and validity and the predicate's mask, packed in one buffer. A bare reference
(a key column of any type, a window bound, an aggregate) is the batch's own column, as on the
CPU. Expressions the kernel cannot evaluate (`gpu_unsupported_reason`, STRING comparisons)
are refused at binding: the planner places such steps on the CPU, nothing falls back here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler.codegen_project import (
    GeneratedProject,
    gpu_unsupported_reason,
    is_bare_reference,
    references,
    render_project_kernels,
)
from mangonel.errors import PlanError
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.compile import shared_context
from mangonel.runtime.gpu.staging import Stager
from mangonel.runtime.host.arrays import to_mask
from mangonel.runtime.host.keys import StringDictionary
from mangonel.runtime.operators.project import WindowResultLayout

_THREADS = 256  # one row per thread, grid-stride: an elementwise kernel, as the lift is
_ALIGN = 8  # bytes: every segment of the output buffer starts 8-byte aligned


def _arrow_array(values: np.ndarray, valid: np.ndarray, sql_type: SqlType) -> pa.Array:
    """An Arrow array of the SQL type's Arrow type from device-layout values and validity
    bytes, built from buffers (no per-element conversion; BOOLEAN bits are packed)."""
    rows = len(values)
    nulls = rows - int(np.count_nonzero(valid))
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if sql_type is SqlType.BOOLEAN:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(sql_type.info.arrow, rows, [bitmap, data], null_count=nulls)


class _ProjectKernel:
    """One compiled project kernel and how to feed it from a window-result batch."""

    def __init__(
        self,
        expressions: Sequence[exp.Expression],
        predicate: exp.Expression | None,
        layout: WindowResultLayout,
        stager: Callable[[], Stager],
    ) -> None:
        env = layout.env
        checked = [*expressions, *([] if predicate is None else [predicate])]
        reason = gpu_unsupported_reason(checked, env)
        if reason is not None:
            raise PlanError(f"the GPU cannot evaluate this step: {reason}")
        self.generated: GeneratedProject = render_project_kernels(expressions, env, predicate)
        module = shared_context().module(self.generated)
        self._kernel = module.get_function(self.generated.names["project"])
        self._positions = [layout.position(i.reference) for i in self.generated.inputs]
        self._stager = stager()

    def _segments(self, rows: int) -> tuple[list[tuple[int, np.dtype, int]], int]:
        """(offset, dtype, rows) of each output's values and validity, then of the mask, in
        one byte buffer; and its size."""
        segments, offset = [], 0
        for output in self.generated.outputs:
            for dtype in (np.dtype(output.numpy), np.dtype(np.uint8)):
                segments.append((offset, dtype, rows))
                offset += device.round_up(rows * dtype.itemsize, _ALIGN)
        if self.generated.has_mask:
            segments.append((offset, np.dtype(np.uint8), rows))
            offset += device.round_up(rows, _ALIGN)
        return segments, offset

    def run(self, batch: pa.RecordBatch) -> tuple[list[pa.Array], np.ndarray | None]:
        """(each output as an Arrow array of its type, the predicate's mask or None)."""
        cp = device.cupy()
        rows = batch.num_rows
        segments, nbytes = self._segments(rows)
        if rows:
            inputs = self._stager.stage(
                [batch.column(p) for p in self._positions], self.generated.inputs
            )
            buffer = cp.empty(max(nbytes, 1), cp.uint8)
            views = [buffer[o : o + n * d.itemsize].view(d) for o, d, n in segments]
            blocks = device.grid(rows, _THREADS)
            self._kernel((blocks,), (_THREADS,), (*inputs, *views, np.int64(rows)))
            host = buffer.get()  # one copy, after the launch on the same stream
        else:
            host = np.zeros(max(nbytes, 1), np.uint8)
        arrays = [host[o : o + n * d.itemsize].view(d) for o, d, n in segments]
        outputs = [
            _arrow_array(arrays[2 * j], arrays[2 * j + 1], output.type)
            for j, output in enumerate(self.generated.outputs)
        ]
        mask = arrays[-1].view(np.bool_) if self.generated.has_mask else None
        return outputs, mask


class GpuOutputs:
    """Outputs on the GPU: computed ones from the kernel, bare references from the batch."""

    def __init__(
        self,
        expressions: Sequence[exp.Expression],
        layout: WindowResultLayout,
        stager: Callable[[], Stager],
    ) -> None:
        self._bare: dict[int, int] = {}  # output number -> batch column
        computed: list[exp.Expression] = []
        self._computed: dict[int, int] = {}  # output number -> kernel output
        for number, expression in enumerate(expressions):
            if is_bare_reference(expression):
                self._bare[number] = layout.position(references([expression])[0])
            else:
                self._computed[number] = len(computed)
                computed.append(expression)
        self._count = len(expressions)
        self._kernel = _ProjectKernel(computed, None, layout, stager) if computed else None

    def evaluate(self, batch: pa.RecordBatch) -> list[pa.Array]:
        computed = self._kernel.run(batch)[0] if self._kernel is not None else []
        return [
            batch.column(self._bare[n]) if n in self._bare else computed[self._computed[n]]
            for n in range(self._count)
        ]


class GpuPredicate:
    """A predicate on the GPU: the kernel's mask; a bare BOOLEAN reference read on the host."""

    def __init__(
        self,
        predicate: exp.Expression,
        layout: WindowResultLayout,
        stager: Callable[[], Stager],
    ) -> None:
        self._bare: int | None = None
        self._kernel = None
        if is_bare_reference(predicate):
            self._bare = layout.position(references([predicate])[0])
        else:
            self._kernel = _ProjectKernel((), predicate, layout, stager)

    def select(self, batch: pa.RecordBatch) -> np.ndarray:
        if self._kernel is None:
            return to_mask(batch.column(self._bare))
        return self._kernel.run(batch)[1]


class GpuProjectEvaluator:
    """`runtime.operators.project.ProjectEvaluator` on the GPU: the bound kernels of one
    evaluator share one pinned stager (its copy stream and double buffers), made when the
    first kernel is (outputs that are all bare references need neither)."""

    backend = "gpu"

    def __init__(self) -> None:
        self._stager: Stager | None = None

    def _staging(self) -> Stager:
        if self._stager is None:
            self._stager = Stager(StringDictionary())  # no STRING input reaches the kernel
        return self._stager

    def bind_outputs(
        self, expressions: Sequence[exp.Expression], layout: WindowResultLayout
    ) -> GpuOutputs:
        return GpuOutputs(expressions, layout, self._staging)

    def bind_predicate(self, predicate: exp.Expression, layout: WindowResultLayout) -> GpuPredicate:
        return GpuPredicate(predicate, layout, self._staging)
