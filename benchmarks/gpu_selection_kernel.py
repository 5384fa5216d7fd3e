"""The holistic selection kernel alone, on the GPU benchmark's firing
(docs/performance/holistic-gpu.md, "GPU MEDIAN above 300 M/s"): 1000 keys, 19 windows a key of 100
panes of 100 sorted values (w = 1 s, s = 10 ms at 10 M tuples a second), one launch over all 19,000
windows.

`python benchmarks/gpu_selection_kernel.py [values_per_pane]`. Per form and function, the
device time of a launch by CUDA events, median of 20 after one warm-up, and a checksum of
the answers (equal across package versions when the selection is). A kernel harness: no
staging, panes or firing, so its figures stand beside the public path's, not for them. Run
it from another folder with PYTHONPATH naming a package tree to time that tree. Needs CuPy
and a GPU.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np

import mangonel
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.compile import shared_context
from mangonel.runtime.gpu.holistic import GpuHolistic

KEYS, WINDOWS, PANES_PER_WINDOW, LAUNCHES = 1000, 19, 100, 20
CASES = (("percentile_cont", 0.5), ("percentile_disc", 0.5), ("percentile_cont", 0.99))


def firing(values_per_pane: int) -> tuple[np.ndarray, ...]:
    """(values, run_start, run_end, row_first, row_runs) of the firing: each (key, pane)'s
    values one sorted run of normal doubles as order keys; a window's runs its 100 panes'."""
    panes = WINDOWS + PANES_PER_WINDOW - 1
    generator = np.random.default_rng(3)
    doubles = np.sort(generator.normal(size=(KEYS * panes, values_per_pane)), axis=1)
    bits = doubles.view(np.int64).ravel()
    values = np.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)  # monotone order keys
    pane_start = np.arange(KEYS * panes, dtype=np.int64) * values_per_pane
    key = np.repeat(np.arange(KEYS), WINDOWS)
    first_pane = key * panes + np.tile(np.arange(WINDOWS), KEYS)
    run_pane = (first_pane[:, None] + np.arange(PANES_PER_WINDOW)).ravel()
    rows = KEYS * WINDOWS
    return (
        values,
        pane_start[run_pane],
        pane_start[run_pane] + values_per_pane,
        np.arange(rows, dtype=np.int64) * PANES_PER_WINDOW,
        np.full(rows, PANES_PER_WINDOW, np.int64),
    )


def main() -> None:
    values_per_pane = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    cp = device.cupy()
    arrays = [cp.asarray(a) for a in firing(values_per_pane)]
    print(f"{mangonel.__file__}: {KEYS * WINDOWS} windows of {PANES_PER_WINDOW} runs")
    for form in ("warp-per-window", "block-per-window"):
        kernels = GpuHolistic(cp, shared_context().module, form)
        for evaluation, fraction in CASES:
            read = kernels.holistic_select_later(*arrays, evaluation, fraction, True)
            read()  # compiled and warm
            times = []
            for _ in range(LAUNCHES):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                kernels.holistic_select_later(*arrays, evaluation, fraction, True)
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end))
            _, lower, _ = read()
            print(
                f"{form:17s} {evaluation} p={fraction}: {statistics.median(times):.3f} ms a "
                f"launch, checksum {int(lower.sum()) & 0xFFFF}"
            )


if __name__ == "__main__":
    main()
