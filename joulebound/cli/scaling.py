"""``joulebound fit`` / ``predict`` / ``advise``: the energy scaling model on the command line."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import JouleboundError
from ._common import console, print_json, reflow

FIT_HELP = """Fit an energy law (and speedup laws) to measured data and print the evaluation table.

--data is the shared data folder (all open datasets, one table each), one of its sub-folders
(mayaki_ecai2025, zeus_nsdi23, perseus) or a sweep store runs.db. Laws: roofline, powerlaw,
paper (η = measured MFU), paper-speedup (η = measured S(N)/N; added automatically when every
multi-GPU row has a speedup), paper-no-eta, prerun, device-seconds, config-only, hgb.

Data with runtimes over GPU counts also gets the speedup laws (TP saturating exponential,
FSDP/DDP generalized Amdahl). Data with no energy (no sensor) gets only the speedup laws.

--json keys: datasets[] = {dataset, source, rows, dropped{reason: n}, law, coefficients[] {term,
coef, se, ci95_lo, ci95_hi, p}, cov_type, adj_r2, evaluation[] {law, post_run, n, families,
adj_r2_in_sample, cv_k, cv_r2_log, cv_rmse_log, cv_mape, cv_conformal_coverage,
cv_conformal_median_width_factor, shift_r2_log, shift_rmse_log, shift_mape, shift_n_fit,
shift_n_pred, cv_note / shift_note (why a held-out figure is missing), note (why the law could
not be fitted)}, speedup[] {family, strategy, law, params, stderr, pinned, n_points, rmse,
max_gpus_seen; or note when the fit failed}, notes[]}, published {adj_r2_with_eta,
adj_r2_without_eta, alpha_C, alpha_eta, citation, setting, provenance="published"}, saved (the
--save path or null). Our figures are modeled (errors
against measured energy)."""

CONFIG_KEYS = """--json keys: energy_j, energy_lo_j, energy_hi_j (90 % split-conformal interval), time_s,
steps, energy_per_step_j, eta_hw (predicted hardware efficiency), eta_par (predicted parallel
efficiency S(N)/N), law, provenance ("modeled"), warnings[]."""


ADVISE_HELP = """Strategy × GPU count that minimises training energy under a deadline (modeled with the
pre-run law and the communication model).

Every strategy of --strategies is priced at 1, 2, 4, … --max-gpus GPUs (one GPU: single). The
advice is the lowest-energy candidate that meets --deadline and whose model states (16 B/parameter,
split N ways by FSDP/TP) fit in GPU memory; when none meets the deadline, the fastest that fits.

--json keys: best {strategy, gpus, energy_j, energy_lo_j, energy_hi_j (90 % interval), time_s,
eta_par, meets_deadline, state_bytes_per_gpu, fits_memory}, candidates[] (same keys, lowest energy
first), provenance ("modeled"). Units: J, s, bytes."""


def _table_console():  # noqa: ANN202
    """The terminal's console, or a 132-column one when output is piped (tables stay unwrapped)."""
    from rich.console import Console

    return console if console.is_terminal else Console(width=max(console.width, 132))


def _speedup_rows(df) -> list[dict]:  # noqa: ANN001
    """Fit a speedup law per (family, strategy) from per-step times over GPU counts."""
    import numpy as np

    from ..scaling.speedup import fit_speedup

    out = []
    for (fam, strat), g in df[df["strategy"] != "single"].groupby(["family", "strategy"]):
        base = df[(df["family"] == fam) & (df["gpus"] == 1)]
        if g["speedup"].notna().any():
            n, s = g["gpus"].to_numpy(float), g["speedup"].to_numpy(float)
        elif len(base):
            t1 = float(base["time_s"].mean())  # same global batch: work per step is equal
            n, s = g["gpus"].to_numpy(float), t1 / g["time_s"].to_numpy(float)
        else:
            continue
        if len(np.unique(n[n > 1])) < 1:
            continue
        try:
            fit = fit_speedup(strat, n, s)
        except (RuntimeError, ValueError, JouleboundError) as exc:
            out.append({"family": fam, "strategy": strat, "note": f"fit failed: {exc}"})
            continue
        out.append({"family": fam, "strategy": strat, **fit.to_json()})
    return out


