"""``MCKPSolution``: what every knapsack solver (fast, core MILP, exact MILP) returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MCKPSolution:
    """Result of one MCKP solve.

    Attributes:
        choice: (G,) chosen column (configuration index) per group.
        time: total time of the choice (s, or the constrained quantity's unit).
        energy: total energy (J, or the minimised quantity's unit).
        lower_bound: LP-relaxation lower bound on the optimal energy (J); NaN when not computed.
        multiplier: critical Lagrange multiplier (J per s); 0 when the budget does not bind.
        method: how the returned solution was obtained (``"greedy"``, ``"greedy+repair"``,
            ``"core-milp"``, ``"milp"``, ``"unconstrained"``).
        time_limit_s: the wall-clock limit (s) the exact solver (HiGHS) ran under; ``None``
            when no exact solver ran.
        time_limit_hit: whether HiGHS stopped at that limit (its incumbent was used, or the
            greedy kept when it had none); the certified :attr:`gap_bound` still holds.
    """

    choice: np.ndarray
    time: float
    energy: float
    lower_bound: float
    multiplier: float
    method: str
    time_limit_s: float | None = None
    time_limit_hit: bool = False

    @property
    def gap_bound(self) -> float:
        """Relative distance to the LP lower bound (>= the true optimality gap)."""
        if not np.isfinite(self.lower_bound) or self.lower_bound <= 0:
            return float("nan")
        return max(0.0, self.energy / self.lower_bound - 1.0)
