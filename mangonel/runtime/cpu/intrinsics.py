"""numba intrinsics the CPU kernels share: typed pointers at integer addresses (arrays read in
place from a table of addresses, without a typed list's reference counting), LLVM's
prefetch hint, and streaming (non-temporal) stores with the fence that orders them."""

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


@intrinsic
def store_streaming(typingctx, array, index, value):  # noqa: ANN001, ANN201
    """array[index] = value as a non-temporal store (LLVM's `!nontemporal`: x86 MOVNTI, a
    float stored as its bits): the line goes to memory without being read into the caches first nor
    evicting what they hold. For result columns written once and not read back soon; no
    wraparound of a negative index. The kernel ends with `streaming_fence()`: streaming
    stores are weakly ordered."""
    if not isinstance(array, types.Array) or array.ndim != 1 or array.layout not in "CA":
        return None
    if not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        array_type, _, value_type = signature.args
        made = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(
            context, builder, array_type, made, [args[1]], wraparound=False
        )
        value = context.cast(builder, args[2], value_type, array_type.dtype)
        if isinstance(array_type.dtype, types.Float):
            # its bits as an integer of its width: x86 has a streaming store of a general
            # register (MOVNTI) on every CPU, of an XMM scalar (MOVNTSD) on AMD's only, and
            # LLVM stores a float normally where that is missing (Intel hosts)
            bits = ir.IntType(array_type.dtype.bitwidth)
            value = builder.bitcast(value, bits)
            pointer = builder.bitcast(pointer, bits.as_pointer())
        stored = builder.store(value, pointer)
        stored.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def streaming_fence(typingctx):  # noqa: ANN001, ANN201
    """A sequentially consistent fence (x86: MFENCE): the streaming stores before it are
    visible to every later load and store, of any thread, once it returns."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


int64_at = _pointer_at(types.int64, 64)
bytes_at = _pointer_at(types.uint8, 8)
prefetch_for_reading = _prefetch(0)
prefetch_for_writing = _prefetch(1)

__all__ = [
    "bytes_at",
    "int64_at",
    "prefetch_for_reading",
    "prefetch_for_writing",
    "store_streaming",
    "streaming_fence",
]
