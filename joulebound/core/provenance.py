"""Provenance labels carried by every number the tool prints (the honesty rules: every figure is
measured, modeled or published, never unlabeled).

- ``measured``: read from a sensor on real hardware (NVML energy counter, RAPL, a dataset's measured
  column);
- ``modeled``: computed by joulebound's own models (device model, scaling law, solver);
- ``published``: a figure from a paper, always shown beside ours with its citation, never as our
  output.
"""

from __future__ import annotations

from typing import Literal

from joulebound.core.vocab import PROVENANCES
from joulebound.core.vocab import Provenance as Label

Provenance = Literal["measured", "modeled", "published"]
MEASURED: Provenance = Label.MEASURED.value  # type: ignore[assignment]
MODELED: Provenance = Label.MODELED.value  # type: ignore[assignment]
PUBLISHED: Provenance = Label.PUBLISHED.value  # type: ignore[assignment]
ALL: tuple[Provenance, ...] = PROVENANCES  # type: ignore[assignment]
#: a table (a characterization, a plan's cells) holding both measured and modeled figures
MEASURED_AND_MODELED = "measured+modeled"
#: cells "measured" on the simulated GPU (``calibrate --backend simulated``): the device model
#: with sensor noise, not hardware -- modeled, whatever the measurement code path
SIMULATED = "modeled (simulated GPU)"


def check(value: str) -> Provenance:
    """Validate a provenance label."""
    if value not in ALL:
        raise ValueError(f"provenance must be one of {ALL}, got {value!r}")
    return value  # type: ignore[return-value]
