"""numba intrinsics the CPU kernels share: typed pointers at integer addresses (arrays read in
place from a table of addresses, without a typed list's reference counting) and LLVM's
prefetch hint."""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic


def _pointer_at(item: Any, bits: int) -> Any:  # noqa: ANN401 - a numba type and intrinsic
    """An intrinsic: the pointer to `item`s (`bits` wide) at an int64 address; the caller
    keeps the memory alive while the kernel reads it."""

    @intrinsic
    def pointer_at(typingctx, address):  # noqa: ANN001, ANN202
        if address != types.int64:
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            return builder.inttoptr(args[0], ir.PointerType(ir.IntType(bits)))

        return types.CPointer(item)(types.int64), codegen

    return pointer_at


def _prefetch(write: int) -> Any:  # noqa: ANN401 - a numba intrinsic
    """An intrinsic: LLVM's prefetch of the line at an int64 address, for reading (0) or
    writing (1), kept in every cache level; a hint that never faults, so an address past an
    array is harmless."""

    @intrinsic
    def prefetch(typingctx, address):  # noqa: ANN001, ANN202
        if address != types.int64:
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            bytes_pointer = ir.PointerType(ir.IntType(8))
            word = ir.IntType(32)
            function = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(ir.VoidType(), [bytes_pointer, word, word, word]),
                "llvm.prefetch.p0i8",
            )
            pointer = builder.inttoptr(args[0], bytes_pointer)
            flags = [ir.Constant(word, write), ir.Constant(word, 3), ir.Constant(word, 1)]
            builder.call(function, [pointer, *flags])
            return context.get_dummy_value()

        return types.void(types.int64), codegen

    return prefetch


int64_at = _pointer_at(types.int64, 64)
bytes_at = _pointer_at(types.uint8, 8)
prefetch_for_reading = _prefetch(0)
prefetch_for_writing = _prefetch(1)

__all__ = ["bytes_at", "int64_at", "prefetch_for_reading", "prefetch_for_writing"]
