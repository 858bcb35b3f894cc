"""Carbon: gCO2e of an energy figure, from a carbon intensity given as a number or a region code.

``--carbon-intensity 350`` (gCO2e per kWh) or ``--carbon-intensity FR`` (the shipped table
``data/carbon_intensity.toml``: national grid averages for 2023 from Our World in Data / Ember,
labeled published). gCO2e = kWh × intensity, with the provenance of the energy it is computed
from (measured energy × a published intensity is still an estimate of emissions: the grid
average is not your supplier's).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources

from joulebound.core.errors import JouleboundError, did_you_mean

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class CarbonIntensity:
    """A carbon intensity: ``g_per_kwh`` (gCO2e/kWh), the region it is for ("" for a number the
    user gave) and its source."""

    g_per_kwh: float
    region: str
    source: str

    def describe(self) -> str:
        where = f"{self.region}, " if self.region else ""
        return f"{self.g_per_kwh:g} gCO2e/kWh ({where}{self.source})"

    def grams(self, energy_j: float | None) -> float | None:
        """gCO2e of ``energy_j`` (J); ``None`` for ``None``."""
        return None if energy_j is None else energy_j / J_PER_KWH * self.g_per_kwh


def table() -> tuple[dict[str, float], str]:
    """The shipped region table (code -> gCO2e/kWh) and its source."""
    path = resources.files("joulebound.energy") / "data" / "carbon_intensity.toml"
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    return {k.upper(): float(v) for k, v in doc["regions"].items()}, str(doc["source"])


def carbon_intensity(value: str | float | None) -> CarbonIntensity | None:
    """Parse ``--carbon-intensity``: a number (gCO2e/kWh) or a region code of the table."""
    if value is None or value == "":
        return None
    try:
        g = float(value)
    except (TypeError, ValueError):
        regions, source = table()
        code = str(value).strip().upper()
        if code not in regions:
            raise JouleboundError(
                f"unknown carbon-intensity region {value!r}.{did_you_mean(code, list(regions))} "
                "Or give gCO2e per kWh, e.g. --carbon-intensity 350") from None
        return CarbonIntensity(regions[code], code, f"published: {source}")
    if not math.isfinite(g) or g < 0:
        raise JouleboundError(f"--carbon-intensity must be >= 0 gCO2e/kWh, got {value!r}")
    return CarbonIntensity(g, "", "given by the user")
