"""Energy-law estimators recover known coefficients from synthetic data."""

from __future__ import annotations

import numpy as np
import pytest
from _law_synth import synth

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.jobs.laws import (
    AdditiveRoofline,
    EfficiencyModel,
    PaperLaw,
    PowerLaw,
    PreRunLaw,
    make_law,
    prepare,
)


def test_powerlaw_recovers_exponents():
    df = prepare(synth(), need_energy=False)
    rng = np.random.default_rng(1)
    df["energy_j"] = np.exp(2.0 + 0.3 * np.log(df["C_tok"]) + 0.7 * np.log(df["M"])
                            + rng.normal(0, 0.02, len(df)))
    law = PowerLaw().fit(df)
    coef = dict(zip(law.terms_, law.coef_, strict=True))
    assert coef["log C"] == pytest.approx(0.3, abs=0.02)
    assert coef["log M"] == pytest.approx(0.7, abs=0.02)
    assert law.score(df) > 0.99
    tab = law.coef_table()
    row = tab[tab.term == "log M"].iloc[0]
    assert row.ci95_lo < 0.7 < row.ci95_hi


def test_paper_law_recovers_eta_exponent_and_strategy_term():
    df = synth(600)
    df["strategy"] = np.where(np.arange(len(df)) % 3 == 0, "single", np.where(np.arange(len(df)) % 3 == 1, "fsdp", "tp"))
    df["gpus"] = np.where(df["strategy"] == "single", 1, 4)
    d = prepare(df, need_energy=False)
    rng = np.random.default_rng(2)
    eta = rng.uniform(0.05, 0.6, len(d))
    d["time_s"] = d["F_train"] / (d["gpus"] * d["peak_flops"] * eta)
    psi = np.where(d["strategy"] == "tp", 0.25, 0.0)
    d["energy_j"] = np.exp(-3 + 0.2 * np.log(d["C_tok"]) + 0.8 * np.log(d["M"]) - 1.06 * np.log(eta)
                           + psi + rng.normal(0, 0.01, len(d)))
    law = PaperLaw().fit(d)
    coef = dict(zip(law.terms_, law.coef_, strict=True))
    assert coef["log eta"] == pytest.approx(-1.06, abs=0.02)
    assert coef["log C"] == pytest.approx(0.2, abs=0.02)
    assert coef["strategy[tp]"] - coef["strategy[fsdp]"] == pytest.approx(0.25, abs=0.02)
    assert law.cov_type_ == "cluster(family)"
    with pytest.raises(JouleboundError, match="speedup"):
        make_law("paper-speedup").fit(d)  # no speedup column: a clear error
    d["speedup"] = np.where(d["gpus"] > 1, 4 * eta / eta.max(), np.nan)
    sp = make_law("paper-speedup").fit(d)
    assert "log eta" in sp.terms_


def test_additive_roofline_recovers_nonnegative_coefficients():
    d = prepare(synth(), need_energy=False)
    d["energy_j"] = 3e-12 * d["F_train"] + 2e-7 * d["M"] + 5.0
    law = AdditiveRoofline().fit(d)
    eps_c, eps_m, e0 = law.coefs_["a100-pcie-80gb"]
    assert eps_c == pytest.approx(3e-12, rel=0.02)
    assert eps_m == pytest.approx(2e-7, rel=0.05)
    assert e0 == pytest.approx(5.0, rel=0.1)
    assert np.allclose(law.predict(d), d["energy_j"], rtol=1e-3)


