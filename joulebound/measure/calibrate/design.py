"""Which clock pairs to measure each kernel at (the experimental design of few-clock calibration).

Three measurements per kernel identify its three free model parameters — compute time, memory
time (at the top clocks) and power activity (:func:`~joulebound.gpumodel.fit_measured.fit_kernel`)
— when the pairs move the two clock domains differently:

* **auto**: the default governor (what the kernel runs at today; also the read-only baseline);
* **low core at the top memory clock**: slows the compute part only. The core clock is the one
  the model expects to be the kernel's most energy-efficient at the top memory clock, but at most
  ``core_frac_max`` (75 %) of the top core clock and at least the lowest supported one, so that
  the compute part is seen to stretch;
* **top core at a low memory clock**: slows the memory part only. The memory clock is the lowest
  one the model was tested at on this memory technology (``planning_configs``); a card with one
  memory clock (H100/H200 HBM) gets a middle core clock at the top memory clock instead.

Every pair comes from the card's *supported* table (:func:`validate_pair`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from joulebound.core.clocks import ClockConfig, is_supported
from joulebound.core.errors import JouleboundError


def validate_pair(config: ClockConfig, supported: Mapping[int, Sequence[int]]) -> ClockConfig:
    """``config`` when the card supports it (auto, or a core clock listed at that memory clock;
    one domain may be auto); raises :class:`JouleboundError` naming the table otherwise."""
    if is_supported(config, supported):
        return config
    mems = sorted(supported, reverse=True)
    if config.mem_mhz is not None and config.mem_mhz not in supported:
        raise JouleboundError(f"memory clock {config.mem_mhz} MHz is not supported by this GPU "
                              f"(supported: {mems} MHz)")
    at = [config.mem_mhz] if config.mem_mhz is not None else mems
    cores = sorted(supported[at[0]])
    raise JouleboundError(f"core clock {config.core_mhz} MHz is not supported at memory "
                          f"{at[0]} MHz (supported: {cores[0]}-{cores[-1]} MHz, "
                          f"{len(cores)} clocks)")


def nearest(clocks: Sequence[int], mhz: float) -> int:
    """The supported clock closest to ``mhz``."""
    arr = np.asarray(sorted(clocks), float)
    return int(arr[int(np.argmin(np.abs(arr - mhz)))])


def design_pairs(energy_by_core: Mapping[int, float] | None, supported: Mapping[int, Sequence[int]],
                 tested_mems: Sequence[int], n: int = 3, core_frac_max: float = 0.75
                 ) -> list[ClockConfig]:
    """Up to ``n`` (<= 3) pairs for one kernel (see the module docs).

    Args:
        energy_by_core: the model's energy (J) of the kernel at each core clock of the top memory
            clock (``None``: no model guidance, use ``core_frac_max`` of the top clock).
        supported: the card's table (memory MHz -> core MHz).
        tested_mems: memory clocks the model considers (lowest used for the memory pair).
        n: pairs wanted (1 = auto only).
    """
    if n < 1:
        raise JouleboundError("at least one clock pair per kernel")
    pairs = [ClockConfig()]
    top_mem = max(supported)
    cores = sorted(supported[top_mem])
    f_max = cores[-1]
    cap = core_frac_max * f_max
    if energy_by_core:
        best = min(energy_by_core, key=lambda c: energy_by_core[c])
        want = min(best, cap)
    else:
        want = cap
    lo_core = nearest([c for c in cores if c <= cap] or cores, want)
    pairs.append(ClockConfig(lo_core, top_mem))
    low_mems = sorted(m for m in tested_mems if m in supported and m != top_mem)
    if low_mems:
        m = low_mems[0]
        pairs.append(ClockConfig(max(supported[m]), m))
    else:
        pairs.append(ClockConfig(nearest(cores, 0.5 * (lo_core + f_max)), top_mem))
    out = [validate_pair(p, supported) for p in dict.fromkeys(pairs)]
    return out[:n]
