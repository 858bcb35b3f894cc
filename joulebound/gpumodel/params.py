"""``DeviceParams``: the parameters of joulebound's GPU time/power model for one GPU.

Two kinds exist:

* **defaults** (:func:`default_params`), built from a :class:`~joulebound.hw.spec.DeviceSpec`
  alone with physically motivated fractions of the board power limit — ``calibration = "none"``,
  every parameter marked ``default``;
* **shipped** parameters (``params/<device>.json`` package data), fitted on public measurements
  by ``joulebound validate --write-params``: each file records, per parameter, which data it came
  from (``sources``; a parameter with no source is a ``default`` nobody fitted), the held-out
  error the fit reached (``heldout``) and an ensemble of refits on resampled data (``draws``) that
  carries the parameter uncertainty into every modeled saving.

Parameters are addressed by *paths*: a field name (``"overlap_p"``), a per-category entry
(``"compute_eff.gemm"``), a V–f field (``"vf.knee_mhz"``) or a memory-voltage point
(``"mem_v.0"``: the relative voltage of the first point).

Units: W, MHz, s, fractions in [0, 1].
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.gpumodel.vf import VFCurve
from joulebound.hw import memory
from joulebound.hw.spec import DeviceSpec

SCHEMA = "joulebound.device_params"
VERSION = 2

CATEGORY_KEYS = ("gemm", "attention", "elementwise", "norm", "softmax", "reduction",
                 "embedding", "optimizer", "memcpy", "communication", "other")

#: achieved fraction of the dtype's dense peak, per kernel category (roofline "compute ceiling").
DEFAULT_COMPUTE_EFF: dict[str, float] = {
    "gemm": 0.72, "attention": 0.55, "elementwise": 0.30, "norm": 0.30, "softmax": 0.30,
    "reduction": 0.30, "embedding": 0.20, "optimizer": 0.30, "memcpy": 1.0,
    "communication": 1.0, "other": 0.40,
}
#: achieved fraction of the DRAM bandwidth, per kernel category.
DEFAULT_BW_EFF: dict[str, float] = {k: 0.80 for k in CATEGORY_KEYS} | {"memcpy": 0.90}
#: share of a kernel's memory time that follows the *core* clock (L2 / load-store issue in the
#: core domain), per category. Streaming kernels ~0: Spaan et al. measured GELU at 630 MHz core
#: +0.03 % time on the RTX 3080 Ti.
DEFAULT_CORE_MEM_FRAC: dict[str, float] = {
    "gemm": 0.20, "attention": 0.20, "elementwise": 0.0, "norm": 0.10, "softmax": 0.10,
    "reduction": 0.10, "embedding": 0.0, "optimizer": 0.0, "memcpy": 0.0,
    "communication": 0.0, "other": 0.10,
}
#: bytes each SM keeps streaming per core cycle (memory-level parallelism), per category: the
#: SMs then draw at most ``n_SM · B · f`` from DRAM (see :mod:`.kernel`). 0 = no limit. The
#: streaming value and :data:`DEFAULT_MLP_Q` are fitted on joulebound's read-only probe of an
#: H200 (2026-12-04, ``research/mlp_probe.py``: 28.9 B per SM-cycle, q = 1.88, bandwidth vs SMs
#: issuing within 3.5 %); tiled GEMMs and attention keep more in flight (asynchronous copies into
#: shared memory): twice that, assumed, not measured.
DEFAULT_MLP_BYTES_PER_CYCLE: dict[str, float] = {
    "gemm": 58.0, "attention": 58.0, "elementwise": 29.0, "norm": 29.0, "softmax": 29.0,
    "reduction": 29.0, "embedding": 29.0, "optimizer": 29.0, "memcpy": 29.0,
    "communication": 0.0, "other": 29.0,
}
#: exponent of the memory-level-parallelism knee (see :data:`DEFAULT_MLP_BYTES_PER_CYCLE`)
DEFAULT_MLP_Q = 1.9
#: categories whose FLOPs run on tensor cores at the kernel's dtype; the rest use the fp32 rate.
TENSOR_CATEGORIES = frozenset({"gemm", "attention"})
#: default effective reuse tile of tensor-core GEMMs (elements): DRAM traffic beyond the
#: compulsory bytes = element size × FLOPs / tile (a 256×128 CTA tile with some L2 reuse).
DEFAULT_GEMM_TILE = 512.0

#: every model parameter with its unit and meaning (``joulebound devices NAME`` lists them).
PARAMETERS: dict[str, str] = {
    "idle_w": "W, static board power with clocks up and nothing running (excl. memory)",
    "core_dyn_w": "W, core dynamic power of a fully busy core at the top clock, V = 1",
    "core_base_frac": "fraction of core_dyn_w drawn by a running but stalled core",
    "mem_static_w": "W, memory power at the top memory clock with no traffic",
    "mem_dyn_w": "W, extra memory power at full DRAM bandwidth, top memory clock",
    "vf": "core voltage-frequency curve (knee MHz, floor voltage)",
    "mem_v": "relative memory voltage vs memory clock (per memory technology)",
    "power_limit_w": "W, enforced board power limit",
    "compute_eff": "achieved fraction of peak FLOP/s, per kernel category",
    "bw_eff": "achieved fraction of DRAM bandwidth, per kernel category",
    "core_mem_frac": "share of memory time that follows the core clock, per category",
    "mlp_bytes_per_cycle": "B per SM per core cycle kept in flight (memory-level parallelism), "
                           "per category; 0 = no knee",
    "mlp_q": "exponent of the memory-level-parallelism knee (smooth maximum)",
    "idle_clk_w": "W, idle clock-tree power at the top core clock (scales as V(f)^2 f)",
    "gemm_tile": "elements, GEMM reuse tile: DRAM bytes = compulsory + size x FLOP / tile",
    "overlap_p": "exponent of the compute/memory overlap (smooth maximum)",
    "launch_overhead_s": "s, fixed time per kernel",
    "auto_core_mhz": "MHz, sustained boost ceiling of the core governor (auto)",
    "auto_mem_eff": "effective memory speed under the memory governor (auto), fraction",
    "auto_power_frac": "extra core dynamic power under the core governor (auto), fraction",
    "auto_mem_power_frac": "extra memory power under the memory governor (auto), fraction",
}


#: per-category parameter tables (addressed as ``"table.category"``)
_TABLES = ("compute_eff", "bw_eff", "core_mem_frac", "mlp_bytes_per_cycle")


@dataclass
class DeviceParams:
    """Model parameters for one GPU (see :data:`PARAMETERS` for units).

    Attributes:
        device: catalog name the parameters belong to.
        idle_w, core_dyn_w, core_base_frac, mem_static_w, mem_dyn_w: power terms (W, fraction).
        vf: the core voltage–frequency curve.
        power_limit_w: enforced board power limit (W); above it the GPU lowers its core clock.
        compute_eff, bw_eff, core_mem_frac: per kernel category (``"other"`` is the fallback).
        mlp_bytes_per_cycle: per category, bytes per SM per core cycle in flight (empty = no
            memory-level-parallelism knee: the linear-λ model of files written before it).
        mlp_q: softness exponent of that knee.
        idle_clk_w: idle clock-tree power (W) at the top core clock, scaling as ``V(f)²·f``:
            what an idle GPU at a locked clock draws above ``idle_w`` (0 = clock-independent).
        gemm_tile: effective GEMM reuse tile (elements); ``0`` = compulsory bytes only.
        overlap_p: exponent of ``(tc**p + tm**p)**(1/p)``; large p = perfect overlap.
        launch_overhead_s: fixed time per kernel (s).
        memory_type: DRAM technology (:mod:`.memory`).
        mem_v: ``[[clock fraction, relative voltage], ...]`` memory voltage curve.
        tested_mem_fracs: memory-clock fractions measured on this device's memory technology.
        auto_core_mhz: the core governor's sustained ceiling (MHz); ``None`` = top of the table.
        auto_mem_eff, auto_power_frac, auto_mem_power_frac: governor inefficiencies (1.0, 0.0
            and 0.0 = none): the memory governor's effective speed, the core governor's extra
            core power and the memory governor's extra memory power.
        provenance: always ``"modeled"``: every model output is modeled.
        calibration: ``"none"`` (datasheet defaults), ``"fit"`` (fitted on measurements),
            ``"transfer"`` (moved from another GPU) or ``"published"`` (calibrated on published
            per-kernel figures).
        sources: parameter (or group, e.g. ``"vf"``, ``"compute_eff"``) -> where it came from.
        heldout: held-out errors of the fit; ``draws``: refits on resampled data, each a
            ``{path: value}`` dict (see module docstring).
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
    bw_eff: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_BW_EFF))
    core_mem_frac: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CORE_MEM_FRAC))
    mlp_bytes_per_cycle: dict[str, float] = field(default_factory=dict)
    mlp_q: float = DEFAULT_MLP_Q
    idle_clk_w: float = 0.0
    gemm_tile: float = DEFAULT_GEMM_TILE
    overlap_p: float = 4.0
    launch_overhead_s: float = 4e-6
    memory_type: str = ""
    mem_v: list[list[float]] = field(default_factory=lambda: [[1.0, 1.0]])
    tested_mem_fracs: list[float] = field(default_factory=lambda: [1.0])
    auto_core_mhz: float | None = None
    auto_mem_eff: float = 1.0
    auto_power_frac: float = 0.0
    auto_mem_power_frac: float = 0.0
    provenance: str = MODELED
    calibration: str = "none"
    sources: dict[str, str] = field(default_factory=dict)
    heldout: dict[str, Any] = field(default_factory=dict)
    draws: list[dict[str, float]] = field(default_factory=list)

    def with_limit(self, power_limit_w: float) -> DeviceParams:
        """A copy with another enforced power limit (W)."""
        return replace(self, power_limit_w=float(power_limit_w))

    # -- per-category lookups ----------------------------------------------------------------
    @staticmethod
    def _cat(table: dict[str, float], category: str) -> float:
        return float(table.get(category, table.get("other", 0.0)))

    def eff(self, category: str) -> float:
        return self._cat(self.compute_eff, category)

    def bw(self, category: str) -> float:
        return self._cat(self.bw_eff, category)

    def lam(self, category: str) -> float:
        return self._cat(self.core_mem_frac, category)

    def mlp(self, category: str) -> float:
        return self._cat(self.mlp_bytes_per_cycle, category)

    # -- parameter paths ---------------------------------------------------------------------
    def get(self, path: str) -> float:
        """The value at ``path`` (see module docstring)."""
        head, _, tail = path.partition(".")
        if head in _TABLES:
            return self._cat(getattr(self, head), tail)
        if head == "vf":
            return float(getattr(self.vf, tail))
        if head == "mem_v":
            return float(self.mem_v[int(tail)][1])
        v = getattr(self, head)
        if v is None:
            raise JouleboundError(f"parameter {path!r} is not set")
        return float(v)

    def set(self, values: dict[str, float]) -> DeviceParams:
        """A copy with the values at the given paths replaced."""
        upd: dict[str, Any] = {}
        vf = self.vf.to_json()
        mem_v = [list(p) for p in self.mem_v]
        tables = {k: dict(getattr(self, k)) for k in _TABLES}
        for path, value in values.items():
            head, _, tail = path.partition(".")
            if head in tables:
                if tail == "*":
                    tables[head] = {k: float(value) for k in tables[head]}
                else:
                    tables[head][tail] = float(value)
            elif head == "vf":
                vf[tail] = float(value)
            elif head == "mem_v":
                mem_v[int(tail)][1] = float(value)
            elif head in PARAMETERS:
                upd[head] = float(value)
            else:
                raise JouleboundError(f"unknown model parameter {path!r}; known: "
                                      f"{', '.join(PARAMETERS)}")
        return replace(self, vf=VFCurve.from_json(vf), mem_v=mem_v, **tables, **upd)

    def defaulted(self) -> list[str]:
        """Parameters (of :data:`PARAMETERS`) that no source names: defaults nobody fitted."""
        named = set()
        for k in self.sources:
            for part in k.replace(",", " ").split():
                named.add(part.split(".")[0])
        return [p for p in PARAMETERS if p not in named]

    def draw(self, i: int) -> DeviceParams:
        """The ``i``-th ensemble member (the parameters refitted on resampled data)."""
        return self.set(self.draws[i % len(self.draws)]) if self.draws else self

    # -- files --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["vf"] = self.vf.to_json()
        return {"schema": SCHEMA, "version": VERSION, **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeviceParams:
        if d.get("schema") != SCHEMA:
            raise JouleboundError(f"not a joulebound device-parameter file (schema {d.get('schema')!r})")
        version = d.get("version", 1)
        d = {k: v for k, v in d.items() if k not in ("schema", "version")}
        if version == 1:     # scalar bw_eff / core_mem_frac, step memory voltage
            d["bw_eff"] = {k: float(d.get("bw_eff", 0.8)) for k in CATEGORY_KEYS}
            d["core_mem_frac"] = {k: float(d.get("core_mem_frac", 0.2)) for k in CATEGORY_KEYS}
            low_v, low_f = float(d.pop("mem_low_v", 0.5)), float(d.pop("mem_low_frac", 0.35))
            d["mem_v"] = [[low_f - 1e-6, low_v], [low_f, 1.0]]
            d["gemm_tile"] = 0.0
        elif version != VERSION:
            raise JouleboundError(f"device-parameter file version {version} is newer than this "
                                  f"joulebound reads ({VERSION}); upgrade joulebound")
        d["vf"] = VFCurve.from_json(d["vf"])
        for key, dflt in (("compute_eff", DEFAULT_COMPUTE_EFF), ("bw_eff", DEFAULT_BW_EFF),
                          ("core_mem_frac", DEFAULT_CORE_MEM_FRAC)):
            table = dict(dflt)
            table.update(d.get(key, {}))
            d[key] = table
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise JouleboundError(f"device-parameter file: unknown field(s) {sorted(unknown)}")
        return cls(**d)


#: idle clock-tree power at the top clock as a share of the board power limit: the measured idle
#: power rises by 22 W on an A100-SXM4-80GB (400 W), 23 W on an A100-PCIe-40GB (250 W) and
#: 48 W on an H100 (700 W) from the lowest to the top core clock (EnergAIzer device files,
#: ``energaizer_device/``): 5.5-9 %, 7 % taken.
IDLE_CLK_FRAC = 0.07


def default_params(spec: DeviceSpec) -> DeviceParams:
    """Uncalibrated but physical parameters from the datasheet figures in ``spec``.

    The board's power budget above idle is split so that a fully compute-bound tensor-core kernel
    at the top clock lands at the power limit (what heavy GEMMs do on A40 / RTX 30xx boards), and a
    bandwidth-bound kernel draws about 60 % of it. The V–f curve is the spec's ``vf_curve`` if
    given, else a floor of 0.72 up to 55 % of the top clock (typical of Ampere boards; the
    A40 stage profiles put the knee near 1000 MHz of 1740). Memory voltage and tested memory
    clocks come from the device's memory technology (:mod:`.memory`). The governor's ceiling is
    the top of the clock table (``auto_core_mhz = None``; the one card calibrated on published
    per-kernel data, the RTX 3080 Ti, sustains 2037 of its 2100 MHz, well above its 1665 MHz
    datasheet boost, so the datasheet boost is no better a default).
    """
    budget = max(spec.power_limit_default_w - spec.idle_power_w, 1.0)
    if spec.vf_curve:
        vf = VFCurve.from_points(spec.vf_curve, spec.max_core_mhz)
        vf_src = "DeviceSpec.vf_curve"
    else:
        vf = VFCurve(knee_mhz=0.55 * spec.max_core_mhz, v_min=0.72, max_mhz=spec.max_core_mhz)
        vf_src = None
    mt = memory.tech(getattr(spec, "memory_type", ""))
    sources = {"idle_w": "DeviceSpec.idle_power_w (catalog)",
               "power_limit_w": "DeviceSpec.power_limit_default_w (catalog)"}
    if vf_src:
        sources["vf"] = vf_src
    return DeviceParams(
        device=spec.name, idle_w=spec.idle_power_w,
        core_dyn_w=0.80 * budget, core_base_frac=0.25,
        mem_static_w=0.06 * budget, mem_dyn_w=0.25 * budget,
        vf=vf, power_limit_w=spec.power_limit_default_w,
        mlp_bytes_per_cycle=dict(DEFAULT_MLP_BYTES_PER_CYCLE),
        idle_clk_w=IDLE_CLK_FRAC * spec.power_limit_default_w,
        memory_type=mt.name, mem_v=[list(p) for p in mt.v_points],
        tested_mem_fracs=list(mt.tested_fracs),
        calibration="none", sources=sources,
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
