"""Generated CUDA run on the host with real warps, for tests of warp- and block-cooperative
code (shuffles, ballots, `__match_any_sync`, `__syncthreads`, shared memory, cell locks) on
machines without a GPU.

`tests/cuda_host.py` runs a kernel in one thread (one lane per warp: a shuffle returns the
caller's own value), which cannot check code whose lanes exchange values. Here one block of
`blockDim.x` host threads at a time runs the kernel, the grid's blocks one after another: each
warp intrinsic is a rendezvous of the warp's 32
threads (every lane publishes its value, a barrier, every lane reads, a barrier), `__syncthreads`
is a barrier of the block, `__shared__` memory is one static copy (blocks run one at a time,
and every kernel here initialises its shared memory), and atomics take one process-wide
mutex. Only full-warp masks (0xffffffff) are modelled: the kernels tested here call every
intrinsic from all 32 lanes. Blocks never run concurrently, so what it cannot check is
timing, memory ordering across SMs and the device itself (the gpu-marked tests do).
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from cuda_host import check_arguments, compile_library, kernel_arguments, kernel_parameters

WARP_SHIM = r"""
#include <cmath>
#include <climits>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
struct mg_dim { long long x; };
static mg_dim blockIdx = {0}, gridDim = {1}, blockDim = {32};
static thread_local mg_dim threadIdx = {0};
using std::isnan; using std::isinf; using std::isfinite;
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double v) { long long d; memcpy(&d, &v, 8); return d; }
static std::mutex mg_atomics;
template <class T> static inline T atomicAdd(T* a, T v)
{ std::lock_guard<std::mutex> g(mg_atomics); T o = *a; *a = o + v; return o; }
template <class T> static inline T atomicMin(T* a, T v)
{ std::lock_guard<std::mutex> g(mg_atomics); T o = *a; if (v < o) *a = v; return o; }
template <class T> static inline T atomicMax(T* a, T v)
{ std::lock_guard<std::mutex> g(mg_atomics); T o = *a; if (v > o) *a = v; return o; }
template <class T> static inline T atomicCAS(T* a, T c, T v)
{ std::lock_guard<std::mutex> g(mg_atomics); T o = *a; if (o == c) *a = v; return o; }
template <class T> static inline T atomicExch(T* a, T v)
{ std::lock_guard<std::mutex> g(mg_atomics); T o = *a; *a = v; return o; }
template <class T> static inline T __ldcg(const T* p)
{ std::lock_guard<std::mutex> g(mg_atomics); return *p; }
static inline void __threadfence() { std::lock_guard<std::mutex> g(mg_atomics); }
static inline void __nanosleep(unsigned) { sched_yield(); }
// one block: shared memory is one static copy, a block barrier waits for every thread
#define __shared__ static
static pthread_barrier_t mg_block_barrier;
static pthread_barrier_t mg_warp_barrier[32];
static unsigned long long mg_slot[32][32];  // [warp][lane]
static inline void __syncthreads() { pthread_barrier_wait(&mg_block_barrier); }
static inline unsigned long long mg_exchange(unsigned long long mine, int lane) {
    const int warp = (int)(threadIdx.x >> 5);
    mg_slot[warp][threadIdx.x & 31] = mine;
    pthread_barrier_wait(&mg_warp_barrier[warp]);
    const unsigned long long theirs = mg_slot[warp][lane & 31];
    pthread_barrier_wait(&mg_warp_barrier[warp]);
    return theirs;
}
template <class T> static inline unsigned long long mg_bits(T v)
{ unsigned long long b = 0; memcpy(&b, &v, sizeof(T)); return b; }
template <class T> static inline T mg_from_bits(unsigned long long b)
{ T v; memcpy(&v, &b, sizeof(T)); return v; }
template <class T> static inline T __shfl_sync(unsigned, T v, int lane)
{ return mg_from_bits<T>(mg_exchange(mg_bits(v), lane)); }
template <class T> static inline T __shfl_down_sync(unsigned, T v, int offset) {
    const int lane = (int)(threadIdx.x & 31);
    return mg_from_bits<T>(mg_exchange(mg_bits(v), lane + offset < 32 ? lane + offset : lane));
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask, int = 32)
{ return mg_from_bits<T>(mg_exchange(mg_bits(v), (int)(threadIdx.x & 31) ^ mask)); }
// every lane publishes, then reads all 32 slots (the reads end before the next publish)
static inline unsigned mg_gather(unsigned long long mine, unsigned long long* out) {
    const int warp = (int)(threadIdx.x >> 5);
    mg_slot[warp][threadIdx.x & 31] = mine;
    pthread_barrier_wait(&mg_warp_barrier[warp]);
    for (int l = 0; l < 32; ++l) out[l] = mg_slot[warp][l];
    pthread_barrier_wait(&mg_warp_barrier[warp]);
    return 0;
}
static inline unsigned __ballot_sync(unsigned, int predicate) {
    unsigned long long all[32];
    mg_gather(predicate != 0, all);
    unsigned mask = 0;
    for (int l = 0; l < 32; ++l) mask |= all[l] ? (1u << l) : 0u;
    return mask;
}
static inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == 0xffffffffu; }
static inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0u; }
static inline unsigned __match_any_sync(unsigned, unsigned long long v) {
    unsigned long long all[32];
    mg_gather(v, all);
    unsigned mask = 0;
    for (int l = 0; l < 32; ++l) mask |= all[l] == v ? (1u << l) : 0u;
    return mask;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __ffs(unsigned v) { return __builtin_ffs((int)v); }
static int mg_barrier_warps = -1;  // warps of the barriers made last (-1: none yet)
extern "C" void mg_host_block(long long block, long long blocks, int threads) {
    blockIdx.x = block;
    gridDim.x = blocks;
    blockDim.x = threads;
    if (mg_barrier_warps >= 0) {
        pthread_barrier_destroy(&mg_block_barrier);
        for (int w = 0; w < mg_barrier_warps; ++w) pthread_barrier_destroy(&mg_warp_barrier[w]);
    }
    mg_barrier_warps = threads / 32;
    pthread_barrier_init(&mg_block_barrier, nullptr, (unsigned)threads);
    for (int w = 0; w < threads / 32; ++w) pthread_barrier_init(&mg_warp_barrier[w], nullptr, 32);
}
extern "C" void mg_host_thread(int thread) { threadIdx.x = thread; }
"""


class WarpHostModule:
    """A generated module compiled by g++ over the warp shim, with CuPy's RawModule
    `get_function(name)(grid, block, arguments)` launch: the grid's blocks in turn, each
    `block[0]` host threads (a multiple of 32, at most 1024)."""

    def __init__(self, source: str, folder: Path) -> None:
        (folder / "warp_shim.h").write_text(WARP_SHIM)
        self.source = source
        self.library = compile_library(source, folder, folder / "warp_shim.h", ("-pthread",))

    def get_function(self, name: str):  # noqa: ANN201
        function = getattr(self.library, name)
        library = self.library
        parameters = kernel_parameters(self.source, name)

        def launch(grid, block, arguments) -> None:  # noqa: ANN001
            check_arguments(name, parameters, arguments)
            threads = int(block[0])
            assert threads % 32 == 0 and 32 <= threads <= 1024, threads
            converted = kernel_arguments(arguments)

            def run(thread: int) -> None:
                library.mg_host_thread(thread)
                function(*converted)  # ctypes releases the GIL: the lanes run concurrently

            for block in range(int(grid[0])):
                library.mg_host_block(
                    ctypes.c_longlong(block), ctypes.c_longlong(int(grid[0])), threads
                )
                workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()

        return launch
