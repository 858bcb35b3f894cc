"""``joulebound devices``: list, show, import, remove, --json, error exit codes."""

from __future__ import annotations

import json

import pytest

from joulebound.cli import main
from joulebound.hw.catalog import builtin_dir


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch):
    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "devices"


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_list_json(capsys):
    rc, out, _ = run(capsys, "devices", "--json")
    assert rc == 0
    rows = json.loads(out)
    by = {r["name"]: r for r in rows}
    assert len(rows) >= 9 and {"rtx3080ti", "a40", "a100-sxm4-80gb", "h200-sxm"} <= set(by)
    a100 = by["a100-sxm4-80gb"]
    assert (a100["n_mem_clocks"], a100["n_core_clocks"], a100["core_min_mhz"],
            a100["core_max_mhz"], a100["max_mem_mhz"]) == (1, 81, 210, 1410, 1593)
    assert a100["tables"] == "real" and by["rtx3080ti"]["tables"] == "constructed"
    assert a100["bf16_tflops"] == pytest.approx(312.0)
    assert by["h200-sxm"]["switch_latency_s"] == pytest.approx(0.006)
    assert "idle_power_w" in by["rtx3080ti"]["estimates"]
    # `devices list --json` is the same
    rc, out2, _ = run(capsys, "devices", "list", "--json")
    assert json.loads(out2) == rows


def test_list_table(capsys):
    rc, out, _ = run(capsys, "devices")
    assert rc == 0
    for name in ("rtx3080ti", "a40", "b200", "t4"):
        assert name in out
    assert "constr" in out and "real" in out


def test_show_json_and_alias(capsys):
    rc, out, _ = run(capsys, "devices", "3080ti", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["name"] == "rtx3080ti" and d["tables_constructed"] is True
    assert d["supported_clocks"]["9501"][0] == 2100
    assert d["sources"]["supported_clocks"].startswith("CONSTRUCTED")
    assert d["ridge_point_flop_per_byte"] > 50 and "3080ti" in d["aliases"]
    assert d["provenance"] == "published" and "idle_power_w" in d["estimates"]
    assert all("estimate" in d["sources"][k].lower() for k in d["estimates"])
    rc, out, _ = run(capsys, "devices", "show", "a100", "--json")
    assert json.loads(out)["name"] == "a100-sxm4-80gb"


def test_show_table(capsys):
    rc, out, _ = run(capsys, "devices", "h200")
    assert rc == 0 and "6 ms" in out and "Spaan" in out


def test_unknown_device_exit_2(capsys):
    rc, out, err = run(capsys, "devices", "rtx5090")
    assert rc == 2
    assert "unknown GPU 'rtx5090'" in err and "rtx3090" in err and "Choices" in err


def test_import_show_remove(capsys, shared_data, user_home):
    xml = str(shared_data / "nvidia_smi" / "dual_a5000-v13.xml")
    rc, out, err = run(capsys, "devices", "import", xml, "--name", "lab-a5000", "--gpu", "1",
                       "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["name"] == "lab-a5000" and doc["path"].endswith("lab-a5000.toml")
    assert doc["device"]["power_limit_default_w"] == 230.0
    rc, out, _ = run(capsys, "devices", "--json")
    assert "lab-a5000" in {r["name"] for r in json.loads(out)}
    rc, out, _ = run(capsys, "devices", "remove", "lab-a5000")
    assert rc == 0 and not (user_home / "lab-a5000.toml").exists()
    rc, _, err = run(capsys, "devices", "remove", "lab-a5000")
    assert rc == 2 and "no user entry" in err


def test_import_toml_cli(capsys, tmp_path):
    text = (builtin_dir() / "a40.toml").read_text().replace('name = "a40"', 'name = "my-a40"')
    text = text.replace('aliases = ["nvidia-a40"]', "aliases = []")
    p = tmp_path / "my.toml"
    p.write_text(text)
    rc, out, err = run(capsys, "devices", "import", str(p))
    assert rc == 0, err
    assert "my-a40" in out
    rc, out, _ = run(capsys, "devices", "my-a40", "--json")
    assert json.loads(out)["origin"].startswith("user")


def test_import_bad_file_exit_2(capsys, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('schema = "joulebound-device"\nname = "x"\n')
    rc, _, err = run(capsys, "devices", "import", str(p))
    assert rc == 2 and "bad.toml" in err and "field 'supported_clocks'" in err
    # both table names reach the terminal (rich must not take them for markup tags)
    assert "supported_clocks (memory MHz" in err and "clock_ranges (memory MHz" in err


def test_list_shows_skipped_user_entries_verbatim(capsys, user_home):
    user_home.mkdir(parents=True)
    (user_home / "half.toml").write_text('schema = "joulebound-device"\nname = "half"\n')
    rc, out, _ = run(capsys, "devices")
    assert rc == 0 and "a40" in out
    text = "".join(out.split())  # rich folds long paths mid-word: compare without white space
    assert "skippeduserentry" in text and "half.toml" in text and "clock_ranges(memoryMHz" in text


def test_import_a_folder_is_a_user_error(capsys, tmp_path):
    rc, _, err = run(capsys, "devices", "import", str(tmp_path))
    assert rc == 2 and "not a file" in err and "nvidia-smi -q -x" in err


def test_remove_touches_only_files_of_the_user_catalog(capsys, tmp_path, user_home):
    outside = tmp_path / "keep.toml"
    outside.write_text("x = 1\n")
    user_home.mkdir(parents=True)
    rc, _, err = run(capsys, "devices", "remove", "../../keep")
    assert rc == 2 and "no user entry" in err and outside.exists()