def test_prerun_law_learns_time_model_and_physics_exponents():
    # E = P·t with t from the EfficiencyModel form: the law must find θ and α_F ≈ 1, α_η ≈ −1
    df = synth(300, n_families=8)  # < 10 families: physics core (log F, log η̂)
    d = prepare(df, need_energy=False)
    theta = np.array([1.6, 9.0, 5.0, 0.02, 0.05])
    d["time_s"] = EfficiencyModel._X(d) @ theta
    d["energy_j"] = 95.0 * d["time_s"]
    law = PreRunLaw().fit(d)
    assert np.allclose(law.eff_.theta_, theta, rtol=0.05, atol=1e-4)
    coef = dict(zip(law.terms_, law.coef_, strict=True))
    assert coef["log F"] == pytest.approx(1.0, abs=0.02)
    assert coef["log eta_hat"] == pytest.approx(-1.0, abs=0.02)
    held = prepare(synth(50, seed=9), need_energy=False)
    held["time_s"] = EfficiencyModel._X(held) @ theta
    held["energy_j"] = 95.0 * held["time_s"]
    # predictions use only the configuration: drop the measured columns first
    pred = law.predict(held.drop(columns=["time_s", "energy_j"]))
    assert np.max(np.abs(pred / held["energy_j"] - 1)) < 0.02


def test_prerun_law_roundtrips_json():
    d = prepare(synth(200), need_energy=False)
    d["time_s"] = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["energy_j"] = 90 * d["time_s"] * np.exp(np.random.default_rng(0).normal(0, 0.02, len(d)))
    law = PreRunLaw().fit(d)
    again = PreRunLaw.from_json(law.to_json())
    assert np.allclose(again.predict(d), law.predict(d))


@pytest.mark.parametrize("name", ["config-only", "device-seconds", "hgb", "paper-no-eta"])
def test_baselines_fit_and_predict(name):
    d = prepare(synth(300), need_energy=False)
    d["time_s"] = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["energy_j"] = 90 * d["time_s"]
    law = make_law(name).fit(d)
    assert law.score(d) > (0.99 if name == "device-seconds" else 0.6)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(JouleboundError, match="unknown energy law"):
        make_law("powerlow")
    df = synth(20)
    df["energy_j"] = 1.0
    with pytest.raises(JouleboundError, match="unknown parallelism strategy 'zero9'"):
        PowerLaw().fit(df.assign(strategy="zero9"))
    with pytest.raises(JouleboundError, match="GPU count must be an integer >= 1"):
        PowerLaw().fit(df.assign(gpus=0))
    with pytest.raises(SchemaError, match="'seq'"):
        PowerLaw().fit(df.drop(columns=["seq"]))
    with pytest.raises(JouleboundError, match="measured time_s"):
        PaperLaw().fit(df)


def test_efficiency_model_leaves_out_terms_the_data_cannot_identify():
    df = synth(200)
    df["layers"] = 12  # L never varies: the per-layer term is collinear with the constant
    df["seq"] = 256
    df["heads"] = 4
    d = prepare(df, need_energy=False)
    t = 1.5 * d["F_dense"] / d["peak_flops"] + 0.05
    m = EfficiencyModel().fit(d, t.to_numpy())
    assert "t_layer_s" not in m.active_ and "theta_dense" in m.active_
    assert np.allclose(m.time(d), t, rtol=1e-3)


def test_prerun_eta_par_from_a_fitted_speedup_law():
    from joulebound.jobs.speedup import fit_speedup

    df = synth(120)
    df["strategy"] = np.where(np.arange(len(df)) % 2 == 0, "single", "ddp")
    df["gpus"] = np.where(df["strategy"] == "ddp", 4, 1)
    d = prepare(df, need_energy=False)
    law_fit = fit_speedup("ddp", [2, 4, 8], [1.9, 3.4, 5.6])
    t1 = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["time_s"] = t1 / (d["gpus"] * np.where(d["gpus"] > 1, float(law_fit.efficiency(4)), 1.0))
    d["energy_j"] = 90 * d["time_s"] * d["gpus"]
    law = PreRunLaw(speedup_fits={"ddp": law_fit}).fit(d)
    _, _, par = law.eta_hat(d)
    assert np.allclose(par[d["gpus"].to_numpy() == 4], float(law_fit.efficiency(4)))
    assert np.allclose(par[d["gpus"].to_numpy() == 1], 1.0)
    assert law.score(d) > 0.99