def _fit_one(df, law_name: str, laws: tuple[str, ...], k: int) -> dict:  # noqa: ANN001
    import numpy as np

    from ..scaling.evaluate import evaluate
    from ..scaling.laws import make_law

    rec: dict = {"dataset": str(df["dataset"].iloc[0]) if len(df) else "?",
                 "source": df.attrs.get("source"), "rows": len(df),
                 "dropped": df.attrs.get("dropped", {}), "law": law_name, "notes": []}
    rec["speedup"] = _speedup_rows(df) if len(df) and (df["gpus"] > 1).any() else []
    if not rec["speedup"]:
        rec["notes"].append("no runtimes over GPU counts (with a 1-GPU run of the same shape): "
                            "speedup laws not fitted")
    has_e = df["energy_j"].notna() & (df["energy_j"] > 0)
    if "energy_provenance" in df and (has_e & (df["energy_provenance"] == "modeled")).any():
        n_mod = int((has_e & (df["energy_provenance"] == "modeled")).sum())
        rec["notes"].append(f"{n_mod} rows have modeled (simulated-meter) energy: left out, the energy "
                            "laws are fitted on measured energy only")
        has_e &= df["energy_provenance"] != "modeled"
    if df["peak_flops"].isna().any() and has_e.any():
        rec["notes"].append(f"{int(df['peak_flops'].isna().sum())} CPU rows have no GPU peak: left out "
                            "of the energy laws")
        has_e &= df["peak_flops"].notna()
    if not has_e.any():
        rec["notes"].append("no row has measured energy_j (no sensor): energy laws need energy; only "
                            "the speedup laws were fitted")
        return rec
    if (~has_e).any():
        rec["notes"].append(f"{int((~has_e).sum())} rows without energy_j left out of the energy laws")
    de = df[has_e].copy()
    de.attrs = df.attrs
    multi = de[de["gpus"] > 1]
    if len(multi) and multi["speedup"].notna().all() and "paper-speedup" not in laws:
        laws = (*laws, "paper-speedup")  # the paper's own η = S(N)/N is available
    law = make_law(law_name).fit(de)
    rec["coefficients"] = law.coef_table().to_dict("records")
    rec["cov_type"] = getattr(law, "cov_type_", None)
    rec["adj_r2"] = law.rsquared_adj_
    with console.status(f"evaluating {len(laws)} laws on {rec['dataset']} (grouped {k}-fold)…") as st:
        table = evaluate(de, laws, k=k, progress=lambda n: st.update(f"evaluated {n}"))
    rec["evaluation"] = table.replace({np.nan: None}).to_dict("records")
    if de["family"].nunique() < 5:
        rec["notes"].append(f"only {de['family'].nunique()} configuration families: held-out "
                            "figures rest on very few groups")
    return rec


