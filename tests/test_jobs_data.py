"""Loaders on the real open data (skipped without ../shared/data), the sweep store, and the
held-out evaluation on the Mayaki ECAI data."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.jobs import datasets, evaluate


def test_mayaki_loader_schema(shared_data):
    df = datasets.load(shared_data / "mayaki_ecai2025")
    assert len(df) == 1576 and df["family"].nunique() == 37
    assert set(df["device"]) == {"a100-pcie-80gb", "rtx2080ti"}
    assert (df["energy_j"] > 0).all() and (df["time_s"] > 0).all()
    # GPT rows: params = L(4d² + 4105d + 2048) + 2000d + 1000 (ff = 2048, vocab 1000)
    g = df[df.arch == "gpt"]
    L, d = g.layers, g.hidden
    assert np.allclose(g.params, L * (4 * d * d + 4105 * d + 2048) + 2000 * d + 1000)


def test_zeus_and_perseus_loaders(shared_data):
    z = datasets.load(shared_data / "zeus_nsdi23")
    assert set(z["arch"]) == {"bert"} and z.attrs["dropped"]["non-transformer workload"] > 1000
    assert np.isfinite(z["energy_j"] / z["time_s"]).all() and (z["energy_j"] > 0).all()
    assert (z["energy_j"] / z["time_s"]).between(30, 320).all()  # average power within board limits
    p = datasets.load(shared_data / "perseus")
    assert "wide-resnet101_8" not in set(p["family"])
    bert = p[(p.family == "bert-huge-uncased") & (p.device == "a100-pcie-80gb")]
    assert bert["time_s"].between(6.3, 6.4).all()  # max-clock warm-up and 300 W rows agree
    assert set(p["strategy"]) == {"pp"} and p["gpus"].isin([4, 8, 16]).all()


def test_missing_column_is_named(tmp_path):
    f = tmp_path / "SubsetDataForTransformer_energyModel.csv"
    pd.DataFrame({"duration": [1.0], "energy_joules": [2.0]}).to_csv(f)
    with pytest.raises(SchemaError, match="num_layers"):
        datasets.load_mayaki(f)
    with pytest.raises(JouleboundError, match="data path not found"):
        datasets.load(tmp_path / "nope")
    (tmp_path / "trace.json").write_text("{}")
    with pytest.raises(JouleboundError, match="trace.json: not a supported data file"):
        datasets.load(tmp_path / "trace.json")


def _sweep_db(path, energy: bool):
    rows = []
    t1 = 10.0
    for strat, n_list in (("ddp", [1, 2, 4]), ("tp", [1, 2, 4])):
        for n in n_list:
            s = {1: 1.0, 2: 1.8 if strat == "ddp" else 1.5, 4: 3.2 if strat == "ddp" else 2.0}[n]
            rows.append({"config_id": f"{strat}-{n}", "sweep": "t", "arch": "bert", "layers": 2,
                         "hidden": 128, "heads": 2, "ff": 512, "seq": 64, "batch": 16, "dtype": "fp32",
                         "strategy": strat if n > 1 else "single", "world_size": n, "steps": 10,
                         "status": "ok", "error": None, "time_s": t1 / s,
                         "energy_j": (t1 / s) * n * 100.0 if energy else None,
                         "energy_provenance": "measured" if energy else None, "tokens": 10 * 16 * 64,
                         "padded_tokens": 0, "throughput_tok_s": 0.0, "speedup": s,
                         "peak_mem_bytes": 0, "env_json": json.dumps({"device": "rtx2080ti"}),
                         "created_at": "2026-01-01"})
    rows.append({**rows[0], "config_id": "bad", "status": "failed", "time_s": None})
    with sqlite3.connect(path) as con:
        pd.DataFrame(rows).to_sql("sweep_results", con, index=False)


def test_sweep_store_time_only_fits_speedup_laws(tmp_path, capsys):
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=False)
    df = datasets.load(db)
    assert len(df) == 6 and df.attrs["dropped"]["status not ok or no time"] == 1
    assert df["time_s"].iloc[0] == pytest.approx(1.0)  # per step (10 s / 10 steps)
    assert main(["fit", "--data", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rec = out["datasets"][0]
    assert any("energy laws need energy" in n for n in rec["notes"])
    laws = {s["strategy"]: s for s in rec["speedup"]}
    assert laws["tp"]["law"] == "tp_saturating_exp" and laws["ddp"]["law"] == "generalized_amdahl"
    assert laws["ddp"]["rmse"] < 0.1
    import typer

    from joulebound.cli import app

    helptext = typer.main.get_command(app).commands["fit"].help  # type: ignore[attr-defined]
    assert not [k for s in rec["speedup"] for k in s if k not in helptext]  # documented keys


def test_sweep_store_with_energy_fits_energy_laws(tmp_path, capsys):
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    law_file = tmp_path / "law.json"
    assert main(["fit", "--data", str(db), "--law", "paper", "--laws", "paper,device-seconds",
                 "--save", str(law_file), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["datasets"][0]
    terms = {c["term"] for c in rec["coefficients"]}
    assert "log eta" in terms and "strategy[tp]" in terms
    assert "paper-speedup" in {e["law"] for e in rec["evaluation"]}  # the sweep has speedups
    # the saved pre-run law is usable by predict, and its Ψ(tp) is now fitted
    assert main(["predict", "--layers", "2", "--hidden", "128", "--heads", "2", "--seq", "64",
                 "--batch", "16", "--tokens", "1e6", "--gpus", "2", "--strategy", "tp",
                 "--coefficients", str(law_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert str(law_file) in out["predictor"] and out["total_energy_j"] > 0
    assert not any("Ψ(strategy) = 0" in w for w in out["warnings"])


def test_prerun_law_heldout_r2_on_mayaki(shared_data):
    df = datasets.load(shared_data / "mayaki_ecai2025")
    pre = evaluate.cross_validate(df, "prerun", k=5)
    base = evaluate.cross_validate(df, "paper-no-eta", k=5)
    assert pre["r2_log"] >= 0.95, pre
    assert base["r2_log"] < 0.9  # the plain log-linear fit on the paper's proxies
    assert 0.8 <= pre["conformal_coverage"] <= 0.97


def test_cross_validation_never_splits_a_family():
    """Out-of-fold predictions come from laws that never saw the row's family: tripling one
    family's energy leaves that family's own held-out predictions unchanged (and moves others')."""
    from _law_synth import synth

    from joulebound.jobs.laws import EfficiencyModel, prepare

    d = prepare(synth(240, n_families=12), need_energy=False)
    d["time_s"] = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["energy_j"] = 90 * d["time_s"]
    base = evaluate.cross_validate(d, "powerlaw", k=4)["oof_log_pred"]
    fam = d["family"] == d["family"].iloc[0]
    moved = evaluate.cross_validate(d.assign(energy_j=np.where(fam, 3 * d["energy_j"],
                                                               d["energy_j"])), "powerlaw", k=4)
    same = np.isclose(moved["oof_log_pred"], base)
    assert same[fam.to_numpy()].all()  # its own fold never fitted it: unchanged
    assert not same.all()              # the other folds learned from it


def test_conformal_quantile_is_the_ceiling_rank():
    """⌈(n+1)(1−α)⌉-th smallest residual: at n = 10, α = 0.1 that is the 10th (the floor would
    be the 9th); at n = 8 no rank is high enough (inf); and exchangeable residuals are covered
    with probability ⌈(n+1)(1−α)⌉/(n+1) = 10/11, not the floor's 9/11."""
    assert evaluate.conformal_quantile(np.arange(1, 20), 0.1) == 18
    assert evaluate.conformal_quantile(np.arange(1, 11), 0.1) == 10
    assert evaluate.conformal_quantile(np.arange(1, 10), 0.1) == 9
    assert evaluate.conformal_quantile(np.arange(1, 9), 0.1) == np.inf
    rng = np.random.default_rng(0)
    r = np.abs(rng.normal(size=(20_000, 11)))
    q = np.array([evaluate.conformal_quantile(row[:10], 0.1) for row in r])
    cover = np.mean(r[:, 10] <= q)
    assert cover == pytest.approx(10 / 11, abs=0.01)


def test_cpu_sweep_with_simulated_energy_fits_only_speedup(tmp_path, capsys):
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    with sqlite3.connect(db) as con:
        con.execute("update sweep_results set env_json = ?, energy_provenance = 'modeled'",
                    (json.dumps({"device_type": "cpu", "gpu": None}),))
    df = datasets.load(db)
    assert set(df["device"]) == {"cpu"} and df["peak_flops"].isna().all()
    assert main(["fit", "--data", str(db), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["datasets"][0]
    assert any("modeled" in n for n in rec["notes"]) and "coefficients" not in rec
    assert {s["strategy"] for s in rec["speedup"]} == {"ddp", "tp"}


@pytest.mark.parametrize("sub, min_rows", [("mayaki_ecai2025", 1500), ("zeus_nsdi23", 40), ("perseus", 15)])
def test_fit_cli_prints_the_evaluation_table_on_each_open_dataset(shared_data, capsys, sub, min_rows):
    assert main(["fit", "--data", str(shared_data / sub), "--laws", "powerlaw,prerun",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["published"]["provenance"] == "published"
    (rec,) = out["datasets"]
    assert rec["dataset"] == sub and rec["rows"] >= min_rows
    ev = {r["law"]: r for r in rec["evaluation"]}
    assert set(ev) == {"powerlaw", "prerun"}
    for r in ev.values():  # held-out figures exist and are numbers, not placeholders
        assert r["cv_k"] >= 2 and np.isfinite(r["cv_r2_log"]) and 0 < r["cv_mape"] < 10
    assert {c["term"] for c in rec["coefficients"]} >= {"const", "log F"}
    import typer

    from joulebound.cli import app

    helptext = typer.main.get_command(app).commands["fit"].help  # type: ignore[attr-defined]
    keys = set(out) | set(rec) | set(out["published"]) | {k for r in rec["evaluation"] for k in r}
    keys |= {k for c in rec["coefficients"] for k in c} | {k for s in rec["speedup"] for k in s}
    assert not [k for k in keys if k not in helptext]  # every --json key is documented
    if sub != "zeus_nsdi23":
        return
    # the text form prints the same table (on the smallest dataset, to keep the suite fast)
    assert main(["fit", "--data", str(shared_data / sub), "--laws", "prerun"]) == 0
    text = capsys.readouterr().out
    assert "evaluation" in text and "cvR²" in text and "[published]" in text


def test_sweep_store_missing_a_required_column_is_named(tmp_path, capsys):
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE sweep_results DROP COLUMN world_size")
    with pytest.raises(SchemaError, match="world_size"):
        datasets.load(db)
    assert main(["fit", "--data", str(db)]) == 2
    assert "world_size" in capsys.readouterr().err
