"""Synthetic, physically plausible Characterizations and Traces for the planner tests.

Kernel k has compute time ``tc`` and memory time ``tm`` at the top clocks. At core clock
fraction f and memory clock fraction m: ``t = o + ((tc/f)^p + (tm/m)^p)^(1/p)`` (a smooth
roofline: compute-bound kernels barely notice the memory clock and vice versa); power
``P = idle + a·f^3·(tc-share) + b·m·(tm-share) + static``; energy ``E = P·t``. Column 0 is the
governor ("auto"), equal to the top clocks. A convex-ish time–energy trade-off per kernel,
like real GPUs.
"""

from __future__ import annotations

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.gpumodel.characterization import Characterization
from joulebound.workload.trace import Kernel, Trace

CATS = ("gemm", "attention", "elementwise", "norm", "softmax")


def synth_trace(n_layers: int = 4, per_layer: int = 6, seed: int = 0) -> Trace:
    """forward layers, backward layers (reversed), one optimizer kernel; identical layers."""
    rng = np.random.default_rng(seed)
    proto = []
    for j in range(per_layer):
        cat = CATS[j % len(CATS)]
        flops = float(rng.lognormal(23, 1.5)) if cat in ("gemm", "attention") else float(rng.lognormal(18, 1))
        proto.append((f"k{j}_{cat}", cat, flops, float(rng.lognormal(19, 1))))
    ks: list[Kernel] = []
    for phase, layers in (("forward", range(n_layers)), ("backward", reversed(range(n_layers)))):
        for layer in layers:
            for name, cat, fl, by in proto:
                scale = 2.0 if phase == "backward" else 1.0
                ks.append(Kernel(f"{phase[0]}_{name}", cat, phase, layer, fl * scale, by * scale))
    ks.append(Kernel("adamw", "optimizer", "optimizer", None, 1e9, 2e9))
    return Trace(ks, name="synth")


def synth_char(n_kernels: int | None = None, n_core: int = 6, n_mem: int = 3, seed: int = 0,
               trace: Trace | None = None, p: float = 4.0, with_auto: bool = True,
               noise: float = 0.0) -> Characterization:
    """Characterization of ``trace`` (or of ``n_kernels`` random kernels)."""
    rng = np.random.default_rng(seed)
    if trace is not None:
        fl, by = trace.flops(), trace.bytes()
        names = trace.names()
        tc, tm = fl / 30e12, by / 900e9
    else:
        assert n_kernels is not None
        names = [f"k{i}" for i in range(n_kernels)]
        scale = rng.lognormal(-9, 1.2, n_kernels)
        share = rng.beta(0.6, 0.6, n_kernels)
        tc, tm = scale * share, scale * (1 - share)
    core = np.linspace(1.0, 0.45, n_core)
    mem = np.linspace(1.0, 0.5, n_mem)
    f = np.repeat(core, n_mem)[None, :] * (1 + noise * rng.standard_normal((1, n_core * n_mem)))
    m = np.tile(mem, n_core)[None, :]
    tcf, tmm = tc[:, None] / f, tm[:, None] / m
    t = 3e-6 + (tcf**p + tmm**p) ** (1 / p)
    busy_c, busy_m = tcf / t, tmm / t
    power = 60 + 220 * f**3 * (0.3 + 0.7 * busy_c) + 70 * m * (0.4 + 0.6 * busy_m)
    e = power * t
    configs = [ClockConfig(int(1000 * c), int(5000 * mm)) for c in core for mm in mem]
    if with_auto:
        configs = [ClockConfig()] + configs
        t = np.concatenate([t[:, :1], t], axis=1)
        e = np.concatenate([e[:, :1], e], axis=1)
    return Characterization(kernel_names=list(names), configs=configs, time_s=t, energy_j=e,
                            measured=np.zeros(t.shape, bool), device="synthetic")
