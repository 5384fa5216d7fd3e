"""Tuning options of the GPU backend and of the online auto-tuner, as data the planner and
EXPLAIN can print.

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
        window compute); at most 512 (the combine kernels need ~80 registers a thread).
    chunk_rows: rows per staged chunk and per fused launch: the host threads copy chunk
        c + 1 into pinned memory while chunk c crosses PCIe and merges (2^20 rows: 16 MiB of
        (ts, key, value) at 16 B/tuple; a batch of any size is cut into chunks of at most
        this many rows, of equal size).
    staging_threads: host threads that copy (and narrow) a chunk's columns into pinned
        memory; 0: one per core, at most 16.
    copy_worker: the copy pass of the next batch (the standalone runner's lookahead) runs in
        the process's copy worker thread, beside the driver's Python on the batch before
        (the GIL released for the whole pass); False: in the caller's thread, during the
        batch before's fused pass. Where numba's threading layer takes parallel loops from
        one thread only (`workqueue`), it runs in the caller's thread either way.
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
    chunk_rows: int = 1 << 20
    staging_threads: int = 0
    copy_worker: bool = True
    tree_span: int = 8
    tree_threads: int = 1 << 7
    block_table: str = "auto"
    block_table_load: float = 0.5
    module_cache_size: int = 64

    def __post_init__(self) -> None:
        # 512 at most: the fused and merge kernels' warp/block combine needs ~80 registers a
        # thread, so 1024 threads ask more than an SM's 64 K registers (the launch fails with
        # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on an H100)
        if not 32 <= self.threads <= 512 or self.threads % 32:
            raise ValueError(f"threads must be a multiple of 32 in [32, 512], not {self.threads}")
        if self.chunk_rows < 1:
            raise ValueError(f"chunk_rows must be positive, not {self.chunk_rows}")
        if not 0 <= self.staging_threads <= 256:
            raise ValueError(
                f"staging_threads must be in [0, 256] (0: one per core), not {self.staging_threads}"
            )
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
        """One line for EXPLAIN: 'threads=256 chunk_rows=1048576 staging_threads=0 ...'."""
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


TUNING_MODES = ("online", "off")
# the GPU selection kernel's forms (`compiler.holistic.gpu_form`), in lanes-per-window order
HOLISTIC_GPU_FORMS = ("thread-per-window", "warp-per-window", "block-per-window")


@dataclass(frozen=True)
class TuningOptions:
    """The online auto-tuner of the holistic firing (`runtime.operators.tuner`).

    mode: "online" (the default: the tuner picks every knob not fixed below while the query
        runs, from measured cost) or "off" (the plan's values throughout).
    windows_per_launch: fixed result rows evaluated together (one selection launch on the
        GPU, one chunk of runs on the CPU); None: the plan's value, tuned when online.
    gpu_form: fixed GPU selection form (one of `HOLISTIC_GPU_FORMS`); None: the plan's
        (`compiler.holistic.gpu_form`), tuned when online. Ignored where the step runs on
        the CPU.
    """

    mode: str = "online"
    windows_per_launch: int | None = None
    gpu_form: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in TUNING_MODES:
            raise ValueError(f"tuning must be one of {', '.join(TUNING_MODES)}, not {self.mode!r}")
        if self.windows_per_launch is not None and self.windows_per_launch < 1:
            raise ValueError(f"windows_per_launch must be positive, not {self.windows_per_launch}")
        if self.gpu_form is not None and self.gpu_form not in HOLISTIC_GPU_FORMS:
            raise ValueError(
                f"gpu_form must be one of {', '.join(HOLISTIC_GPU_FORMS)}, not {self.gpu_form!r}"
            )

    @classmethod
    def of(cls, tuning: str | TuningOptions | None) -> TuningOptions:
        """The options a session argument names: a mode, options, or None (the default)."""
        if tuning is None:
            return cls()
        if isinstance(tuning, TuningOptions):
            return tuning
        if isinstance(tuning, str):
            return cls(mode=tuning)
        raise ValueError(f"tuning must be 'online', 'off' or TuningOptions(...), not {tuning!r}")


__all__ = ["BLOCK_TABLE_MODES", "HOLISTIC_GPU_FORMS", "TUNING_MODES", "GpuOptions", "TuningOptions"]
