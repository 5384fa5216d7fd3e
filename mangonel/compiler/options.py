"""Tuning options of the GPU backend, as data the planner and EXPLAIN can print.

They live in the compiler (not in runtime/gpu) so that printing a plan's options imports no
runtime module; `runtime.gpu.kernels.GpuKernels(options=...)` reads them. The defaults are the
values the benchmarks in docs/performance.md were measured with; no option changes a result
beyond the last bits of floating-point sums (the order in which atomics combine).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

BLOCK_TABLE_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class GpuOptions:
    """Launch geometry, chunking and caches of the GPU kernels.

    threads: threads per block of every row-parallel launch (lift, merge, fused, keys,
        window compute); at most 1024 (the fused kernel keeps one status row per warp).
    chunk_rows: rows per fused launch; the copy of chunk c + 1 overlaps the launch of chunk c
        (2^18 rows: 6 MiB of (ts, key, value) per copy chunk).
    tree_span: tree levels built per launch: a block builds one subtree of 2^(span-1) nodes of
        its lowest level, halving per level (13 levels of a 10,000-pane window: two launches).
    tree_threads: threads per block of the tree launch (2^(span-1) by default: one per node
        of the subtree's lowest level; fewer loop over the nodes).
    block_table: whether the fused pass first combines rows per block in a shared-memory
        table: "on", "off", or "auto" = on when the previous fused pass of the same kernels
        merged into at most `block_table_load` x the table's buckets (key, pane) cells. "auto"
        is the one choice that depends on the batch before; "on"/"off" make every batch's
        kernel a function of that batch alone. The merge kernel of the split path (first
        batches, new keys) uses the table only when "on".
    block_table_load: the share of the block table's buckets "auto" allows.
    module_cache_size: compiled modules a `CompileContext` keeps (least recently used go).
    """

    threads: int = 256
    chunk_rows: int = 1 << 18
    tree_span: int = 8
    tree_threads: int = 1 << 7
    block_table: str = "auto"
    block_table_load: float = 0.5
    module_cache_size: int = 64

    def __post_init__(self) -> None:
        if not 32 <= self.threads <= 1024 or self.threads % 32:
            raise ValueError(f"threads must be a multiple of 32 in [32, 1024], not {self.threads}")
        if self.chunk_rows < 1:
            raise ValueError(f"chunk_rows must be positive, not {self.chunk_rows}")
        if not 1 <= self.tree_span <= 30:
            raise ValueError(f"tree_span must be in [1, 30], not {self.tree_span}")
        if not 1 <= self.tree_threads <= 1024:
            raise ValueError(f"tree_threads must be in [1, 1024], not {self.tree_threads}")
        if self.block_table not in BLOCK_TABLE_MODES:
            raise ValueError(
                f"block_table must be one of {', '.join(BLOCK_TABLE_MODES)}, "
                f"not {self.block_table!r}"
            )
        if self.module_cache_size < 1:
            raise ValueError(f"module_cache_size must be positive, not {self.module_cache_size}")

    @classmethod
    def with_tree_span(cls, span: int, **others: object) -> GpuOptions:
        """Options whose tree launch builds `span` levels with one thread per lowest node."""
        return cls(tree_span=span, tree_threads=1 << (span - 1), **others)  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line for EXPLAIN: 'threads=256 chunk_rows=262144 tree_span=8 ...'."""
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


__all__ = ["BLOCK_TABLE_MODES", "GpuOptions"]
