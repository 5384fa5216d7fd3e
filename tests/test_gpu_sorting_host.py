"""`gpu.sorting.lexsort_order` (a stable argsort per key) gives `lexsort`'s order, over the
host stand-in of CuPy (whose `argsort` is stable, as CuPy's radix sort is)."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_host import HostCupy

from mangonel.runtime.gpu.sorting import lexsort_order


@pytest.mark.parametrize("n_keys", [1, 2, 3])
@pytest.mark.parametrize("spread", [1, 3, 1000, 2**62])
def test_the_order_is_lexsorts(n_keys: int, spread: int) -> None:
    rng = np.random.default_rng(n_keys * 7 + spread % 97)
    for rows in (0, 1, 2, 17, 5000):
        keys = [rng.integers(-spread, spread + 1, rows, dtype=np.int64) for _ in range(n_keys)]
        got = np.asarray(lexsort_order(HostCupy(), keys))
        assert np.array_equal(got, np.lexsort(keys))  # ties keep their input order too
