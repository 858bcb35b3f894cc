"""Check (c): GTX Titan X board power over 16 core × 4 memory clocks (Guerreiro et al.).

SIDE MODEL: checks a board-power model of its own, not the product's kernel model.

Data (``guerreiro/``, hpc-ulisboa/gpupowermodel, BSD-3-Clause with a citation clause — cite
Guerreiro, Ilic, Roma, Tomás, HPCA'18 and TPDS 30(11) 2019):

* training: ``micro_gtxtitanx.csv`` — 102 microbenchmarks × 64 (core, memory) clock pairs, board
  power (W) and 12 component utilisations;
* test: ``titanx_real_allFsPower_HPCAandCF.csv`` — 35 real applications × the same 64 pairs,
  measured power, and 8 utilisations measured at the default clocks (975 / 3505 MHz).

Our model (the same physics as :mod:`joulebound.gpumodel.kernel`, here with utilisations as
activity): ``P = p0 + Vc·(a_c + Vc·fc'·(b_c + Σ w_i U_i)) + Vm·(a_m + Vm·fm'·(b_m + w_D U_D))``
with ``fc' = fc/fc_default``, ``fm' = fm/fm_default``, the core V–f curve a knee/floor
:class:`~joulebound.gpumodel.vf.VFCurve` and the memory voltage ``mem_low_v`` below 35 % of the
top memory clock (1.0 above) — the non-linear parameters are fitted with the linear weights
(non-negative least squares) on the microbenchmarks only. The micro file's 12 components are
merged into the test file's 8 (FP32 ADD/MUL/FMA -> SP, FP64 ADD/MUL/FMA -> DP).

This is joulebound's only real memory-clock data; the fitted memory voltage ratio and the memory
share of dynamic power set the memory-clock behaviour of the kernel model
(``DeviceParams.mem_low_v``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from joulebound.gpumodel.vf import VFCurve
from research.result import CheckResult

#: TPDS'19 abstract: "the scaling-factor power model achieves an average prediction error of ...
#: 4.6 percent (GTX Titan X)" — on their 42-benchmark set, which overlaps but is not identical to
#: the 35 applications in this file.
PUBLISHED = {"value": 4.6, "source": "Guerreiro et al., IEEE TPDS 30(11):2494-2506, 2019 "
             "(abstract; scaling-factor model, GTX Titan X, 42 benchmarks)"}
COMPONENTS = ("SP", "INT", "DP", "SFU", "CF", "L2", "Shared", "DRAM")


@dataclass
class PowerTable:
    power: np.ndarray     # W
    fc: np.ndarray        # MHz
    fm: np.ndarray        # MHz
    util: np.ndarray      # (N, 8) in COMPONENTS order
    app: np.ndarray       # app name per row ("" for microbenchmarks: index)


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = Path(path).read_text().splitlines()
    if len(lines) < 5:
        raise ValueError(f"{path}: expected 4 header lines and data")
    header = [lines[0], lines[1], lines[2], lines[3]]
    rows = [ln.split(",") for ln in lines[4:] if ln.strip()]
    return header, rows


def load_micro(data: Path) -> PowerTable:
    header, rows = _read(Path(data) / "guerreiro" / "micro_gtxtitanx.csv")
    a = np.array(rows, float)
    u = a[:, 3:]
    if u.shape[1] != 12:
        raise ValueError("micro_gtxtitanx.csv: expected 12 utilisation columns")
    merged = np.c_[u[:, 0:3].sum(1), u[:, 3], u[:, 4:7].sum(1), u[:, 7], u[:, 8], u[:, 9],
                   u[:, 10], u[:, 11]]
    # one microbenchmark = one utilisation vector
    _, bench = np.unique(u, axis=0, return_inverse=True)
    return PowerTable(a[:, 0], a[:, 1], a[:, 2], merged, bench.reshape(-1).astype(str))


def load_real(data: Path) -> PowerTable:
    header, rows = _read(Path(data) / "guerreiro" / "titanx_real_allFsPower_HPCAandCF.csv")
    app = np.array([r[0] for r in rows])
    a = np.array([r[1:] for r in rows], float)
    if a.shape[1] != 3 + len(COMPONENTS):
        raise ValueError("titanx_real_allFsPower_HPCAandCF.csv: expected 8 utilisation columns")
    return PowerTable(a[:, 0], a[:, 1], a[:, 2], a[:, 3:], app)


FC_DEF, FM_DEF, FC_MAX, FM_MAX = 975.0, 3505.0, 1164.0, 4005.0


class TitanXPowerModel:
    """Board power from utilisations at (core, memory) clocks; ``fit`` / ``predict``."""

    def _design(self, t: PowerTable, knee: float, vmin: float, mlow: float) -> np.ndarray:
        vf = VFCurve(knee, vmin, FC_MAX)
        vc = vf(t.fc) / vf(FC_DEF)
        vm = np.where(t.fm < 0.35 * FM_MAX, mlow, 1.0)
        fcr, fmr = t.fc / FC_DEF, t.fm / FM_DEF
        core = vc[:, None] ** 2 * fcr[:, None] * t.util[:, :7]
        return np.c_[np.ones_like(vc), vc, vm, vc ** 2 * fcr, vm ** 2 * fmr, core,
                     (vm ** 2 * fmr) * t.util[:, 7]]

    def fit(self, t: PowerTable) -> TitanXPowerModel:
        from scipy.optimize import minimize, nnls

        def solve(x: np.ndarray) -> tuple[float, np.ndarray]:
            X = self._design(t, *x)
            w, _ = nnls(X / t.power[:, None], np.ones_like(t.power))
            r = X @ w / t.power - 1
            return float(np.mean(r ** 2)), w

        grid = [(k, v, m) for k in (700.0, 800.0, 880.0, 950.0) for v in (0.8, 0.9)
                for m in (0.5, 0.7, 0.9)]
        x0 = min(grid, key=lambda x: solve(np.array(x))[0])
        sol = minimize(lambda x: solve(x)[0] if (500 < x[0] < 1150 and 0.5 < x[1] <= 1
                                                 and 0.2 < x[2] <= 1) else 1e9,
                       x0, method="Nelder-Mead", options={"xatol": 1e-3, "maxiter": 300})
        self.knee_, self.vmin_, self.mem_low_v_ = (float(v) for v in sol.x)
        self.coef_ = solve(sol.x)[1]
        return self

    def predict(self, t: PowerTable) -> np.ndarray:
        return self._design(t, self.knee_, self.vmin_, self.mem_low_v_) @ self.coef_


class FreeVoltageModel(TitanXPowerModel):
    """Ablation: the same power equation with a free relative voltage per core clock and per
    memory clock (gpmTOOL-style, 20 voltages) instead of the knee curve."""

    def _design_v(self, t: PowerTable, vcs: np.ndarray, vms: np.ndarray) -> np.ndarray:
        vc = vcs[np.searchsorted(self.fcs_, t.fc)]
        vm = vms[np.searchsorted(self.fms_, t.fm)]
        fcr, fmr = t.fc / FC_DEF, t.fm / FM_DEF
        core = vc[:, None] ** 2 * fcr[:, None] * t.util[:, :7]
        return np.c_[np.ones_like(vc), vc, vm, vc ** 2 * fcr, vm ** 2 * fmr, core,
                     (vm ** 2 * fmr) * t.util[:, 7]]

    def fit(self, t: PowerTable) -> FreeVoltageModel:
        from scipy.optimize import least_squares, nnls

        self.fcs_, self.fms_ = np.unique(t.fc), np.unique(t.fm)
        nc = len(self.fcs_)

        def weights(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            X = self._design_v(t, x[:nc], x[nc:])
            return X, nnls(X / t.power[:, None], np.ones_like(t.power))[0]

        def resid(x: np.ndarray) -> np.ndarray:
            X, w = weights(x)
            return X @ w / t.power - 1

        sol = least_squares(resid, np.ones(nc + len(self.fms_)), bounds=(0.3, 2.0))
        self.v_ = sol.x
        self.coef_ = weights(sol.x)[1]
        return self

    def predict(self, t: PowerTable) -> np.ndarray:
        nc = len(self.fcs_)
        return self._design_v(t, self.v_[:nc], self.v_[nc:]) @ self.coef_


def run(data: Path) -> tuple[list[CheckResult], TitanXPowerModel]:
    micro, real = load_micro(data), load_real(data)
    model = TitanXPowerModel().fit(micro)
    pred = model.predict(real)
    note = (f"trained on {len(np.unique(micro.app))} microbenchmarks x 64 clock pairs, tested on "
            f"{len(np.unique(real.app))} real applications; fitted core V-f knee "
            f"{model.knee_:.0f} MHz floor {model.vmin_:.3f}, memory voltage at 810 MHz "
            f"{model.mem_low_v_:.2f} x")
    out = [CheckResult.from_arrays(
        "guerreiro", "GTX Titan X", "35 real apps (all 64 clock pairs)", None, None, pred,
        real.power, energy_quantity="power", published=PUBLISHED, note=note,
        points={"x": real.fc, "fm": real.fm, "e_meas": real.power, "e_pred": pred})]
    free = FreeVoltageModel().fit(micro)
    out.append(CheckResult.from_arrays(
        "guerreiro", "GTX Titan X", "ablation: free voltage per clock", None, None,
        free.predict(real), real.power, energy_quantity="power",
        note="same equation, 20 free voltages (gpmTOOL-style) instead of the knee curve"))
    for fm in sorted(set(real.fm.tolist())):
        k = real.fm == fm
        out.append(CheckResult.from_arrays(
            "guerreiro", "GTX Titan X", f"real apps, memory {fm:.0f} MHz", None, None, pred[k],
            real.power[k], energy_quantity="power", note="subset of the row above"))
    return out, model
