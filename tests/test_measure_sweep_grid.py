"""Sweep grids: presets, TOML files, expansion and validation before anything runs."""

from __future__ import annotations

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.measure.sweep.runner import launch_command, plan_launches
from joulebound.workload.grid import Grid, SweepConfig, load_grid, preset, resolve_grid


def test_tiny_expands_to_all_strategies_at_two_ranks():
    cfgs = preset("tiny").expand(["single", "ddp", "fsdp", "tp"], [1, 2])
    assert {(c.strategy, c.world_size) for c in cfgs} == {("single", 1), ("ddp", 2), ("fsdp", 2), ("tp", 2)}
    ids = [c.config_id for c in cfgs]
    assert len(set(ids)) == len(ids) == 8
    # ids are stable and change with any field that changes the run
    c = cfgs[0]
    assert SweepConfig.from_dict(c.to_dict()).config_id == c.config_id
    assert SweepConfig.from_dict(dict(c.to_dict(), steps=4)).config_id != c.config_id
    assert c.baseline.strategy == "single" and c.baseline.world_size == 1


def test_paper_preset_follows_the_paper_ranges():
    g = preset("paper")
    shapes = g.shapes()
    assert min(s["layers"] for s in shapes) == 2 and max(s["layers"] for s in shapes) == 24
    assert min(s["hidden"] for s in shapes) == 64 and max(s["hidden"] for s in shapes) == 1024
    assert all(s["heads"] == s["hidden"] // 64 and s["ff"] == 4 * s["hidden"] for s in shapes)
    assert {s["seq"] for s in shapes} == {64, 128} and {s["batch"] for s in shapes} == {16, 32}
    with pytest.raises(JouleboundError, match="--skip-invalid"):  # d=64 has one head: no TP
        g.expand(["single", "fsdp", "tp"], [1, 2])
    cfgs, skipped = g.plan(["single", "fsdp", "tp"], [1, 2], skip_invalid=True)
    n_one_head = sum(1 for s in shapes if s["heads"] == 1)
    assert len(cfgs) == 3 * len(shapes) - n_one_head and len(skipped) == n_one_head


def test_heads_not_dividing_hidden_is_an_error_naming_the_shape():
    g = Grid(name="bad", layers=[2], hidden=[96], heads=[5], seq=[32], batch=[4])
    with pytest.raises(JouleboundError, match=r"heads \(5\) do not divide hidden \(96\)"):
        g.expand(["single"], [1])


@pytest.mark.parametrize("strategies,gpus,match", [
    (["ddp"], [1], "needs at least 2 ranks"),
    (["tp"], [1, 4], r"heads % 4 == 0"),
    (["fsdp"], [1, 3], "batch 4 is not divisible by 3"),
    (["pipeline"], [1, 2], "unknown strategy 'pipeline'"),
])
def test_strategy_needing_more_ranks_than_given_is_an_error(strategies, gpus, match):
    g = Grid(name="g", layers=[1], hidden=[64], heads=[2], seq=[32], batch=[4])
    with pytest.raises(JouleboundError, match=match):
        g.expand(strategies, gpus)


def test_tp_for_gpt2_is_refused_with_a_reason():
    g = Grid(name="g", arch=["gpt2"], layers=[1], hidden=[64], heads=[2], seq=[32], batch=[4])
    with pytest.raises(JouleboundError, match="'tp' is implemented for arch 'bert' only"):
        g.expand(["tp"], [2])
    assert len(g.expand(["single", "ddp", "fsdp"], [1, 2])) == 3


def test_cli_bad_grid_fails_before_anything_runs(tmp_path, capsys):
    db = tmp_path / "runs.db"
    rc = main(["sweep", "--grid", "tiny", "--hidden", "65", "--db", str(db)])
    assert rc == 2
    assert "do not divide hidden" in capsys.readouterr().err
    assert not db.exists()  # nothing was created or run
    rc = main(["sweep", "--grid", "tiny", "--gpus", "1", "--db", str(db)])
    assert rc == 2 and not db.exists()


def test_toml_grid_and_schema_errors(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('layers = [2, 4]\nhidden = 128\nhead_dim = 64\nseq = [64]\nbatch = [8]\n'
                 'steps = 5\ndtype = ["fp32", "bf16"]\n')
    g = load_grid(f)
    assert g.name == "mine" and g.hidden == [128] and g.steps == 5
    shapes = g.shapes()
    assert len(shapes) == 4 and all(s["heads"] == 2 and s["ff"] == 512 for s in shapes)
    assert resolve_grid(str(f)).layers == [2, 4]
    f.write_text("layer = [2]\n")
    with pytest.raises(SchemaError, match="layer.*Did you mean 'layers'"):
        load_grid(f)
    f.write_text('layers = ["two"]\n')
    with pytest.raises(SchemaError, match="layers"):
        load_grid(f)
    with pytest.raises(JouleboundError, match="Did you mean 'tiny'"):
        resolve_grid("tiyn")


def test_launch_plan_packs_single_into_the_smallest_multi_rank_launch():
    cfgs = preset("tiny").expand(["single", "ddp", "tp"], [1, 2, 4], skip_invalid=True)
    launches = plan_launches(cfgs)
    assert [w for w, _ in launches] == [2, 4]
    assert {c.strategy for c in launches[0][1]} == {"single", "ddp", "tp"}
    assert {(c.strategy, c.world_size) for c in launches[1][1]} == {("ddp", 4)}  # tp@4: 2 heads
    unpacked = plan_launches(cfgs, pack=False)
    assert [w for w, _ in unpacked] == [1, 2, 4]
    cmd = launch_command(2, ["--plan", "p.json"])
    assert cmd[1:] [:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone"]
    assert launch_command(1, ["--plan", "p.json"])[1:3] == ["-m", "joulebound.measure.sweep.worker"]


def test_more_gpus_than_the_machine_has_is_an_error(monkeypatch):
    torch = pytest.importorskip("torch")
    from joulebound.measure.sweep.runner import check_resources

    cfgs = preset("tiny").expand(["single", "fsdp"], [1, 2])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(JouleboundError, match="needs 2 GPUs per launch.*has 1 visible"):
        check_resources(cfgs, "cuda", None)
    check_resources(cfgs, "cpu", None)  # CPU ranks are processes: no limit
    check_resources(cfgs, "cuda", ["--nnodes", "2"])  # multi-node: torchrun places the ranks


def test_unknown_energy_backend_fails_before_anything_runs(tmp_path, capsys):
    db = tmp_path / "runs.db"
    for extra in ([], ["--dry-run"]):
        assert main(["sweep", "--grid", "tiny", "--strategies", "single", "--gpus", "1",
                     "--energy", "nvlm", "--db", str(db), *extra]) == 2
        err = capsys.readouterr().err
        assert "--energy 'nvlm'" in err and "nvml" in err and "simulated" in err
    assert not db.exists()  # no store created, no configuration recorded as failed


def test_dry_run_json_lists_launches_with_documented_keys(tmp_path, capsys):
    import json

    db = tmp_path / "runs.db"
    assert main(["sweep", "--grid", "tiny", "--dry-run", "--json", "--db", str(db)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"sweep", "planned", "skipped_invalid", "launches"}
    assert out["planned"] == sum(len(x["configs"]) for x in out["launches"]) == 8
    assert [x["world_size"] for x in out["launches"]] == [2] and not db.exists()
    import typer

    from joulebound.cli import app

    helptext = typer.main.get_command(app).commands["sweep"].help  # type: ignore[attr-defined]
    assert all(f'"{k}"' in helptext for k in out)


@pytest.mark.parametrize("head_dim", [0, -64])
def test_a_head_dim_below_one_is_a_listed_problem_not_a_crash(head_dim):
    """head_dim = 0 in a grid TOML raised ZeroDivisionError (issue 30 item 13); now it is one of
    the grid's listed problems."""
    g = Grid(name="g", layers=[1], hidden=[64], seq=[32], batch=[4], head_dim=head_dim)
    with pytest.raises(JouleboundError, match="head_dim and ff_mult must be >= 1"):
        g.plan(strategies=["single"], gpus=[1])


def test_a_grid_with_many_problems_prints_a_short_error_that_says_what_is_wrong():
    """A mistyped grid (hidden 65..264 for head_dim 64) printed a 76-92 MB error, one line per
    shape × strategy (issue 30 item 14); the message is capped and counts the rest."""
    g = Grid(name="g", layers=list(range(1, 31)), hidden=list(range(65, 95)), seq=[32],
             batch=[1, 2], head_dim=64)
    with pytest.raises(JouleboundError) as info:
        g.plan(strategies=["single", "ddp", "fsdp", "tp"], gpus=[1, 2])
    msg = str(info.value)
    assert len(msg) < 4000, len(msg)
    assert "problem(s)" in msg and "more" in msg
    assert msg.count("\n  - ") <= 12


def test_skip_invalid_lists_a_few_skipped_combinations_and_counts_the_rest(tmp_path, capsys):
    f = tmp_path / "wide.toml"
    f.write_text("layers = [1, 2, 3, 4, 5, 6, 7, 8]\nhidden = [64, 128]\nhead_dim = 64\n"
                 "seq = [32]\nbatch = [1, 3, 5]\n")
    assert main(["sweep", "--grid", str(f), "--strategies", "single,ddp,fsdp",
                 "--gpus", "1,2", "--skip-invalid", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "skipped 96 impossible combination(s)" in out
    assert out.count("\n  - ") <= 10 and "86 more" in out
