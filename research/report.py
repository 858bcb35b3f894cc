"""Run all checks; write the results block of a ``validation.md`` with measured-vs-modeled plots
(``joulebound validate --write-docs DIR``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from research import (
    energaizer,
    gpuptx,
    guerreiro,
    mlp_probe,
    nccl_collectives,
    perseus_kernel,
    perseus_plans,
    perseus_stage,
    spaan,
    zeus,
)
from research.result import CheckResult


@dataclass
class ValidationRun:
    results: list[CheckResult]
    extras: dict[str, Any] = field(default_factory=dict)


#: check names in run order (``validate --only`` takes a comma list of these)
CHECKS = ("perseus-stage", "perseus-kernel", "perseus-plans", "guerreiro", "zeus-power-limit",
          "gpuptx", "spaan-table1", "spaan-totals", "energaizer-idle", "mlp-probe",
          "nccl-collectives")


def run_all(data: Path, progress: Callable[[str], None] | None = None,
            only: list[str] | None = None) -> ValidationRun:
    """Run checks (a)–(f) on the data folder (``only``: a subset of :data:`CHECKS`);
    ``progress(label)`` is called before each."""
    say = progress or (lambda _s: None)
    want = set(CHECKS if not only else only)
    unknown = want - set(CHECKS)
    if unknown:
        from joulebound.core.errors import JouleboundError

        raise JouleboundError(f"unknown check(s) {', '.join(sorted(unknown))}; known: "
                              f"{', '.join(CHECKS)}")
    out: list[CheckResult] = []
    extras: dict[str, Any] = {}
    shipped = None
    if want & {"perseus-stage", "perseus-plans"}:
        say("(a) Perseus stage profiles")
        shipped = perseus_stage.shipped_fits(data)     # fitted once: notes, plots, plans' V-f
        extras["stage_models"] = shipped
        if "perseus-stage" in want:
            out += perseus_stage.run(data, shipped=shipped)
    if "perseus-kernel" in want:
        say("(a') kernel model fitted at kernel level on Perseus stage profiles")
        res, kfits = perseus_kernel.run(data)
        out += res
        extras["kernel_fits"] = kfits
    if "perseus-plans" in want:
        say("(b) Perseus measured plans")
        res, prm = perseus_plans.run(data, shipped["a100_sxm"].vf_)  # type: ignore[index]
        out += res
        extras["plan_params"] = prm
    if "guerreiro" in want:
        say("(c) Guerreiro GTX Titan X")
        res, gm = guerreiro.run(data)
        out += res
        extras["guerreiro_model"] = gm
    if "zeus-power-limit" in want:
        say("(d) Zeus power-limit traces")
        out += zeus.run(data)
    if "gpuptx" in want:
        say("(e) gpuPTXModel GTX Titan X: time and power over core x memory clocks")
        res, titanx = gpuptx.run(data)
        out += res
        extras["titanx_params"] = titanx
    if "spaan-table1" in want:
        say("(f) RTX 3080 Ti on Spaan et al. Table 1 (published per-kernel figures)")
        res, sp = spaan.run(data)
        out += res
        extras["spaan"] = sp
    if "spaan-totals" in want:
        say("(g) RTX 3080 Ti plans vs Spaan et al.'s published totals (held out)")
        out += spaan.totals_check()
    if "energaizer-idle" in want:
        say("(h) idle power and voltage per locked clock, A100 / H100 (EnergAIzer)")
        res, idle = energaizer.run(data)
        out += res
        extras["idle_fits"] = idle
    if "mlp-probe" in want:
        say("(i) streaming bandwidth vs SMs issuing on an H200 (joulebound's probe)")
        out += mlp_probe.run()
    if "nccl-collectives" in want:
        say("(j) NCCL collective times, H100 / H200 NVSwitch and V100 PCIe (held-out GPU counts)")
        out += nccl_collectives.run(data)
    return ValidationRun(out, extras)


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def table_markdown(results: list[CheckResult]) -> str:
    head = ("| check | GPU | workload | time MAPE % | energy/power MAPE % | max time err % | "
            "max energy/power err % | n | quantity | published |\n|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for r in results:
        pub = f"{r.published['value']:.1f} % (published)" if r.published else ""
        rows.append(f"| {r.check} | {r.gpu} | {r.workload} | {_fmt(r.time_mape)} | "
                    f"{_fmt(r.energy_mape)} | {_fmt(r.time_max_err)} | {_fmt(r.energy_max_err)} | "
                    f"{r.n_points} | {r.energy_quantity} | {pub} |")
    return head + "\n" + "\n".join(rows)


def plot_all(run: ValidationRun, img_dir: Path) -> list[Path]:
    """Scatter/line plots of measured vs modeled, one PNG per check."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    # (a) one A40 and one A100 series over clock: measured vs modeled, calibration clocks marked
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, gpu in enumerate(("a100_sxm", "a40") if "stage_models" in run.extras else ()):
        sd_model = run.extras["stage_models"][gpu]
        from research.perseus_stage import load_stage_profiles  # local: cheap

        sd = load_stage_profiles(_data_of(run), gpu)
        for sid, color in ((0, "C0"), (1, "C1")):
            m = sd.sid == sid
            tp, ep = sd_model.predict(sd.freq[m], sd.sid[m])
            lab = "/".join(str(x) for x in sd.series[sid])
            axes[0, col].plot(sd.freq[m], sd.time[m], "o", ms=3, color=color, label=f"{lab} measured")
            axes[0, col].plot(sd.freq[m], tp, "-", color=color, label=f"{lab} modeled")
            axes[1, col].plot(sd.freq[m], sd.energy[m] / sd.time[m], "o", ms=3, color=color)
            axes[1, col].plot(sd.freq[m], ep / tp, "-", color=color)
            c = m & sd.calib
            axes[0, col].plot(sd.freq[c], sd.time[c], "kx", ms=8)
        axes[0, col].set_title(f"Perseus stage profile, {gpu} (x = calibration clocks)")
        axes[0, col].set_ylabel("time per stage pass (s)")
        axes[1, col].set_ylabel("average power (W)")
        axes[1, col].set_xlabel("SM clock (MHz)")
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    paths.append(img_dir / "validation_stage.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    # (b): per held-out plan, % error of time and energy
    rows = [r for r in run.results if r.check == "perseus-plans" and r.points]
    if rows:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for r in rows:
            p = r.points
            axes[0].plot(p["t_meas"] / p["t_meas"].min(), p["t_pred"] / p["t_meas"].min(), "o",
                         ms=4, label=r.workload)
            axes[1].plot(p["e_meas"] / p["e_meas"].min(), p["e_pred"] / p["e_meas"].min(), "o",
                         ms=4, label=r.workload)
        for ax, q in zip(axes, ("iteration time", "iteration energy"), strict=True):
            lo, hi = ax.get_xlim()
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlabel(f"measured {q} / fastest-plan value")
            ax.set_ylabel(f"modeled {q} / same")
        axes[0].legend(fontsize=8)
        fig.suptitle("Perseus A100-PCIe plans (held-out, odd-indexed): measured vs modeled")
        fig.tight_layout()
        paths.append(img_dir / "validation_plans.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    # (c), (d): predicted vs measured scatter
    for check, fname in (
                         ("guerreiro", "validation_guerreiro.png"),
                         ("zeus-power-limit", "validation_zeus.png")):
        rows = [r for r in run.results if r.check == check and r.points]
        if not rows:
            continue
        has_t = any("t_meas" in r.points for r in rows)
        fig, axes = plt.subplots(1, 2 if has_t else 1, figsize=(10 if has_t else 5.5, 4.5))
        axes = np.atleast_1d(axes)
        for r in rows:
            lab = f"{r.gpu} {r.workload}"
            k = 0
            if has_t and "t_meas" in r.points:
                axes[0].plot(r.points["t_meas"], r.points["t_pred"], ".", label=lab)
                k = 1
            if "fm" in r.points:  # colour by memory clock
                for fm in np.unique(r.points["fm"]):
                    sel = r.points["fm"] == fm
                    axes[k].plot(r.points["e_meas"][sel], r.points["e_pred"][sel], ".", ms=3,
                                 label=f"{lab}, memory {fm:.0f} MHz")
            else:
                axes[k].plot(r.points["e_meas"], r.points["e_pred"], ".", ms=3, label=lab)
        for ax, q in zip(axes, (["time (s)", "energy (J)" if check == "perseus-plans" else
                                 "average power (W)"] if has_t else ["power (W)"]), strict=False):
            lo, hi = ax.get_xlim()
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlabel(f"measured {q}")
            ax.set_ylabel(f"modeled {q}")
            if has_t and "time" in q and check == "zeus-power-limit":
                ax.set_xscale("log")
                ax.set_yscale("log")
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{check}: held-out points, measured vs modeled")
        fig.tight_layout()
        paths.append(img_dir / fname)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _data_of(run: ValidationRun) -> Path:
    return run.extras["data"]


def write_markdown(run: ValidationRun, doc: Path, img_paths: list[Path]) -> Path:
    """Write the generated results block into ``doc`` between the markers (created if needed)."""
    start, end = "<!-- validate:results -->", "<!-- /validate:results -->"
    rel = [p.relative_to(doc.parent) if p.is_relative_to(doc.parent) else p for p in img_paths]
    block = [start, f"_Generated by `joulebound validate --data ../shared/data --write-docs docs` on "
             f"{dt.date.today().isoformat()}. Measured values come from the data files; modeled "
             f"values from joulebound; `published` values are the papers' own figures, cited._", "",
             table_markdown(run.results), ""]
    for p in rel:
        block.append(f"![{p.stem}]({p})")
        block.append("")
    block.append(end)
    text = "\n".join(block)
    if doc.exists():
        old = doc.read_text()
        if start in old and end in old:
            pre, rest = old.split(start, 1)
            post = rest.split(end, 1)[1]
            doc.write_text(pre + text + post)
            return doc
        doc.write_text(old.rstrip() + "\n\n" + text + "\n")
        return doc
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("# Validation of the GPU model on real data\n\n" + text + "\n")
    return doc