def _print_fit(rec: dict, published: dict) -> None:
    from rich.table import Table

    out = _table_console()

    console.rule(f"[bold]{rec['dataset']}[/] — {rec['rows']} rows ({rec.get('source')})")
    for why, n in rec["dropped"].items():
        if n:
            console.print(f"  dropped {n} rows: {why}")
    for note in rec["notes"]:
        console.print(f"  [yellow]note:[/] {note}")
    if rec.get("coefficients"):
        t = Table(title=f"law '{rec['law']}' coefficients (modeled; 95 % CI, {rec.get('cov_type')} SEs)")
        for c in ("term", "coef", "se", "95 % CI"):
            t.add_column(c)
        for r in rec["coefficients"]:
            ci = "" if r["ci95_lo"] != r["ci95_lo"] else f"[{r['ci95_lo']:.4g}, {r['ci95_hi']:.4g}]"
            t.add_row(str(r["term"]), f"{r['coef']:.4g}", "" if r["se"] != r["se"] else f"{r['se']:.3g}", ci)
        out.print(t)
    if rec.get("evaluation"):
        t = Table(title="evaluation (modeled vs measured energy; grouped K-fold by family)",
                  show_lines=False, pad_edge=False)
        cols = [("law", "law"), ("post", "post_run"), ("adjR²", "adj_r2_in_sample"),
                ("cvR²", "cv_r2_log"), ("cvRMSE", "cv_rmse_log"), ("cvMAPE", "cv_mape"),
                ("cov90", "cv_conformal_coverage"), ("shiftR²", "shift_r2_log"),
                ("shiftMAPE", "shift_mape")]
        for h, _ in cols:
            t.add_column(h, no_wrap=True)
        for r in rec["evaluation"]:
            cells = []
            for _, key in cols:
                v = r.get(key)
                if v is None:
                    cells.append(r.get("note", "")[:40] if key == "post_run" and "note" in r else "–")
                elif isinstance(v, bool):
                    cells.append("yes" if v else "no")
                elif isinstance(v, float):
                    cells.append(f"{v * 100:.1f}%" if "mape" in key or "cover" in key else f"{v:.3f}")
                else:
                    cells.append(str(v))
            t.add_row(*cells)
        out.print(t)
        console.print(f"  published (Zoubeirou a Mayaki, arXiv 2606.23546; 410 BERT configs, 8× RTX 2080 Ti): "
                      f"adj R² {published['adj_r2_with_eta']} with η, {published['adj_r2_without_eta']} "
                      f"without; α_C ≈ {published['alpha_C']}, α_η ≈ {published['alpha_eta']}  \\[published]")
    for s in rec.get("speedup", []):
        if "params" in s:
            ps = ", ".join(f"{k}={v:.4g}" for k, v in s["params"].items())
            console.print(f"  speedup law {s['law']} for {s['family']} / {s['strategy']}: {ps} "
                          f"(RMSE {s['rmse']:.3g}, {s['n_points']} points, pinned {s['pinned'] or '–'}) \\[modeled]")
        else:
            console.print(f"  speedup {s['family']} / {s['strategy']}: {s.get('note')}")


