"""The GPU model refuses kernels with negative or non-finite work at its entry (a Python caller
building kernels by hand once reached the compiled table path with -5 FLOPs, and repeated calls
corrupted its memory)."""

from __future__ import annotations

import math

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.gpumodel import characterize
from joulebound.workload.trace import Kernel, Trace


@pytest.mark.parametrize("flops, nbytes", [(-5.0, 10.0), (1e9, -40.0), (math.inf, 1.0), (math.nan, 1.0)])
def test_negative_or_non_finite_work_is_refused_with_the_kernel_named(flops, nbytes):
    ok = Kernel("fine", "gemm", "forward", None, 1e9, 1e6, "bf16", None, {})
    bad = Kernel("bad", "gemm", "forward", None, flops, nbytes, "bf16", None, {})
    with pytest.raises(JouleboundError, match="kernel 1 .'bad'.*finite and >= 0"):
        characterize(Trace([ok, bad], name="t"), "a40")
    assert characterize(Trace([ok], name="t"), "a40").time_s.shape[0] == 1
