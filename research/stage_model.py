"""A SIDE model for validation (not the product's kernel model): the stage-level time/power model
fitted on a few measured clocks (scikit-learn style), checked by ``research/perseus_stage.py``.

:class:`StageModel` models a *stage* (a kernel or a group of kernels, e.g. a pipeline stage's
forward pass) at core clock ``f`` (MHz), memory clock fixed::

    time(f)  = t0 + W / f_eff(f)             t0: memory/overhead part, W: compute work (MHz·s)
    f_eff(f) = (f**-n + f_cap**-n)**(-1/n)     soft power-limit cap (per stage), n = sharpness
    power(f) = softmin(Pc + A · V(f)**2 f/f_max,  P_cap)   same sharpness n as the time cap
    energy   = power · time

Per stage: ``t0, W, f_cap`` come from the measured times at the lowest, middle and highest
calibration clocks (closed form, fixed point for the cap), ``Pc, A`` from the powers at the lowest
and middle clocks; ``P_cap`` is the measured power at the highest clock when that clock is
power-capped (its power is within ``cap_frac`` of the board limit), else the board limit.
Device-level: the voltage–frequency curve (knee, floor) is fitted **across all stages of a GPU**
on the calibration clocks only: it must make every stage's predicted power reach its measured
highest-clock power where the cap begins (capped stages) or at the highest clock (uncapped ones).

Why the cap is *soft* (one sharpness constant ``n`` for time and power): the GPU's limiter acts on
short-window power, so the hottest kernels (GEMMs) of a stage are slowed first while the average
stage power keeps rising — the A100-SXM profiles flatten in time from ~1335 MHz while power still
climbs to the limit at 1410 MHz, and the A40 power approaches its ~291–299 W plateau gradually.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from joulebound.gpumodel.vf import VFCurve


def softmin(f: np.ndarray, f_cap: np.ndarray, n: float) -> np.ndarray:
    """``(f**-n + f_cap**-n)**(-1/n)`` evaluated as ``f · exp(-log(1 + (f/f_cap)**n) / n)`` so that
    large ``n`` neither underflows (``1740**-100`` is below the float range) nor overflows."""
    f = np.asarray(f, float)
    fc = np.asarray(f_cap, float)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_r = np.where(np.isfinite(fc), np.log(f) - np.log(fc), -np.inf)
        return f * np.exp(-np.logaddexp(0.0, n * log_r) / n)


@dataclass
class StageParams:
    """Fitted per-stage parameters (arrays over stages): see :class:`StageModel`."""

    t0: np.ndarray
    W: np.ndarray
    f_cap: np.ndarray
    Pc: np.ndarray
    A: np.ndarray
    P_cap: np.ndarray
    capped: np.ndarray


class StageModel:
    """Stage-level time/energy model with a device-level V–f curve and power cap.

    Parameters:
        max_mhz: the GPU's top core clock (MHz); V(max_mhz) = 1.
        board_limit_w: the enforced board power limit (W).
        sharpness: exponent ``n`` of the soft time and power cap. Three clocks per stage cannot
            identify it; ``research.perseus_stage`` chooses it on another workload's
            measurements of the same GPU (leave-one-model-out; docs/validation.md shows the
            sensitivity). Default 20 (no such data).
        cap_frac: a stage whose highest-clock power is at least ``cap_frac × board_limit_w`` is
            treated as power-capped there.
        vf: a fixed V–f curve; ``None`` fits it (``fit_vf=True``).

    Fitted attributes (after :meth:`fit`): ``vf_`` (VFCurve), ``groups_`` (group labels),
    ``stage_`` (:class:`StageParams`), ``calib_mhz_`` (clocks used per group).
    """

    def __init__(self, max_mhz: float, board_limit_w: float, sharpness: float = 20.0,
                 cap_frac: float = 0.95, vf: VFCurve | None = None, fit_vf: bool = True) -> None:
        self.max_mhz = float(max_mhz)
        self.board_limit_w = float(board_limit_w)
        self.sharpness = float(sharpness)
        self.cap_frac = float(cap_frac)
        self.vf = vf
        self.fit_vf = fit_vf

    # -- fitting ------------------------------------------------------------------------------
    def _time_fit(self, f3: np.ndarray, t3: np.ndarray) -> tuple[np.ndarray, ...]:
        """Closed-form t0, W, f_cap per stage from (lo, mid, hi) clocks/times, shape (S, 3)."""
        n = self.sharpness
        S = f3.shape[0]
        f_cap = np.full(S, np.inf)
        for _ in range(40):
            x = 1.0 / softmin(f3[:, :2], f_cap[:, None], n)
            W = (t3[:, 0] - t3[:, 1]) / (x[:, 0] - x[:, 1])
            t0 = t3[:, 1] - W * x[:, 1]
            with np.errstate(divide="ignore", invalid="ignore"):
                fe = W / np.maximum(t3[:, 2] - t0, 1e-15)
            free = fe >= f3[:, 2] * 0.999
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                cap = (fe ** -n - f3[:, 2] ** -n) ** (-1.0 / n)
            new = np.where(free | ~np.isfinite(cap), np.inf, cap)
            if np.allclose(np.nan_to_num(new, posinf=1e9), np.nan_to_num(f_cap, posinf=1e9),
                           rtol=1e-9):
                f_cap = new
                break
            f_cap = new
        return t0, W, f_cap

    def _power_fit(self, vf: VFCurve, f3: np.ndarray, p3: np.ndarray, f_cap: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        s_lo, s_mid = vf.dynamic_scale(f3[:, 0]), vf.dynamic_scale(f3[:, 1])
        A = (p3[:, 1] - p3[:, 0]) / np.maximum(s_mid - s_lo, 1e-12)
        Pc = p3[:, 0] - A * s_lo
        capped = p3[:, 2] >= self.cap_frac * self.board_limit_w
        P_cap = np.where(capped, p3[:, 2], np.inf)
        f_star = np.where(capped, softmin(f3[:, 2], f_cap, self.sharpness), f3[:, 2])
        resid = (Pc + A * vf.dynamic_scale(f_star)) / p3[:, 2] - 1.0
        # a power-capped stage whose times show no slow-down (noisy profile): the uncapped curve
        # must merely reach the cap by the highest clock (one-sided constraint)
        loose = capped & ~np.isfinite(f_cap)
        resid = np.where(loose, np.minimum(resid, 0.0), resid)
        return Pc, A, P_cap, capped, resid

    def fit(self, freq_mhz: np.ndarray, time_s: np.ndarray, energy_j: np.ndarray,
            groups: np.ndarray | None = None) -> StageModel:
        """Fit on measurements ``(freq_mhz, time_s, energy_j)``, one row per (stage, clock).

        Each group (stage) must have at least 3 clocks; its lowest, median and highest clocks are
        used (pass exactly those three for the 3-clock protocol).
        """
        f = np.asarray(freq_mhz, float)
        t = np.asarray(time_s, float)
        e = np.asarray(energy_j, float)
        g = np.zeros(len(f), int) if groups is None else np.asarray(groups)
        labels = list(dict.fromkeys(g.tolist()))
        f3 = np.empty((len(labels), 3))
        t3 = np.empty_like(f3)
        p3 = np.empty_like(f3)
        for i, lab in enumerate(labels):
            m = g == lab
            order = np.argsort(f[m])
            if order.size < 3:
                raise ValueError(f"stage {lab!r}: need at least 3 clocks to calibrate, got {order.size}")
            pick = order[[0, order.size // 2, order.size - 1]]
            f3[i], t3[i] = f[m][pick], t[m][pick]
            p3[i] = e[m][pick] / t[m][pick]
        t0, W, f_cap = self._time_fit(f3, t3)
        if self.vf is not None and not self.fit_vf:
            vf = self.vf
        else:
            vf = self._fit_vf(f3, p3, f_cap)
        Pc, A, P_cap, capped, _ = self._power_fit(vf, f3, p3, f_cap)
        self.vf_ = vf
        self.groups_ = labels
        self.calib_mhz_ = f3
        self.stage_ = StageParams(t0, W, f_cap, Pc, A, P_cap, capped)
        return self

    def _fit_vf(self, f3: np.ndarray, p3: np.ndarray, f_cap: np.ndarray) -> VFCurve:
        """Device-level knee/floor: grid search then Nelder–Mead on the calibration residuals."""
        from scipy.optimize import minimize

        fm = self.max_mhz

        def loss(knee: float, vmin: float) -> float:
            if not (0.3 * fm < knee < 0.99 * fm and 0.3 < vmin <= 1.0):
                return 1e9
            r = self._power_fit(VFCurve(knee, vmin, fm), f3, p3, f_cap)[4]
            return float(np.mean(r ** 2))

        # the 39 x 17 grid (all inside the loss's bounds) in one broadcast evaluation: knee and
        # floor as (G, 1) columns against the (S,) stages; the first minimum, as min() over the list
        knees, vmins = np.meshgrid(np.linspace(0.4 * fm, 0.97 * fm, 39), np.linspace(0.5, 0.98, 17),
                                   indexing="ij")
        knees, vmins = knees.ravel(), vmins.ravel()
        r = self._power_fit(VFCurve(knees[:, None], vmins[:, None], fm),  # type: ignore[arg-type]
                            f3, p3, f_cap)[4]
        best = int(np.argmin(np.mean(r ** 2, axis=1)))
        k0, v0 = float(knees[best]), float(vmins[best])
        sol = minimize(lambda x: loss(x[0], x[1]), [k0, v0], method="Nelder-Mead",
                       options={"xatol": 0.5, "fatol": 1e-9, "maxiter": 400})
        k, v = (sol.x if sol.fun <= loss(k0, v0) else (k0, v0))
        return VFCurve(float(k), float(v), fm)

    # -- prediction ---------------------------------------------------------------------------
    def _index(self, groups: np.ndarray | None, n: int) -> np.ndarray:
        if groups is None:
            return np.zeros(n, int)
        pos = {lab: i for i, lab in enumerate(self.groups_)}
        try:
            return np.array([pos[x] for x in np.asarray(groups).tolist()], int)
        except KeyError as exc:
            raise KeyError(f"stage {exc.args[0]!r} was not fitted") from None

    def predict(self, freq_mhz: np.ndarray, groups: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(time_s, energy_j)`` at ``freq_mhz`` for the given stages."""
        f = np.asarray(freq_mhz, float)
        i = self._index(groups, len(f))
        st = self.stage_
        t = st.t0[i] + st.W[i] / softmin(f, st.f_cap[i], self.sharpness)
        p = softmin(st.Pc[i] + st.A[i] * self.vf_.dynamic_scale(f), st.P_cap[i],
                     self.sharpness)
        return t, p * t

    def predict_power(self, freq_mhz: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        """Predicted average power (W)."""
        t, e = self.predict(freq_mhz, groups)
        return e / t

    def compute_fraction(self) -> np.ndarray:
        """Fraction of each stage's time at the top clock that scales with the core clock."""
        st = self.stage_
        tc = st.W / softmin(np.full_like(st.W, self.max_mhz), st.f_cap, self.sharpness)
        return tc / (st.t0 + tc)
