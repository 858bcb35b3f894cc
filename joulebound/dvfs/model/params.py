"""``DeviceParams``: the parameters of joulebound's GPU time/power model for one GPU.

Two kinds exist:

* **defaults** (:func:`default_params`), built from a :class:`~joulebound.devices.spec.DeviceSpec`
  alone with physically motivated fractions of the board power limit — provenance ``modeled``,
  ``calibration = "none"``;
* **shipped** parameters (``params/<device>.json`` package data), calibrated on public
  measurements (Perseus stage profiles, Perseus plans) or transferred from the nearest measured
  GPU; each file records which data it came from and the held-out error it reached.

Units: W, MHz, s, fractions in [0, 1].
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any

from ...devices.spec import DeviceSpec
from ...errors import JouleboundError
from .vf import VFCurve

SCHEMA = "joulebound.device_params"
VERSION = 1

#: achieved fraction of the dtype's dense peak, per kernel category (roofline "compute ceiling").
DEFAULT_COMPUTE_EFF: dict[str, float] = {
    "gemm": 0.72, "attention": 0.55, "elementwise": 0.30, "norm": 0.30, "softmax": 0.30,
    "reduction": 0.30, "embedding": 0.20, "optimizer": 0.30, "memcpy": 1.0,
    "communication": 1.0, "other": 0.40,
}
#: categories whose FLOPs run on tensor cores at the kernel's dtype; the rest use the fp32 rate.
TENSOR_CATEGORIES = frozenset({"gemm", "attention"})


@dataclass
class DeviceParams:
    """Model parameters for one GPU.

    Attributes:
        device: catalog name the parameters belong to.
        idle_w: board power of an idle GPU at its top clocks (W); present in every kernel's power.
        core_dyn_w: core dynamic power (W) of a fully busy core (utilisation 1) at the top core
            clock and relative voltage 1.0.
        core_base_frac: fraction of ``core_dyn_w`` drawn by a running but stalled core (clock
            tree, schedulers, L2) — the activity floor of any kernel.
        mem_static_w: memory-subsystem power (W) at the top memory clock with no traffic.
        mem_dyn_w: extra memory power (W) at full DRAM bandwidth at the top memory clock.
        mem_low_v: relative memory voltage at the lowest memory clocks (below
            ``mem_low_frac`` × top memory clock); 1.0 elsewhere. From Guerreiro et al.'s GTX Titan X
            fit (0.5 at 810 MHz, 1.0 at 3300–4005 MHz), the only public memory-clock data.
        mem_low_frac: memory clocks below this fraction of the top memory clock use ``mem_low_v``.
        vf: the core voltage–frequency curve.
        power_limit_w: enforced board power limit (W); above it the GPU lowers its core clock.
        compute_eff: achieved fraction of peak FLOP/s per kernel category.
        bw_eff: achieved fraction of peak DRAM bandwidth.
        core_mem_frac: fraction of a memory-bound kernel's time that scales with the core clock
            (L1/L2 and load/store issue are in the core clock domain).
        overlap_p: exponent of the smooth maximum that overlaps compute and memory time
            (``(tc**p + tm**p)**(1/p)``; large p = perfect overlap).
        launch_overhead_s: fixed time per kernel (launch, tail) in s.
        provenance: ``"modeled"`` (every model output is modeled; this records how the
            parameters were obtained in ``calibration``).
        calibration: ``"none"`` (datasheet defaults), ``"fit"`` (fitted on measurements) or
            ``"transfer"`` (moved from another GPU by datasheet ratios).
        sources: where each group of parameters came from; ``heldout``: held-out errors.
    """

    device: str
    idle_w: float
    core_dyn_w: float
    core_base_frac: float
    mem_static_w: float
    mem_dyn_w: float
    vf: VFCurve
    power_limit_w: float
    compute_eff: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_COMPUTE_EFF))
    bw_eff: float = 0.80
    core_mem_frac: float = 0.20
    overlap_p: float = 4.0
    launch_overhead_s: float = 4e-6
    mem_low_v: float = 0.5
    mem_low_frac: float = 0.35
    provenance: str = "modeled"
    calibration: str = "none"
    sources: dict[str, str] = field(default_factory=dict)
    heldout: dict[str, Any] = field(default_factory=dict)

    def with_limit(self, power_limit_w: float) -> DeviceParams:
        """A copy with another enforced power limit (W)."""
        return replace(self, power_limit_w=float(power_limit_w))

    # -- files --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["vf"] = self.vf.to_json()
        return {"schema": SCHEMA, "version": VERSION, **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeviceParams:
        if d.get("schema") != SCHEMA:
            raise JouleboundError(f"not a joulebound device-parameter file (schema {d.get('schema')!r})")
        d = {k: v for k, v in d.items() if k not in ("schema", "version")}
        d["vf"] = VFCurve.from_json(d["vf"])
        eff = dict(DEFAULT_COMPUTE_EFF)
        eff.update(d.get("compute_eff", {}))
        d["compute_eff"] = eff
        return cls(**d)


def default_params(spec: DeviceSpec) -> DeviceParams:
    """Uncalibrated but physical parameters from the datasheet figures in ``spec``.

    The board's power budget above idle is split so that a fully compute-bound tensor-core kernel
    at the top clock lands at the power limit (what heavy GEMMs do on A40 / RTX 30xx boards), and a
    bandwidth-bound kernel draws about 60 % of it. The V–f curve is the spec's ``vf_curve`` if
    given, else a floor of 0.72 up to 55 % of the top clock (typical of Ampere boards; the
    A40 stage profiles put the knee near 1000 MHz of 1740).
    """
    budget = max(spec.power_limit_default_w - spec.idle_power_w, 1.0)
    if spec.vf_curve:
        vf = VFCurve.from_points(spec.vf_curve, spec.max_core_mhz)
        vf_src = "DeviceSpec.vf_curve"
    else:
        vf = VFCurve(knee_mhz=0.55 * spec.max_core_mhz, v_min=0.72, max_mhz=spec.max_core_mhz)
        vf_src = "default shape (floor 0.72 to 55 % of top clock)"
    return DeviceParams(
        device=spec.name, idle_w=spec.idle_power_w,
        core_dyn_w=0.80 * budget, core_base_frac=0.25,
        mem_static_w=0.06 * budget, mem_dyn_w=0.25 * budget,
        vf=vf, power_limit_w=spec.power_limit_default_w,
        calibration="none",
        sources={"power": "fractions of (power_limit_default_w - idle_power_w) from DeviceSpec",
                 "vf": vf_src, "memory_voltage": "Guerreiro et al. HPCA'18 GTX Titan X fit"},
    )


def shipped_names() -> list[str]:
    """Devices with shipped calibrated/transferred parameter files."""
    root = resources.files(__package__) / "params"
    return sorted(p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json"))


def load_shipped(name: str) -> DeviceParams | None:
    """The shipped parameter file for ``name``, or ``None`` when there is none."""
    res = resources.files(__package__) / "params" / f"{name}.json"
    if not res.is_file():
        return None
    return DeviceParams.from_json(json.loads(res.read_text()))


def params_for(spec: DeviceSpec) -> DeviceParams:
    """Shipped parameters for ``spec.name`` when available, else :func:`default_params`."""
    shipped = load_shipped(spec.name)
    return shipped if shipped is not None else default_params(spec)
