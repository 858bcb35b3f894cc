"""Checks (b)-(d) on the real data, through `joulebound validate --json` (run once)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from joulebound.cli import main
from research import perseus_plans


@pytest.fixture(scope="module")
def rows(shared_data, tmp_path_factory):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["validate", "--data", str(shared_data), "--json", "--only",
                   "perseus-plans,guerreiro,zeus-power-limit"])
    assert rc == 0
    doc = json.loads(buf.getvalue())
    return {(r["check"], r["gpu"], r["workload"]): r for r in doc}


def test_json_keys_and_the_selected_checks(rows):
    keys = {"check", "gpu", "workload", "time_mape", "energy_mape", "time_max_err",
            "energy_max_err", "n_points", "provenance", "energy_quantity", "published", "note",
            "split"}
    assert all(set(r) == keys for r in rows.values())
    # --only runs just these (the kernel-level checks are pinned in test_gpumodel_grounding.py)
    assert {k[0] for k in rows} == {"perseus-plans", "guerreiro", "zeus-power-limit"}


def test_unknown_check_is_a_user_error(shared_data, capsys):
    assert main(["validate", "--data", str(shared_data), "--json", "--only", "nope"]) == 2
    assert "unknown check" in capsys.readouterr().err


def test_plans_held_out_error(rows):
    r = rows[("perseus-plans", "A100-PCIe-80GB", "all 4 workloads")]
    assert r["n_points"] >= 60                      # odd-indexed plans of 4 workloads
    assert r["time_mape"] < 1.5 and r["energy_mape"] < 2.5
    for w in perseus_plans.WORKLOADS:
        assert rows[("perseus-plans", "A100-PCIe-80GB", w)]["time_mape"] < 2.0


def test_guerreiro_reads_35_apps_and_cites_published(rows):
    r = rows[("guerreiro", "GTX Titan X", "35 real apps (all 64 clock pairs)")]
    assert r["n_points"] == 35 * 64 and r["energy_quantity"] == "power"
    assert r["published"]["value"] == 4.6 and "TPDS" in r["published"]["source"]
    assert r["energy_mape"] < 10.0


def test_zeus_per_gpu(rows):
    for gpu in ("A40", "V100", "RTX 6000", "P100"):
        r = next(v for k, v in rows.items() if k[0] == "zeus-power-limit" and k[1] == gpu
                 and k[2].startswith("all"))
        assert r["n_points"] > 200 and r["time_mape"] < 10.0 and r["energy_mape"] < 10.0


def test_one_f_one_b_order_and_simulation():
    order = perseus_plans.one_f_one_b(0, 4, 6)
    assert [k for k, _ in order[:4]] == ["F", "F", "F", "F"] and order[4] == ("B", 0)
    assert sorted(order) == sorted([("F", m) for m in range(6)] + [("B", m) for m in range(6)])
    # uniform stages: makespan = (nmb + pp - 1) * (F + B) for 1F1B
    pp, nmb = 4, 8
    t, busy = perseus_plans.simulate_1f1b([np.full(nmb, 1.0)] * pp, [np.full(nmb, 2.0)] * pp)
    assert t == pytest.approx((nmb + pp - 1) * 3.0)
    assert np.allclose(busy, nmb * 3.0)


def _event_loop_1f1b(fwd, bwd):
    """The pipeline simulated op by op as each becomes ready (the makespan's definition)."""
    pp, nmb = len(fwd), len(fwd[0])
    f_end, b_end = np.zeros((pp, nmb)), np.zeros((pp, nmb))
    orders = [perseus_plans.one_f_one_b(r, pp, nmb) for r in range(pp)]
    pos, clock, remaining = [0] * pp, [0.0] * pp, 2 * pp * nmb
    while remaining:
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, m = orders[r][pos[r]]
                if kind == "F":
                    if r > 0 and f_end[r - 1, m] == 0.0:
                        break
                    f_end[r, m] = clock[r] = max(clock[r], f_end[r - 1, m] if r else 0.0) + fwd[r][m]
                else:
                    if r < pp - 1 and b_end[r + 1, m] == 0.0:
                        break
                    b_end[r, m] = clock[r] = max(clock[r], b_end[r + 1, m] if r < pp - 1
                                                 else 0.0) + bwd[r][m]
                pos[r] += 1
                remaining -= 1
    return float(max(clock))


@pytest.mark.parametrize("pp,nmb", [(1, 3), (2, 2), (4, 6), (4, 16), (8, 8)])
def test_1f1b_makespan_equals_the_op_by_op_event_loop(pp, nmb):
    """The precomputed schedule gives exactly the event loop's makespan on random durations."""
    rng = np.random.default_rng(pp * 100 + nmb)
    for _ in range(20):
        fwd = [rng.uniform(0.1, 3.0, nmb) for _ in range(pp)]
        bwd = [rng.uniform(0.1, 6.0, nmb) for _ in range(pp)]
        t, busy = perseus_plans.simulate_1f1b(fwd, bwd)
        assert t == _event_loop_1f1b(fwd, bwd)
        assert np.array_equal(busy, [f.sum() + b.sum() for f, b in zip(fwd, bwd, strict=True)])


@pytest.mark.parametrize("pp,nmb", [(1, 3), (4, 6), (8, 8)])
def test_1f1b_of_many_pipelines_at_once_equals_each_one_alone(pp, nmb):
    """The vectorized simulation (all plans of a workload in one pass) gives every pipeline the
    event loop's makespan and busy times, exactly."""
    rng = np.random.default_rng(pp * 10 + nmb)
    fwd, bwd = rng.uniform(0.1, 3.0, (7, pp, nmb)), rng.uniform(0.1, 6.0, (7, pp, nmb))
    t, busy = perseus_plans.simulate_1f1b_many(fwd, bwd)
    assert t.shape == (7,) and busy.shape == (7, pp)
    for i in range(7):
        assert t[i] == _event_loop_1f1b(list(fwd[i]), list(bwd[i]))
        assert np.allclose(busy[i], fwd[i].sum(axis=1) + bwd[i].sum(axis=1), rtol=1e-15)


def test_split_power_states_pairs():
    st = [1000, 1000, 1100, 1100] * 3 + [1410, 1410]     # rank 3 of pp4: F,B alternate
    fwd, bwd = perseus_plans.split_power_states(st, 3, 4, 3)
    assert np.all(fwd == 1000) and np.all(bwd == 1100)


def test_validate_writes_docs_only_when_asked(shared_data, tmp_path, monkeypatch, capsys):
    """Run inside a checkout-like folder: its docs/validation.md and docs/img stay untouched;
    --write-docs DIR writes DIR/validation.md (results block) and DIR/img/validation_*.png."""
    checkout = tmp_path / "checkout"
    (checkout / "docs").mkdir(parents=True)
    page = checkout / "docs" / "validation.md"
    page.write_text("# page\n\n<!-- validate:results -->\nold\n<!-- /validate:results -->\n")
    monkeypatch.chdir(checkout)
    out = tmp_path / "out"
    # guerreiro: the quickest check that draws a measured-vs-modeled figure
    assert main(["validate", "--data", str(shared_data), "--only", "guerreiro",
                 "--write-docs", str(out)]) == 0
    assert page.read_text().endswith("old\n<!-- /validate:results -->\n")
    assert not (checkout / "docs" / "img").exists()
    text = (out / "validation.md").read_text()
    assert "guerreiro" in text and "--write-docs docs" in text
    assert sorted(p.name for p in (out / "img").glob("validation_*.png"))
    assert f"wrote {out / 'validation.md'}" in capsys.readouterr().out.replace("\n", "")
