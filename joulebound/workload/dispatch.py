"""Host dispatch cost per launched op, by framework mode (s): how long the host takes to put one
kernel on the GPU. A kernel that runs shorter than this leaves the GPU idle until the next one
arrives; the kernel model then charges the idle power of the clocks in effect for the gap
(:func:`joulebound.gpumodel.kernel.gap_power`), which is what a locked clock changes in a
host-bound step.

Measured values only (``docs/gpu-validation.md``; more modes come with the job predictor's host
model, issue 27):

* ``eager`` — eager PyTorch, one aten op per kernel: 6.1 µs per ``x.add_(1.0)`` on the lent
  H200's host (torch 2.11, 2026-12-04, 1 Ki to 1 Mi elements alike; a CUDA graph of the same ops
  took 1.2 µs each, the GPU-side launch the kernel model's ``launch_overhead_s`` covers).
* ``hf-eager`` — an eager Hugging Face training step (modules, autograd, AdamW): 30.6 µs of wall
  time per launched kernel on the same host (GPT-2 124 M, batch 1 × 128, bf16 autocast: 1,182
  kernels in 36.2 ms while the GPU was busy 6.6 ms; at batch 8 × 1024 the same step kept the GPU
  96 % busy). The job predictor's host model (issue 27) is where this belongs; a recorded op
  stream uses ``eager``, the lower bound.
* ``graph`` — CUDA graphs / captured replays: no host time per kernel (0).
"""

from __future__ import annotations

from joulebound.core.errors import JouleboundError

#: host time per op (s), by framework mode (see the module docstring)
DISPATCH_S: dict[str, float] = {"eager": 6.1e-6, "hf-eager": 30.6e-6, "graph": 0.0}


def dispatch_cost(mode: str) -> float:
    """Host time (s) per launched op in framework ``mode`` (``eager``, ``hf-eager``, ``graph``)."""
    try:
        return DISPATCH_S[mode]
    except KeyError:
        raise JouleboundError(f"unknown framework mode {mode!r}; known: "
                              f"{', '.join(DISPATCH_S)}") from None
