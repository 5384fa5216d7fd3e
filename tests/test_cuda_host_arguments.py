"""The host shim's launch check (`cuda_host.check_arguments`): CuPy passes each kernel
argument as its own value, so an argument narrower than its parameter reads bytes beside it
on the GPU, while the shim's ctypes call would take it; the check refuses what the device
would read wrongly, parsed from the kernel's own declaration."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_host import check_arguments, kernel_parameters

SOURCE = """
typedef long long i64;
extern "C" __global__ void mg_other(int x) {}
// a comment with a ) before the kernel
extern "C" __global__ void mg_kernel(
    const double* __restrict__ values,  // per row (its value, or NaN)
    i64 rows, int flag, /* the flag (0 or 1) */ double scale, float narrow,
    unsigned char* __restrict__ out)
{
}
"""
ARRAY = np.zeros(4)


def test_the_parameters_come_from_the_declaration_less_comments():
    assert kernel_parameters(SOURCE, "mg_kernel") == ["*", "i64", "int", "double", "float", "*"]
    assert kernel_parameters(SOURCE, "mg_other") == ["int"]


@pytest.mark.parametrize(
    "arguments",
    [
        (ARRAY, np.int64(5), np.int32(1), 2.0, np.float32(1), None),
        (ARRAY, 5, np.int64(1), np.float64(2), np.float32(1), ARRAY),  # wider ints: low bytes
    ],
)
def test_arguments_the_device_reads_as_given_pass(arguments):
    check_arguments("mg_kernel", kernel_parameters(SOURCE, "mg_kernel"), arguments)


@pytest.mark.parametrize(
    "arguments",
    [
        (ARRAY, np.int32(5), np.int32(1), 2.0, np.float32(1), None),  # i64 from 4 bytes
        (ARRAY, 5, True, 2.0, np.float32(1), None),  # an int from one byte
        (ARRAY, 5, 1, 2.0, 1.0, None),  # a float from a double's 8 bytes
        (ARRAY, 5, 1, np.float32(2), np.float32(1), None),  # a double from 4 bytes
        (5, 5, 1, 2.0, np.float32(1), None),  # a scalar for a pointer
        (ARRAY, 5, 1, 2.0, np.float32(1)),  # one argument short
    ],
)
def test_arguments_the_device_would_misread_fail(arguments):
    with pytest.raises(AssertionError):
        check_arguments("mg_kernel", kernel_parameters(SOURCE, "mg_kernel"), arguments)
