"""``joulebound predict`` / ``advise`` (mechanistic by default, ``--law`` for the legacy laws),
``--jobs`` tables, error messages; frontier checks."""

from __future__ import annotations

import csv
import json

import pytest

from joulebound.cli import main
from joulebound.jobs import frontier

BERT = ["--model", "bert", "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "128",
        "--batch", "32"]


def test_predict_from_builtin_defaults_prints_every_figure_labeled(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("JOULEBOUND_DATA", str(tmp_path / "absent"))  # no data folder needed
    assert main(["predict"]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
    for key in ("time", "energy", "step", "memory"):
        assert "[modeled]" in lines[key], (key, out)
    assert "GPU" in lines["energy"] and "host" in lines["energy"] and "total" in lines["energy"]
    assert "90 % interval" in lines["time"]
    assert "covers" in lines and "NVML" in out
    assert "bert-base preset" in out  # says which job it priced


def test_predict_json_keys_and_interval(capsys):
    assert main(["predict", *BERT, "--tokens", "1e8", "--gpus", "4", "--strategy", "fsdp",
                 "--device", "a40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["provenance"] == "modeled" and out["predictor"] == "mechanistic"
    for q in ("time", "gpu_energy", "total_energy"):
        lo, v, hi = out[f"{q}_lo_{'s' if q == 'time' else 'j'}"], out[f"{q}_{'s' if q == 'time' else 'j'}"], \
            out[f"{q}_hi_{'s' if q == 'time' else 'j'}"]
        assert lo < v < hi, q
    assert out["steps"] == pytest.approx(1e8 / (32 * 4 * 128))
    assert out["strategy"] == "fsdp4" and out["global_batch"] == 128 and out["micro_batch"] == 32
    assert out["total_energy_j"] == pytest.approx(out["gpu_energy_j"] + out["host_energy_j"])
    assert out["step"]["comm_detail"]["fsdp_layer_bytes"] > 0 and out["interval_why"]
    assert set(out["memory"]) >= {"weights", "gradients", "optimizer", "activations", "fits"}


def test_predict_scales_with_tokens_model_and_gpu(capsys):
    def run(*extra: str) -> dict:
        assert main(["predict", *BERT, "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    a, b = run("--tokens", "1e8"), run("--tokens", "2e8")
    assert b["total_energy_j"] == pytest.approx(2 * a["total_energy_j"])
    big = run("--tokens", "1e8", "--layers", "24", "--hidden", "1024", "--heads", "16")
    assert big["gpu_energy_j"] > 2 * a["gpu_energy_j"]
    assert run("--tokens", "1e8", "--device", "h100-sxm")["time_s"] < a["time_s"]


@pytest.mark.parametrize("args, needles", [
    (["--gpus", "4", "--strategy", "fsd"], ["fsdp"]),
    (["--gpus", "0", "--strategy", "ddp"], [">= 1"]),
    (["--device", "rtx9090"], ["unknown GPU 'rtx9090'", "rtx3090"]),
    (["--heads", "7"], ["--heads 7 does not divide --hidden 768", "12"]),
    (["--gpus", "8", "--strategy", "tp"], ["tp=8 must divide the 12 attention heads"]),
    (["--gpus", "16", "--strategy", "pp"], ["pp=16 exceed the 12 layers"]),
    (["--gpus", "8", "--strategy", "ddp", "--global-batch", "4", "--batch", "1"],
     ["smaller than the 8 data-parallel ranks"]),
    (["--layers", "1000000"], ["--layers 1,000,000 is absurd"]),
    (["--tokens", "1e30"], ["--tokens 1e+30 is absurd"]),
    (["--tokens", "nan"], ["--tokens must be a finite number > 0"]),
    (["--model", "t5"], ["encoder-decoder models are not modeled"]),
    (["--ff", "0"], ["--ff must be an integer >= 1"]),
    (["--dtype", "int8"], ["unknown --dtype 'int8'", "bf16"]),
    (["--power-limit", "20"], ["outside a100-pcie-80gb's range 150–300 W"]),
    (["--interconnect", "pcie9"], ["unknown interconnect 'pcie9'"]),
    (["--gpus", "16", "--strategy", "ddp", "--inter-node", "nvlink3"], ["cannot be used between nodes"]),
    (["-o", "x.csv"], ["-o/--output writes the predictions of --jobs"]),
])
def test_predict_refuses_bad_input_with_a_clear_message(capsys, args, needles):
    assert main(["predict", *BERT, *args]) == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, (args, err)


def test_predict_refuses_a_job_that_does_not_fit_unless_asked(capsys):
    gpt = ["--model", "gpt", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq", "1024",
           "--batch", "8", "--device", "rtx2080ti"]
    assert main(["predict", *gpt]) == 2
    err = capsys.readouterr().err
    assert "GiB per GPU" in err and "--recompute" in err and "FSDP" in err
    assert main(["predict", *gpt, "--ignore-memory", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_memory"] is False


def test_predict_jobs_table_to_csv_and_json(capsys, tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,layers,hidden,heads,seq,batch,gpus,strategy,device,tokens\n"
                    "small,12,768,12,128,32,1,single,,1e8\n"
                    "fsdp4,12,768,12,128,32,4,fsdp,a40,1e8\n"
                    "bad,12,768,7,128,32,1,single,,1e8\n"
                    ",24,1024,16,512,8,8,tp,a100-sxm4-80gb,\n")
    out = tmp_path / "pred.csv"
    # a refused row: the others are predicted and written, and the exit status says so (issue 28
    # item 11: it was 0 with rows refused)
    assert main(["predict", "--jobs", str(jobs), "-o", str(out), "--device", "rtx3090"]) == 1
    cap = capsys.readouterr()
    assert "3 predicted, 1 refused" in cap.out and "1 of 4 job(s) refused" in cap.err
    rows = list(csv.DictReader(out.open()))
    assert [r["name"] for r in rows] == ["small", "fsdp4", "", "row4"]
    assert rows[0]["device"] == "rtx3090" and rows[1]["device"] == "a40"  # empty cell = option
    assert "does not divide" in rows[2]["error"] and rows[2]["time_s"] == ""
    assert float(rows[3]["steps"]) == 1.0 and rows[3]["strategy"] == "tp8"  # no tokens: one step
    for r in (rows[0], rows[1], rows[3]):
        assert float(r["time_lo_s"]) < float(r["time_s"]) < float(r["time_hi_s"])
        assert r["provenance"] == "modeled"
    assert main(["predict", "--jobs", str(jobs), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 4 and "error" in doc[2] and doc[1]["strategy"] == "fsdp4"
    jobs.write_text("name,layers,hidden,heads,seq,batch,gpus,strategy,device,tokens\n"
                    "small,12,768,12,128,32,1,single,,1e8\n")
    assert main(["predict", "--jobs", str(jobs), "--json"]) == 0   # nothing refused


def test_predict_jobs_unknown_column_is_named(capsys, tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("layers,hiden,heads,seq,batch\n12,768,12,128,8\n")
    assert main(["predict", "--jobs", str(jobs)]) == 2
    err = capsys.readouterr().err
    assert "unknown column(s) 'hiden'" in err and "hidden" in err


def test_advise_meets_the_deadline_with_least_energy(capsys):
    assert main(["advise", *BERT, "--global-batch", "256", "--tokens", "1e9", "--deadline", "3h",
                 "--max-gpus", "8", "--device", "a100-sxm4-80gb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["best"]
    assert best["feasible"] and best["meets_deadline"] and best["time_s"] <= 3 * 3600
    ok = [c for c in out["candidates"] if c["feasible"] and c["meets_deadline"]]
    assert best["energy_j"] == min(c["energy_j"] for c in ok)
    assert {c["strategy"] for c in out["candidates"]} == {"single", "ddp", "fsdp", "tp", "pp"}
    assert all(c["energy_lo_j"] < c["energy_j"] < c["energy_hi_j"] for c in out["candidates"]
               if c["feasible"])


def test_advise_recommends_one_gpu_when_it_is_cheapest(capsys):
    assert main(["advise", *BERT, "--global-batch", "32", "--tokens", "1e8", "--deadline", "30d",
                 "--device", "rtx3090", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["gpus"] == 1 and out["best"]["strategy"] == "single"
    assert main(["advise", *BERT, "--global-batch", "32", "--tokens", "1e8", "--deadline", "30d",
                 "--device", "rtx3090"]) == 0
    text = capsys.readouterr().out
    assert "advice: single on 1 GPU" in text and "[modeled]" in text


def test_advise_never_picks_a_candidate_that_does_not_fit(capsys):
    gpt = ["--model", "gpt", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq", "1024",
           "--global-batch", "64", "--batch", "1", "--device", "rtx2080ti"]
    assert main(["advise", *gpt, "--tokens", "1e9", "--deadline", "30d", "--max-gpus", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["fits_memory"] and out["best"]["strategy"] in ("fsdp", "tp", "pp")
    ddp = [c for c in out["candidates"] if c["strategy"] in ("ddp", "single")]
    assert ddp and not any(c["fits_memory"] for c in ddp)
    assert main(["advise", *gpt, "--tokens", "1e9", "--deadline", "30d", "--max-gpus", "1"]) == 2
    assert "no candidate" in capsys.readouterr().err


def test_advise_jobs_table(capsys, tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,layers,hidden,heads,seq,global_batch,tokens,deadline\n"
                    "a,12,768,12,128,64,1e8,10h\n"
                    "b,12,768,12,128,64,1e8,\n")
    out = tmp_path / "adv.csv"
    assert main(["advise", "--jobs", str(jobs), "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["error"] == "" and rows[0]["meets_deadline"] == "True"
    assert "no deadline" in rows[1]["error"]


@pytest.mark.parametrize("cmd, needle", [
    (["advise", "--tokens", "1e8", "--deadline", "nan"], "duration must be finite"),
    (["advise", "--tokens", "1e8", "--deadline", "1h", "--strategies", "single"], "always included"),
    (["advise", "--tokens", "1e8", "--deadline", "1h", "--strategies", ","], "got none"),
    (["advise", "--deadline", "1h"], "advise needs --tokens"),
    (["advise", "--tokens", "1e8"], "--deadline is required"),
])
def test_advise_refuses_bad_input(capsys, cmd, needle):
    assert main([cmd[0], *BERT, *cmd[1:]]) == 2
    assert needle in capsys.readouterr().err


def test_legacy_laws_stay_selectable(capsys):
    assert main(["predict", *BERT, "--tokens", "1e8", "--law", "prerun", "--device", "rtx2080ti",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the one result type of every predictor; a law fills what it predicts
    assert out["total_energy_lo_j"] < out["total_energy_j"] < out["total_energy_hi_j"]
    assert out["predictor"].startswith("prerun") and out["gpu_energy_j"] is None
    assert out["time_s"] > 0 and out["step"]["eta_par"] == 1.0
    assert main(["advise", *BERT, "--tokens", "1e8", "--deadline", "2h", "--law", "prerun",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["meets_deadline"] in (True, False)
    assert main(["predict", *BERT, "--tokens", "1e8", "--law", "nope"]) == 2
    assert "unknown energy law 'nope'" in capsys.readouterr().err


def test_fit_needs_two_folds(capsys, tmp_path):
    assert main(["fit", "--data", str(tmp_path), "--folds", "1"]) == 2
    assert "--folds must be >= 2" in capsys.readouterr().err


def test_frontier_checks_within_an_order_of_magnitude():
    for r in frontier.check_all():
        assert r["published"]["provenance"] == "published"
        assert 0.1 < r["physics_ratio"] < 10, r
        assert 0.5 < r["flops_ratio"] < 2.5, r


def test_help_paragraphs_are_reflowed_and_document_json_keys():
    import typer

    from joulebound.cli import app

    cmds = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name, keys in (("fit", ("cv_r2_log", "published", "saved")),
                       ("predict", ("time_lo_s", "gpu_energy_j", "host_energy_j", "covers", "provenance")),
                       ("advise", ("meets_deadline", "candidates", "fits_memory", "feasible"))):
        text = cmds[name].help
        assert all("\n" not in p for p in text.split("\n\n")), name
        assert "--json" in text and all(k in text for k in keys), name
    for name in ("predict", "advise"):
        for p in cmds[name].params:  # every option explains itself
            assert p.name == "help" or getattr(p, "help", None), (name, p.name)


def test_folders_for_coefficients_and_save_are_user_errors(capsys, tmp_path):
    assert main(["predict", *BERT, "--coefficients", str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert main(["fit", "--data", str(tmp_path), "--save", str(tmp_path)]) == 2
    assert "--save" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_strategy_alias_is_read_with_a_note(capsys):
    """--strategy zero3 prices FSDP and says so (issue 28 item 11: it was a silent alias)."""
    import json

    from joulebound.cli import main

    args = ["predict", "--preset", "bert-base", "--seq", "128", "--batch", "32", "--tokens",
            "1e9", "--gpus", "4", "--device", "a40", "--json"]
    assert main([*args, "--strategy", "zero3"]) == 0
    alias = json.loads(capsys.readouterr().out)
    assert main([*args, "--strategy", "fsdp"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "strategy 'zero3' read as 'fsdp'" in alias["warnings"]
    assert not any("read as" in w for w in plain["warnings"])
    assert alias["time_s"] == plain["time_s"] and alias["strategy"] == plain["strategy"]
