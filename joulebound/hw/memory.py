"""Memory technologies: how DRAM voltage (hence power) follows the memory clock, and which memory
clocks have ever been measured on that technology.

The memory-clock dimension of the GPU model rests on little public data, so every technology
records where its curve comes from and which clock fractions (memory clock / top memory clock)
were actually measured on it:

* **GDDR5** — GTX Titan X: time and board power at 810 and 3505 MHz (gpuPTXModel, Guerreiro et
  al., IEEE Access 2019) and power at 810/3300/3505/4005 MHz (gpmTOOL, HPCA'18); the HPCA'18
  fit gives a relative memory voltage of 0.5 at 810 MHz and 1.0 from 3300 MHz.
* **GDDR6X** — RTX 3080 Ti: per-kernel time/energy changes at 9501, 9251 and 5001 MHz
  (Spaan et al., arXiv 2601.08539, Table 1); 810 and 405 MHz were swept there but were never best
  for any kernel or pass, and no figure at those clocks was published.
* **GDDR6**, **HBM2/HBM2e/HBM3/HBM3e** — measured only at the top memory clock (Perseus A40
  and A100 profiles; HBM boards expose a single memory clock anyway).

A clock fraction outside ``tested_fracs`` is *untested*: the planner leaves those memory clocks
out unless asked (``--allow-untested-clocks``), because nothing checks the model there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MemoryTech:
    """One DRAM technology.

    Attributes:
        name: e.g. ``"GDDR6X"``.
        v_points: ``((clock fraction, relative voltage), ...)`` ascending in fraction, relative
            voltage 1.0 at the top clock; linear in between, constant outside.
        tested_fracs: memory-clock fractions (of the top clock) measured on this technology.
        source: where the curve and the tested clocks come from.
    """

    name: str
    v_points: tuple[tuple[float, float], ...]
    tested_fracs: tuple[float, ...]
    source: str


#: a measured clock counts as "the same" clock on another board within this relative distance
#: of its fraction (the RTX 3090's 5001 of 9751 MHz = 0.513 vs the 3080 Ti's 5001/9501 = 0.526).
FRACTION_TOLERANCE = 0.04

TECHS: dict[str, MemoryTech] = {
    "GDDR5": MemoryTech("GDDR5", ((0.23, 0.5), (0.8, 1.0)), (0.202, 0.231, 0.824, 0.875, 1.0),
                        "GTX Titan X: Guerreiro et al. HPCA'18 fit (0.5 at 810 MHz, 1.0 from "
                        "3300 MHz); gpuPTXModel time and power at 810/3505 MHz"),
    "GDDR6X": MemoryTech("GDDR6X", ((0.526, 0.9), (1.0, 1.0)), (0.526, 0.974, 1.0),
                         "RTX 3080 Ti: Spaan et al. Table 1 (9501/9251/5001 MHz); the default "
                         "curve is replaced by the calibration in params/rtx3080ti.json"),
    "GDDR6": MemoryTech("GDDR6", ((0.526, 0.9), (1.0, 1.0)), (1.0,),
                        "no memory-clock measurement: measured at the top clock only (Perseus "
                        "A40); curve assumed as GDDR6X"),
    "HBM2": MemoryTech("HBM2", ((1.0, 1.0),), (1.0,), "single memory clock"),
    "HBM2e": MemoryTech("HBM2e", ((1.0, 1.0),), (1.0,), "single memory clock"),
    "HBM3": MemoryTech("HBM3", ((1.0, 1.0),), (1.0,), "single memory clock"),
    "HBM3e": MemoryTech("HBM3e", ((1.0, 1.0),), (1.0,), "single memory clock"),
}
#: used for a device whose catalog entry names no memory type
UNKNOWN = MemoryTech("unknown", ((1.0, 1.0),), (1.0,), "memory type unknown: no memory-clock data")


def tech(name: str | None) -> MemoryTech:
    """The :class:`MemoryTech` called ``name`` (case-insensitive); :data:`UNKNOWN` otherwise."""
    if not name:
        return UNKNOWN
    for k, v in TECHS.items():
        if k.lower() == str(name).lower():
            return v
    return UNKNOWN


def relative_voltage(points: list[tuple[float, float]] | tuple[tuple[float, float], ...],
                     frac: np.ndarray) -> np.ndarray:
    """Relative memory voltage at memory-clock fraction(s) ``frac`` (piecewise linear)."""
    pts = sorted((float(a), float(b)) for a, b in points)
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    return np.interp(np.asarray(frac, float), x, y)


def tested_clocks(mem_clocks_mhz: list[int], max_mem_mhz: float,
                  fracs: tuple[float, ...] | list[float]) -> list[int]:
    """The memory clocks (MHz) whose fraction of ``max_mem_mhz`` is within
    :data:`FRACTION_TOLERANCE` of a tested fraction."""
    out = []
    for m in mem_clocks_mhz:
        r = m / max_mem_mhz
        if any(abs(r - f) <= FRACTION_TOLERANCE * max(f, 1e-9) for f in fracs):
            out.append(int(m))
    return out
