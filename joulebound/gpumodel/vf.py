"""Voltage–frequency curves (relative voltage, 1.0 at the top core clock).

Real GPUs hold the core voltage at a floor below a "knee" clock and raise it roughly linearly
above it (Guerreiro et al., HPCA'18, Fig. 3; the GTX Titan X curve in ``../shared/data/guerreiro``
is flat at 0.973 from 595 to 823 MHz and rises to 1.127 at 1164 MHz). Dynamic power scales with
``V(f)**2 * f``, so below the knee it is linear in the clock and above it nearly cubic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VFCurve:
    """Piecewise-linear relative voltage: ``v_min`` up to ``knee_mhz``, then linear to 1.0 at
    ``max_mhz``. A smooth corner (softplus of width ``smooth_mhz``) keeps fits well behaved.

    Attributes:
        knee_mhz: clock (MHz) where the voltage starts rising.
        v_min: relative voltage on the flat part (0 < v_min <= 1).
        max_mhz: clock (MHz) where the relative voltage is 1.0.
        smooth_mhz: width (MHz) of the rounded corner at the knee.
    """

    knee_mhz: float
    v_min: float
    max_mhz: float
    smooth_mhz: float = 30.0

    def __call__(self, f_mhz: np.ndarray | float) -> np.ndarray:
        """Relative voltage at core clock(s) ``f_mhz`` (MHz); same shape as the input."""
        f = np.asarray(f_mhz, dtype=float)
        w = max(self.smooth_mhz, 1e-6)
        # softplus((f - knee)/w) * w ~ max(f - knee, 0) with a rounded corner
        over = w * np.logaddexp(0.0, (f - self.knee_mhz) / w)
        over_max = w * np.logaddexp(0.0, (self.max_mhz - self.knee_mhz) / w)
        # normalise so that v(max) == 1 exactly
        return self.v_min + (1.0 - self.v_min) * over / over_max

    def dynamic_scale(self, f_mhz: np.ndarray | float) -> np.ndarray:
        """``(V(f)/V(fmax))**2 * f/fmax``: dynamic power at ``f`` relative to the top clock."""
        f = np.asarray(f_mhz, dtype=float)
        return self(f) ** 2 * (f / self.max_mhz)

    def dynamic_scale_and_slope(self, f_mhz: np.ndarray | float
                                ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`dynamic_scale` at ``f_mhz`` and its derivative in ``f`` (per MHz), from one
        softplus: ``d/df (V²·f/fmax) = (2·V·V'·f + V²)/fmax`` with ``V' = (1 - v_min)·σ(z)/over_max``
        (σ the logistic function, the softplus's derivative)."""
        f = np.asarray(f_mhz, dtype=float)
        w = max(self.smooth_mhz, 1e-6)
        z = (f - self.knee_mhz) / w
        sp = np.logaddexp(0.0, z)
        over_max = w * np.logaddexp(0.0, (self.max_mhz - self.knee_mhz) / w)
        v = self.v_min + (1.0 - self.v_min) * (w * sp) / over_max
        dv = (1.0 - self.v_min) * np.exp(z - sp) / over_max
        return v ** 2 * (f / self.max_mhz), (2.0 * v * dv * f + v * v) / self.max_mhz

    def to_json(self) -> dict[str, float]:
        return {"knee_mhz": self.knee_mhz, "v_min": self.v_min, "max_mhz": self.max_mhz,
                "smooth_mhz": self.smooth_mhz}

    @classmethod
    def from_json(cls, d: dict[str, float]) -> VFCurve:
        return cls(float(d["knee_mhz"]), float(d["v_min"]), float(d["max_mhz"]),
                   float(d.get("smooth_mhz", 30.0)))

    @classmethod
    def from_points(cls, points: list[tuple[int, float]], max_mhz: float) -> VFCurve:
        """Fit the knee form to a tabulated ``[(MHz, relative V), ...]`` curve (e.g. a
        ``DeviceSpec.vf_curve``) by least squares over knee position and floor voltage."""
        from scipy.optimize import least_squares

        f = np.array([p[0] for p in points], float)
        v = np.array([p[1] for p in points], float)
        vmax = np.interp(max_mhz, f, v)
        v = v / vmax

        def resid(x: np.ndarray) -> np.ndarray:
            return cls(x[0], x[1], max_mhz)(f) - v

        x0 = np.array([np.median(f), max(min(v.min(), 0.99), 0.3)])
        sol = least_squares(resid, x0, bounds=([f.min() - 1, 0.2], [max_mhz - 1, 1.0]))
        return cls(float(sol.x[0]), float(sol.x[1]), max_mhz)
