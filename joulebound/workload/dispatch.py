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

from dataclasses import dataclass

from joulebound.core.errors import JouleboundError

#: host time per op (s), by framework mode (see the module docstring)
DISPATCH_S: dict[str, float] = {"eager": 6.1e-6, "hf-eager": 30.6e-6, "graph": 0.0}

#: kernels a Hugging Face eager training step launches per kernel of the analytic trace: 1,182
#: launched kernels (measured, H200 profile of GPT-2 124 M, ``docs/gpu-validation.md``) over the
#: 479 kernels of the same step's analytic trace (12 layers × 38 + embedding, head and 15
#: optimizer kernels) — unfused bias adds, dropout, masks, casts and foreach-AdamW pieces
HF_KERNELS_PER_TRACE_KERNEL = 1182 / 479


#: host work of PyTorch's data-parallel wrappers, in analytic-trace kernels of host time (so it
#: scales with the host's speed like the framework's own dispatch), per layer and micro-batch:
#: measured at world size 1 on the lent H200 (``docs/measurements/h200-2026-12-04-wrappers.json``,
#: GPT-2 124 M eager, batch 1 × 128, host-bound at 22.7 ms bare = 47 µs per trace kernel):
#: DDP +3.6 ms per step (+7.1 ms with ``find_unused_parameters``, which Hugging Face's Trainer
#: turns on for models without gradient checkpointing); FSDP2 (``fully_shard`` per block, 13
#: units) +35.7 ms — 2.75 ms per unit: pre/post-forward and pre/post-backward hooks, the
#: unshard / reshard bookkeeping and their stream synchronization. Split between the forward
#: and backward of a layer as the hooks run: FSDP one third forward, DDP all in backward.
WRAPPER_UNIT_KERNELS: dict[str, tuple[float, float]] = {
    # (forward, backward) trace-kernel equivalents per layer per micro-batch
    "fsdp": (2.75e-3 / 47.4e-6 / 3, 2 * 2.75e-3 / 47.4e-6 / 3),
    "ddp": (0.0, 3.6e-3 / 13 / 47.4e-6),
    "ddp-find-unused": (0.0, 7.1e-3 / 13 / 47.4e-6),
    # DTensor tensor parallelism (Hugging Face's tp_plan): BERT-base with its six linears per
    # layer column/row-parallel at world size 1, 57 -> 184 ms per host-bound step
    # (docs/measurements/h200-2026-12-04-dtensor-tp.json): 10.6 ms per layer, in units of the
    # hf host time per trace kernel (75.6 µs; that session's host speed was not measured apart)
    "dtensor-tp": (127e-3 / 12 / 75.6e-6 / 3, 2 * 127e-3 / 12 / 75.6e-6 / 3),
}


@dataclass(frozen=True)
class Framework:
    """How a training framework runs the analytic trace's kernels.

    Attributes:
        name: the ``--framework`` value.
        dispatch: the host mode of :data:`DISPATCH_S` its ops are launched in.
        kernels_per_trace_kernel: real kernels launched per kernel of the analytic trace
            (unfused elementwise ops, casts, optimizer pieces; 1 = fused as the trace).
        description: one line for ``--help`` and docs.
        torch_wrappers / megatron_dp: how its data and tensor parallelism run (below).
    """

    name: str
    dispatch: str
    kernels_per_trace_kernel: float
    description: str
    #: runs data / tensor parallelism through PyTorch's wrappers (DDP, FSDP, DTensor), whose
    #: hooks cost host time (:data:`WRAPPER_UNIT_KERNELS`) and whose FSDP copies GPU traffic
    torch_wrappers: bool = False
    #: Megatron-style data parallelism: gradients all-reduced after the backward pass unless the
    #: distributed optimizer overlaps them
    megatron_dp: bool = False

    @property
    def host_s(self) -> float:
        """Prior host time per analytic-trace kernel (s): measured dispatch × kernels per trace
        kernel (the job calibration may refine it, :mod:`joulebound.jobs.calibrate`)."""
        return DISPATCH_S[self.dispatch] * self.kernels_per_trace_kernel


#: the training frameworks the job predictor tells apart (``--framework``)
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("hf", "hf-eager", HF_KERNELS_PER_TRACE_KERNEL,
              "Hugging Face Trainer / Accelerate, eager PyTorch modules (unfused elementwise ops)",
              torch_wrappers=True),
    Framework("eager", "eager", HF_KERNELS_PER_TRACE_KERNEL,
              "a plain eager PyTorch training loop (same kernels as hf, no Trainer overhead)",
              torch_wrappers=True),
    Framework("megatron", "eager", 1.0,
              "Megatron-LM / Megatron-DeepSpeed / NeMo: fused kernels, eager launch", megatron_dp=True),
    Framework("compiled", "eager", 1.0,
              "torch.compile (TorchInductor): fused kernels launched from generated code"),
)}
DEFAULT_FRAMEWORK = "hf"
#: TorchInductor's training speedup over eager PyTorch: geometric mean over 180+ real-world models
#: on an A100 (Ansel et al., "PyTorch 2", ASPLOS'24), published; the ``compiled`` framework's κ is
#: Hugging Face's divided by it ("calibrated on published figures")
INDUCTOR_TRAIN_SPEEDUP = 1.41


def get_framework(name: str) -> Framework:
    """The :class:`Framework` called ``name`` (clear error listing the known ones)."""
    key = str(name).strip().lower()
    if key not in FRAMEWORKS:
        raise JouleboundError(f"unknown --framework {name!r}; known: " + ", ".join(
            f"{f.name} ({f.description})" for f in FRAMEWORKS.values()))
    return FRAMEWORKS[key]


def dispatch_cost(mode: str) -> float:
    """Host time (s) per launched op in framework ``mode`` (``eager``, ``hf-eager``, ``graph``)."""
    try:
        return DISPATCH_S[mode]
    except KeyError:
        raise JouleboundError(f"unknown framework mode {mode!r}; known: "
                              f"{', '.join(DISPATCH_S)}") from None