def fit(
    data: Path = typer.Option(None, "--data", help="shared data folder, a sub-dataset folder, or a "
                              "sweep runs.db (default: $JOULEBOUND_DATA or ../shared/data)"),
    law: str = typer.Option("prerun", "--law", help="energy law to fit and show coefficients for"),
    laws: str = typer.Option("roofline,powerlaw,paper-no-eta,paper,prerun,device-seconds,config-only,hgb",
                             "--laws", help="comma-separated laws in the evaluation table"),
    folds: int = typer.Option(5, "--folds", help="K of the grouped K-fold"),
    device: str = typer.Option(None, "--device", help="GPU of a sweep store whose rows do not name it"),
    save: Path = typer.Option(None, "--save", help="write the fitted pre-run law (with its held-out "
                              "error) to this JSON file, for predict/advise --coefficients"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output (keys in --help)"),
) -> None:
    from ..scaling import datasets
    from ..scaling.evaluate import PUBLISHED
    from ..scaling.laws import make_law

    if folds < 2:
        raise JouleboundError(f"--folds must be >= 2 for a held-out evaluation (got {folds})")
    make_law(law)  # validate the name early
    law_list = tuple(x.strip() for x in laws.split(",") if x.strip())
    for x in law_list:
        make_law(x)
    if save is not None and save.is_dir():
        raise JouleboundError(f"--save {save} is a folder; pass a file name such as {save / 'law.json'}")
    if data is None:
        from ..datapath import find_data

        data = find_data()
    df = datasets.load(data, device=device)
    recs = []
    for _, g in df.groupby("dataset", sort=False):
        g = g.reset_index(drop=True)
        g.attrs = {"source": df.attrs.get("source"),
                   "dropped": {k.split(": ", 1)[-1]: v for k, v in df.attrs.get("dropped", {}).items()
                               if df["dataset"].nunique() == 1 or k.startswith(str(g["dataset"].iloc[0]))}}
        recs.append(_fit_one(g, law, law_list, folds))
    if save is not None:
        import json

        from ..scaling.defaults import law_record

        de = df[df["energy_j"].notna() & (df["energy_j"] > 0) & df["peak_flops"].notna()]
        if "energy_provenance" in de:
            de = de[de["energy_provenance"] != "modeled"]
        if de.empty:
            raise JouleboundError("--save needs rows with measured energy; this data has none")
        rec = law_record(de.reset_index(drop=True), f"{data} ({len(de)} rows with measured energy)",
                         k=min(folds, int(de["family"].nunique())))
        try:
            save.write_text(json.dumps(rec, indent=1) + "\n")
        except OSError as exc:
            raise JouleboundError(f"--save {save}: cannot write ({exc.strerror})") from None
    if as_json:
        print_json({"datasets": recs, "published": PUBLISHED, "saved": str(save) if save else None})
        return
    for r in recs:
        _print_fit(r, PUBLISHED)
    if save is not None:
        console.print(f"saved the pre-run law to {save} (use predict/advise --coefficients {save})")


def _parse_duration(s: str) -> float:
    s = str(s).strip().lower()
    mult = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
    for suf in ("min", "s", "m", "h", "d"):
        if s.endswith(suf):
            try:
                return float(s[: -len(suf)]) * mult[suf]
            except ValueError:
                break
    try:
        return float(s)
    except ValueError:
        raise JouleboundError(f"cannot read duration {s!r}; use seconds or a suffix like 90m, 12h, 2d") from None


def _config(model, layers, hidden, heads, seq, batch, device, dtype, ff, vocab) -> dict:  # noqa: ANN001
    return dict(model=model, layers=layers, hidden=hidden, heads=heads, seq=seq, batch=batch,
                device=device, dtype=dtype, ff=ff, vocab=vocab)


# The job options shared by predict and advise (one definition, one help text).
_MODEL = typer.Option("bert", "--model", help="architecture: bert | gpt | t5 (vocabulary default)")
_LAYERS = typer.Option(..., "--layers", help="transformer layers L")
_HIDDEN = typer.Option(..., "--hidden", help="hidden size d")
_HEADS = typer.Option(..., "--heads", help="attention heads (divide --hidden)")
_SEQ = typer.Option(..., "--seq", help="sequence length (tokens)")
_BATCH = typer.Option(..., "--batch", help="global batch (sequences per step, all GPUs)")
_TOKENS = typer.Option(..., "--tokens", help="training tokens in total (e.g. 1e8)")
_DEVICE = typer.Option("rtx2080ti", "--device", help="GPU name (e.g. rtx2080ti, a100, h100)")
_DTYPE = typer.Option("fp32", "--dtype", help="fp32 | bf16 | fp16")
_FF = typer.Option(None, "--ff", help="feed-forward width (default 4·hidden)")
_VOCAB = typer.Option(None, "--vocab", help="vocabulary size (default by --model)")
_COEFFICIENTS = typer.Option(None, "--coefficients", help="a law saved by `joulebound fit --save` "
                             "(default: the built-in law)")
_JSON = typer.Option(False, "--json", help="machine-readable output (keys in --help)")


def predict(
    model: str = _MODEL,
    layers: int = _LAYERS,
    hidden: int = _HIDDEN,
    heads: int = _HEADS,
    seq: int = _SEQ,
    batch: int = _BATCH,
    tokens: float = _TOKENS,
    gpus: int = typer.Option(1, "--gpus", help="number of GPUs N (>= 1)"),
    strategy: str = typer.Option("single", "--strategy", help="single | ddp | fsdp | tp | pp"),
    device: str = _DEVICE,
    dtype: str = _DTYPE,
    ff: int = _FF,
    vocab: int = _VOCAB,
    coefficients: Path = _COEFFICIENTS,
    as_json: bool = _JSON,
) -> None:
    from ..scaling.defaults import predict_job

    p = predict_job(tokens, gpus=gpus, strategy=strategy, coefficients=coefficients,
                    **_config(model, layers, hidden, heads, seq, batch, device, dtype, ff, vocab))
    if as_json:
        print_json(p.to_json())
        return
    console.print(f"energy  {p.energy_j / 3.6e6:.4g} kWh  (90 % interval {p.energy_lo_j / 3.6e6:.4g}–"
                  f"{p.energy_hi_j / 3.6e6:.4g} kWh)  \\[modeled]")
    console.print(f"time    {p.time_s / 3600:.4g} h over {p.steps:.4g} steps  \\[modeled]")
    console.print(f"η̂_hw {p.eta_hw:.3f}  η̂_par {p.eta_par:.3f}  \\[modeled]  law: {p.law}")
    for w in p.warnings:
        console.print(f"[yellow]note:[/] {w}")


def advise(
    model: str = _MODEL,
    layers: int = _LAYERS,
    hidden: int = _HIDDEN,
    heads: int = _HEADS,
    seq: int = _SEQ,
    batch: int = _BATCH,
    tokens: float = _TOKENS,
    deadline: str = typer.Option(..., "--deadline", help="wall-time budget: seconds or 90m / 12h / 2d"),
    max_gpus: int = typer.Option(8, "--max-gpus", help="largest GPU count to consider (1, 2, 4, … and this)"),
    strategies: str = typer.Option("ddp,fsdp,tp", "--strategies", help="comma-separated strategies "
                                   "(ddp, fsdp, tp, pp) tried at every GPU count > 1"),
    device: str = _DEVICE,
    dtype: str = _DTYPE,
    ff: int = _FF,
    vocab: int = _VOCAB,
    coefficients: Path = _COEFFICIENTS,
    as_json: bool = _JSON,
) -> None:
    from rich.table import Table

    from ..scaling import advisor

    out = _table_console()
    best, cands = advisor.advise(tokens, _parse_duration(deadline), max_gpus,
                                 tuple(s.strip() for s in strategies.split(",") if s.strip()),
                                 coefficients=coefficients, **_config(model, layers, hidden, heads, seq, batch, device, dtype, ff, vocab))
    if as_json:
        print_json(advisor.to_json(best, cands))
        return
    t = Table(title="strategy × GPU count (modeled, pre-run law)")
    for c in ("strategy", "GPUs", "energy kWh (90 % interval)", "time h", "η̂_par", "deadline",
              "states GiB/GPU"):
        t.add_column(c)
    for c in cands:
        mark = "[bold green]→ " if c is best else ""
        t.add_row(mark + c.strategy, str(c.gpus),
                  f"{c.energy_j / 3.6e6:.4g} ({c.energy_lo_j / 3.6e6:.3g}–{c.energy_hi_j / 3.6e6:.3g})",
                  f"{c.time_s / 3600:.3g}", f"{c.eta_par:.2f}", "ok" if c.meets_deadline else "miss",
                  f"{c.state_bytes_per_gpu / 2**30:.3g}" + ("" if c.fits_memory else " (too big)"))
    out.print(t)
    if not best.meets_deadline:
        console.print("[yellow]no candidate meets the deadline; the fastest that fits is marked[/]")
    console.print("memory: model states only (16 B/parameter; activations not counted)")


def register(app: typer.Typer) -> None:
    app.command("fit", help=reflow(FIT_HELP))(fit)
    app.command("predict", help="Predict the energy (J, with a 90 % interval) and time of a training "
                "job before running it, from built-in coefficients (no data folder needed).\n\n"
                + reflow(CONFIG_KEYS))(predict)
    app.command("advise", help=reflow(ADVISE_HELP))(advise)
