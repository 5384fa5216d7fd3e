"""The CPU backend: numba kernels. Importing it makes numba's on-disk cache safe for
processes compiling side by side (`numba_cache`)."""

from mangonel.runtime.cpu import numba_cache as _numba_cache  # noqa: F401
