"""Regenerate ``docs/scaling.md`` and its figures from the real data.

    .venv/bin/python -m joulebound.scaling.report --data ../shared/data --docs docs

Every number in the generated page comes from this run (modeled errors against measured energy),
except the columns labeled *published*.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from .datasets import load
from .evaluate import DEFAULT_LAWS, PUBLISHED, cross_validate, evaluate


def _fmt(v, pct: bool = False) -> str:  # noqa: ANN001
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(v)
    return f"{v * 100:.1f} %" if pct else f"{v:.3f}"


def eval_table(t: pd.DataFrame) -> str:
    cols = [("law", "law", False), ("post-run", "post_run", False), ("adj. R² (in-sample)", "adj_r2_in_sample", False),
            ("held-out R² log E", "cv_r2_log", False), ("RMSE log E", "cv_rmse_log", False),
            ("MAPE E", "cv_mape", True), ("90 % interval coverage", "cv_conformal_coverage", True),
            ("interval ×/÷", "cv_conformal_median_width_factor", False),
            ("scale-shift R²", "shift_r2_log", False), ("scale-shift MAPE", "shift_mape", True)]
    out = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in t.iterrows():
        cells = []
        for _, k, pct in cols:
            v = r.get(k)
            cells.append(f"`{v}`" if k == "law" else _fmt(v, pct) if not (isinstance(v, float) and np.isnan(v)) else "–")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def coef_table(law) -> str:  # noqa: ANN001
    t = law.coef_table()
    out = ["| term | coefficient | 95 % CI |", "|---|---|---|"]
    for _, r in t.iterrows():
        ci = "–" if not np.isfinite(r.ci95_lo) else f"[{r.ci95_lo:.3g}, {r.ci95_hi:.3g}]"
        out.append(f"| {r.term} | {r.coef:.4g} | {ci} |")
    return "\n".join(out)


def plots(mayaki: pd.DataFrame, img: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .comm import predicted_speedup
    from .laws import PaperLaw, PreRunLaw
    from .proxies import total_params, training_flops
    from .speedup import fit_speedup

    img.mkdir(parents=True, exist_ok=True)
    files = {}
    # 1. measured vs predicted, out of fold
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True, sharey=True)
    y = mayaki["energy_j"].to_numpy(float)
    for ax, name in zip(axes, ("paper-no-eta", "paper", "prerun"), strict=True):
        cv = cross_validate(mayaki, name, k=5)
        p = np.exp(cv["oof_log_pred"])
        for dev, mk in (("a100-pcie-80gb", "o"), ("rtx2080ti", "^")):
            m = mayaki["device"].to_numpy() == dev
            ax.scatter(y[m], p[m], s=6, alpha=0.5, marker=mk, label=dev)
        lim = [y.min() * 0.8, y.max() * 1.25]
        ax.plot(lim, lim, "k--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{name}: held-out R² {cv['r2_log']:.3f}, MAPE {cv['mape'] * 100:.1f} %", fontsize=9)
        ax.set_xlabel("measured energy per step (J)")
    axes[0].set_ylabel("predicted, out of fold (J) [modeled]")
    axes[0].legend(fontsize=8)
    fig.suptitle("Mayaki ECAI 2025 data, grouped 5-fold by (L, d) family")
    fig.tight_layout()
    files["mvp"] = "img/scaling_measured_vs_predicted.png"
    fig.savefig(img / "scaling_measured_vs_predicted.png", dpi=110)
    plt.close(fig)

    # 2. speedup curves: communication model + fitted laws (modeled; no measured multi-GPU runs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    n = np.arange(1, 17)
    L, d, S, B = 12, 768, 128, 256
    P = float(total_params(L, d, 4 * d, 30522, S))
    F = float(training_flops(P, L, S, d, B))
    for ax, dev in zip(axes, ("rtx2080ti", "h100-sxm"), strict=True):
        for strat, col in (("ddp", "C0"), ("fsdp", "C1"), ("tp", "C2")):
            s = predicted_speedup(strat, n, flops=F, params=P, B=B, S=S, d=d, L=L, device=dev,
                                  dtype="fp32" if dev == "rtx2080ti" else "bf16", compute_eff=0.4)
            fit = fit_speedup(strat, n, s)
            ax.plot(n, s, "o", color=col, ms=3, label=f"{strat}: comm model")
            ax.plot(n, fit.speedup(n), "-", color=col, lw=1,
                    label=f"{strat}: {fit.law} fit")
        ax.plot(n, n, "k:", lw=1, label="linear")
        ax.set_title(f"BERT-base, B={B}, S={S} on {dev} (modeled)", fontsize=9)
        ax.set_xlabel("GPUs N")
    axes[0].set_ylabel("work-normalized speedup S(N)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    files["speedup"] = "img/scaling_speedup.png"
    fig.savefig(img / "scaling_speedup.png", dpi=110)
    plt.close(fig)

    # 3. elasticities with 95 % CIs, published values beside them
    fig, ax = plt.subplots(figsize=(8, 4))
    laws = {"paper (η measured)": PaperLaw().fit(mayaki), "prerun (η predicted)": PreRunLaw().fit(mayaki)}
    ticks = []
    for j, (lab, law) in enumerate(laws.items()):
        t = law.coef_table()
        t = t[t.term.str.startswith("log")]
        for i, r in enumerate(t.itertuples()):
            x = len(ticks)
            ticks.append(f"{lab.split()[0]}\n{r.term}")
            ax.errorbar(x, r.coef, yerr=[[r.coef - r.ci95_lo], [r.ci95_hi - r.coef]], fmt="o",
                        color=f"C{j}", capsize=3, label=lab if i == 0 else None)
            if lab.startswith("paper") and r.term in ("log C", "log eta"):
                pub = PUBLISHED["alpha_C"] if r.term == "log C" else PUBLISHED["alpha_eta"]
                ax.plot(x, pub, "r*", ms=11, label="published (arXiv 2606.23546)" if r.term == "log C" else None)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(range(len(ticks)), ticks, fontsize=7)
    ax.set_ylabel("elasticity of E (coefficient, 95 % CI)")
    ax.set_title("Elasticities on the Mayaki ECAI data (cluster-robust by family)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    files["elast"] = "img/scaling_elasticities.png"
    fig.savefig(img / "scaling_elasticities.png", dpi=110)
    plt.close(fig)
    return files


def transfer_table(frames: dict[str, pd.DataFrame]) -> str:
    """The built-in law on the datasets it was not fitted on (``frames``: the loaded datasets)."""
    from .defaults import load_default

    law, _ = load_default()
    out = ["| dataset | rows | median predicted / measured | MAPE E | range of per-family medians |",
           "|---|---|---|---|---|"]
    for name in ("zeus_nsdi23", "perseus"):
        df = frames[name]
        r = law.predict(df) / df["energy_j"].to_numpy(float)
        fam = pd.Series(r).groupby(df["family"].to_numpy()).median()
        out.append(f"| {name} | {len(df)} | {np.median(r):.2f} | {np.mean(np.abs(r - 1)) * 100:.0f} % | "
                   f"{fam.min():.2f}–{fam.max():.2f} |")
    return "\n".join(out)


def frontier_table() -> tuple[str, str]:
    from .frontier import check_all

    out = ["| model | hardware | our FLOPs / published | η̂_hw | law (MWh) [modeled] | physics (MWh) [modeled] | "
           "published (MWh) | law off by | physics off by |", "|---|---|---|---|---|---|---|---|---|"]
    rs = check_all()
    for r in rs:
        p = r["published"]
        out.append(f"| {r['case']} | {r['device']} | {r['flops_ratio']:.2f} | {r['eta_hw_hat']:.2f} | {r['law_mwh']:.0f} | "
                   f"{r['physics_mwh']:.0f} | {p['energy_mwh']} (published, Patterson et al. 2021) | "
                   f"×{r['law_ratio']:.2f} | ×{r['physics_ratio']:.2f} |")
    worst = max(max(r["law_ratio"], 1 / r["law_ratio"], r["physics_ratio"], 1 / r["physics_ratio"]) for r in rs)
    return "\n".join(out), f"Every estimate is within a factor of {worst:.1f} of the published energy."


def prerun_summary(law) -> str:  # noqa: ANN001
    th = law.eff_.to_json()
    c = dict(zip(law.terms_, law.coef_, strict=True))
    return (f"Fitted on all Mayaki rows, θ = ({th['theta_dense']:.2f}, {th['theta_attn']:.1f}, "
            f"{th['theta_attn_mem']:.1f}, {th['t_layer_s'] * 1e3:.0f} ms, {th['t_step_s'] * 1e3:.0f} ms): "
            f"the weight matmuls run at 1/θ₁ = {1 / th['theta_dense']:.2f} of peak, pooled over both GPUs "
            f"(the data's own micro-benchmarked per-op HEF is about 0.64–0.68 of the A100's TF32 peak; "
            f"the 2080 Ti's peak here is the device catalog's, at its top clock), the S×S attention "
            f"products at "
            f"{1 / max(th['theta_attn'], 1e-9):.2f}; α_F = {c['log F']:.2f} and α_η̂ = {c['log eta_hat']:.2f} "
            f"(physics says 1 and −1; the paper published α_η ≈ −1.06).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, type=Path,
                    help="shared data folder (default: $JOULEBOUND_DATA or ../shared/data)")
    ap.add_argument("--docs", default="docs", type=Path)
    a = ap.parse_args()
    from ..datapath import find_data

    a.data = find_data(a.data)
    from .laws import PaperLaw, PreRunLaw

    sections = {}
    frames = {}
    for name in ("mayaki_ecai2025", "zeus_nsdi23", "perseus"):
        df = load(a.data / name)
        frames[name] = df
        sections[name] = (eval_table(evaluate(df, DEFAULT_LAWS, k=5)), df.attrs.get("dropped", {}))
        print(f"evaluated {name}")
    may = frames["mayaki_ecai2025"]
    files = plots(may, a.docs / "img")
    tmpl = (Path(__file__).with_name("report_template.md")).read_text()
    pre = PreRunLaw().fit(may)
    paper = PaperLaw().fit(may)
    pc = dict(zip(paper.terms_, paper.coef_, strict=True))
    front, front_sum = frontier_table()
    drops = {k: "; ".join(f"{n} rows dropped: {why}" for why, n in v[1].items() if n) or "none"
             for k, v in sections.items()}
    page = tmpl.format(
        eval_mayaki=sections["mayaki_ecai2025"][0], eval_zeus=sections["zeus_nsdi23"][0],
        eval_perseus=sections["perseus"][0], drop_mayaki=drops["mayaki_ecai2025"],
        drop_zeus=drops["zeus_nsdi23"], drop_perseus=drops["perseus"],
        coef_paper=coef_table(paper), coef_prerun=coef_table(pre),
        paper_alphas=(f"α_C = {pc['log C']:.2f} and α_η = {pc['log eta']:.2f}"),
        prerun_summary=prerun_summary(pre), transfer=transfer_table(frames), frontier=front,
        frontier_summary=front_sum, **files)
    (a.docs / "scaling.md").write_text(page)
    print(f"wrote {a.docs / 'scaling.md'}")


if __name__ == "__main__":
    main()
