"""Derive the shipped ``params/<device>.json`` files from the validation fits.

* A100-SXM4-80GB and A40: the kernel model fitted **at kernel level** on the Perseus stage
  profiles (:mod:`research.perseus_kernel`, both models, every clock), with a
  bootstrap over stage series for ``draws`` — ``calibration = "fit"``;
* A100-PCIe-80GB: the A100-SXM kernel fit (same GA100 die) with the PCIe board's 300 W limit
  and the core power set so that a busy core reaches that limit at the cap clock fitted on the
  even-indexed Perseus A100-PCIe plans — ``"fit"``; its draws follow the SXM draws;
* RTX 3080 Ti: calibrated on Spaan et al.'s published per-kernel figures
  (:mod:`research.spaan`), with a bootstrap over Table 1 rows — ``"published"``.

Every file names, per parameter, where it came from (``sources``); parameters it does not name
are defaults nobody fitted (``DeviceParams.defaulted``). Run by ``joulebound validate
--write-params``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from joulebound.gpumodel.params import DeviceParams
from joulebound.gpumodel.vf import VFCurve
from joulebound.hw.spec import DeviceSpec

PARAMS_DIR = Path(__file__).resolve().parent / "params"


def with_provenance(params: DeviceParams, fitted: tuple[str, ...], source: str,
                    heldout: dict[str, Any], draws: list[dict[str, float]],
                    calibration: str = "fit", extra: dict[str, str] | None = None
                    ) -> DeviceParams:
    """``params`` with ``sources`` naming ``source`` for every fitted parameter (and the catalog
    for the rest that came from the catalog), the held-out errors and the draws."""
    sources = {k: v for k, v in params.sources.items() if "catalog" in v}
    for name in fitted:
        sources[name] = source
    sources.update(extra or {})
    return replace(params, sources=sources, heldout=heldout, draws=draws,
                   calibration=calibration)


def for_a100_pcie(spec: DeviceSpec, sxm: DeviceParams, f_cap_mhz: float, heldout: dict[str, Any]
                  ) -> DeviceParams:
    """A100-PCIe: the SXM kernel fit; core power such that a busy core reaches the 300 W limit
    at the cap clock fitted on the Perseus plans (the plans check's own device model)."""
    vf = VFCurve(sxm.vf.knee_mhz, sxm.vf.v_min, spec.max_core_mhz)
    headroom = spec.power_limit_default_w - spec.idle_power_w - sxm.mem_static_w
    core_dyn = max(headroom, 10.0) / float(vf.dynamic_scale(f_cap_mhz))
    scale = core_dyn / sxm.core_dyn_w
    draws = [{**d, "core_dyn_w": d.get("core_dyn_w", sxm.core_dyn_w) * scale,
              "idle_w": spec.idle_power_w, "power_limit_w": spec.power_limit_default_w}
             for d in sxm.draws]
    sources = {k: f"A100-SXM kernel-level fit (same GA100 die): {v}"
               for k, v in sxm.sources.items() if "catalog" not in v}
    sources.update({
        "core_dyn_w": f"cap clock {f_cap_mhz:.0f} MHz fitted on even-indexed Perseus A100-PCIe "
                      "plans",
        "idle_w": "DeviceSpec.idle_power_w (catalog)",
        "power_limit_w": "DeviceSpec.power_limit_default_w (catalog: 300 W PCIe board)"})
    return replace(sxm, device=spec.name, vf=vf, core_dyn_w=core_dyn, idle_w=spec.idle_power_w,
                   power_limit_w=spec.power_limit_default_w, calibration="fit",
                   heldout=heldout, draws=draws, sources=sources)


def write(params: DeviceParams, directory: Path = PARAMS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{params.device}.json"
    path.write_text(json.dumps(params.to_json(), indent=1, default=float) + "\n")
    return path
