"""Derive the shipped ``params/<device>.json`` files from the validation fits.

* A100-SXM4-80GB and A40: from :class:`~joulebound.dvfs.model.calibrate.StageModel` fitted on the
  Perseus stage profiles (3 clocks per stage) — ``calibration = "fit"``;
* A100-PCIe-80GB: V–f curve of the A100-SXM (same GA100 die), power cap clock fitted on the
  even-indexed Perseus plans — ``"fit"``;
* RTX 3080 Ti: transferred from the A40 (same GA102 die): the V–f curve in relative clock, power
  terms scaled by the ratio of (board limit − idle) — ``"transfer"`` (modeled, no measurement of
  its own);
* every file: memory-voltage ratio from the Guerreiro GTX Titan X fit (the only public
  memory-clock data).

Run by ``joulebound validate --write-params``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...devices.spec import DeviceSpec
from .calibrate import StageModel
from .params import DeviceParams, default_params
from .vf import VFCurve

PARAMS_DIR = Path(__file__).resolve().parent / "params"


def from_stage_model(spec: DeviceSpec, model: StageModel, mem_low_v: float,
                     heldout: dict[str, Any], source: str) -> DeviceParams:
    """Kernel-model parameters from a stage-model fit of the same GPU."""
    base = default_params(spec)
    st = model.stage_
    # stage compute fraction; clipped because noisy profiles (A40) under-estimate it
    u_c = np.clip(model.compute_fraction(), 0.6, 1.0)
    core_dyn = float(np.median(st.A / (base.core_base_frac + (1 - base.core_base_frac) * u_c)))
    mem_static = float(max(np.median(st.Pc) - spec.idle_power_w, 5.0))
    capped = np.isfinite(st.P_cap)
    limit = float(np.mean(st.P_cap[capped])) if capped.any() else spec.power_limit_default_w
    return replace(
        base, core_dyn_w=core_dyn, mem_static_w=mem_static, vf=model.vf_, power_limit_w=limit,
        mem_low_v=mem_low_v, calibration="fit", heldout=heldout,
        sources={"vf, power, limit": source,
                 "idle_w": "DeviceSpec.idle_power_w (catalog)",
                 "mem_low_v": "Guerreiro et al. GTX Titan X fit (joulebound validate)",
                 "compute_eff, bw_eff, overlap": "defaults (not calibrated: no per-kernel data)"})


def for_a100_pcie(spec: DeviceSpec, sxm: DeviceParams, f_cap_mhz: float, heldout: dict[str, Any]
                  ) -> DeviceParams:
    """A100-PCIe: SXM V–f curve; core power such that a busy core reaches the 300 W limit at the
    cap clock fitted on the Perseus plans."""
    vf = VFCurve(sxm.vf.knee_mhz, sxm.vf.v_min, spec.max_core_mhz)
    base = default_params(spec)
    headroom = spec.power_limit_default_w - spec.idle_power_w - sxm.mem_static_w
    core_dyn = max(headroom, 10.0) / float(vf.dynamic_scale(f_cap_mhz))
    return replace(base, vf=vf, core_dyn_w=core_dyn, mem_static_w=sxm.mem_static_w,
                   power_limit_w=spec.power_limit_default_w, mem_low_v=sxm.mem_low_v,
                   calibration="fit", heldout=heldout,
                   sources={"vf": "A100-SXM stage-profile fit (same GA100 die)",
                            "core_dyn_w": f"cap clock {f_cap_mhz:.0f} MHz fitted on even-indexed "
                                          "Perseus A100-PCIe plans",
                            "mem_low_v": sxm.sources.get("mem_low_v", "")})


def transfer(spec: DeviceSpec, src: DeviceParams, src_spec: DeviceSpec) -> DeviceParams:
    """Move parameters from ``src`` (same die) by datasheet ratios; marked ``transfer``."""
    k = (spec.power_limit_default_w - spec.idle_power_w) / max(
        src_spec.power_limit_default_w - src_spec.idle_power_w, 1.0)
    rel_knee = src.vf.knee_mhz / src.vf.max_mhz
    vf = VFCurve(rel_knee * spec.max_core_mhz, src.vf.v_min, spec.max_core_mhz)
    return replace(
        default_params(spec), vf=vf, core_dyn_w=src.core_dyn_w * k,
        mem_static_w=src.mem_static_w * k, mem_low_v=src.mem_low_v,
        power_limit_w=spec.power_limit_default_w, calibration="transfer",
        heldout={"note": f"no public measurements; transferred from {src.device} "
                         f"(held-out there: {src.heldout})"},
        sources={"vf": f"{src.device} fit, knee at the same fraction of the top clock",
                 "power": f"{src.device} fit x (limit - idle) ratio {k:.3f} (datasheet)",
                 "power_limit_w": "DeviceSpec.power_limit_default_w (datasheet)",
                 "mem_low_v": src.sources.get("mem_low_v", "")})


def write(params: DeviceParams, directory: Path = PARAMS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{params.device}.json"
    path.write_text(json.dumps(params.to_json(), indent=1, default=float) + "\n")
    return path
