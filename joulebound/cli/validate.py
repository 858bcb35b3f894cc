"""``joulebound validate``: the GPU model's held-out error on real third-party measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from joulebound.cli._common import console, print_json
from joulebound.core.errors import JouleboundError

JSON_HELP = (
    "Print JSON instead of the table: a list of objects with keys check "
    "(perseus-stage|perseus-kernel|perseus-plans|guerreiro|zeus-power-limit|gpuptx|"
    "spaan-table1|nccl-collectives), gpu, "
    "workload, time_mape, "
    "energy_mape (%; power MAPE where energy_quantity is power/avg_power), time_max_err, "
    "energy_max_err (%), n_points, provenance, energy_quantity (energy|power|avg_power|voltage|bandwidth), "
    "published ({value, source} or null), note, split (held-out|in-sample: whether the row's "
    "points were predicted by a fit that did not see them).")


IN_SAMPLE = "in-sample"
HELD_OUT = "held-out"


def row_splits(results: list) -> list[str]:
    """``in-sample`` or ``held-out`` per result row, from its workload text: in-sample when it says
    so or fits on all the points ("fit on ALL clocks", a noise-floor reference); a row whose
    workload begins "same" (the row above, changed) inherits the row above's split; every other
    row is a held-out prediction (the checks name what they hold out in the workload or note)."""
    out: list[str] = []
    for r in results:
        w = r.workload.lower()
        if IN_SAMPLE in w or "fit on all" in w:
            out.append(IN_SAMPLE)
        elif w.startswith("same") and out and results[len(out) - 1].check == r.check:
            out.append(out[-1])
        else:
            out.append(HELD_OUT)
    return out


def load_research():  # -> module
    """The ``research`` package (validation checks and the pipeline that writes the shipped
    parameter files). It lives beside ``joulebound/`` in the source repository and is not in the
    wheel: found on ``sys.path`` (a checkout's root), or next to an editable install."""
    import importlib
    import sys

    try:
        return importlib.import_module("research")
    except ImportError:
        pass
    import joulebound

    root = Path(joulebound.__file__).resolve().parent.parent
    if (root / "research" / "__init__.py").is_file():
        sys.path.insert(0, str(root))
        return importlib.import_module("research")
    raise JouleboundError(
        "`joulebound validate` runs the research checks, which ship with the source repository, "
        "not the wheel: clone the repository, `pip install -e .` from it (or run from its root), "
        "and run the command again")


def validate(
    data: Path = typer.Option(None, "--data", help="The shared data folder (holds MANIFEST.csv); "
                              "default: $JOULEBOUND_DATA or ../shared/data."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    write_docs: Path = typer.Option(None, "--write-docs", metavar="DIR",
                                    help="Also write the results block of DIR/validation.md "
                                         "(created if missing) and the plots DIR/img/"
                                         "validation_*.png; in a checkout `--write-docs docs` "
                                         "regenerates the shipped page. Without it nothing is "
                                         "written."),
    no_doc: bool = typer.Option(False, "--no-doc", hidden=True,
                                help="Accepted for old scripts; writing docs is off by default."),
    only: str = typer.Option(None, "--only", help="Comma list of checks to run (default: all): "
                             "perseus-stage, perseus-kernel, perseus-plans, guerreiro, "
                             "zeus-power-limit, gpuptx, spaan-table1, nccl-collectives (NCCL "
                             "collective times: held-out GPU counts and GPU type)."),
    write_params: bool = typer.Option(False, "--write-params",
                                      help="Also regenerate the shipped device-parameter files "
                                           "(joulebound/gpumodel/params/) from these fits."),
) -> None:
    """Check the GPU time/power model against six public data sets (held-out unless a row
    says in-sample):

    (a) Perseus stage profiles (A100-SXM, A40): 3 calibration clocks per stage, all others
    predicted, by the stage model and (a') by the kernel model fitted at kernel level on one
    model's stages and predicting the other's; (b) Perseus measured pipeline plans (A100-PCIe):
    iteration time and energy of held-out plans; (c) Guerreiro GTX Titan X: board power over
    core x memory clocks, trained on microbenchmarks, tested on 35 applications (published
    gpmTOOL error beside ours); (d) Zeus NSDI'23: time/epoch and average power at lower power
    limits from the highest one; (e) gpuPTXModel GTX Titan X: time and power of 25 applications
    at 32 core x memory pairs from 3 calibration pairs, device parameters fitted on 140
    microbenchmarks; (f) RTX 3080 Ti calibrated on Spaan et al.'s published per-kernel figures
    (Table 1), with leave-one-row-out residuals. Takes about 2 minutes.

    Prints one table (every MAPE is measured-vs-modeled; a row whose points the fit saw says
    in-sample in its workload; --json: the split key) and names each check on stderr as it
    starts; with
    --write-docs DIR also the results block of DIR/validation.md and its plots under DIR/img/.
    """
    from joulebound.core.datapath import find_data

    load_research()
    from research.report import plot_all, run_all, write_markdown

    root = find_data(data)
    checks = [c.strip() for c in only.split(",") if c.strip()] if only else None
    if write_params and checks is not None:
        raise JouleboundError("--write-params needs every check: drop --only")
    from joulebound.core.progress import StepProgress

    # each check takes seconds to a minute: named on stderr as it starts (a spinner on a terminal)
    try:
        with StepProgress("validate", after_s=0) as step:
            run = run_all(root, progress=step, only=checks)
    except FileNotFoundError as exc:
        raise JouleboundError(
            f"{exc}. A check needs a data file the folder {root} lacks: fetch the upstream files "
            "with `joulebound data fetch --to DIR` (files the data's maintainers wrote or "
            "derived, such as the transcribed Spaan et al. table, come only with the shared data "
            "folder), or leave that check out with --only") from None
    run.extras["data"] = root
    doc = None
    if write_docs is not None:
        if write_docs.exists() and not write_docs.is_dir():
            raise JouleboundError(f"--write-docs {write_docs} is a file; pass the folder that "
                                  "holds (or will hold) validation.md, e.g. --write-docs docs")
        doc = write_docs / "validation.md"
        write_markdown(run, doc, plot_all(run, write_docs / "img"))
    if write_params:
        from research.write_params import write_params as write_shipped

        with console.status("bootstrap draws") as st:
            written = write_shipped(run, progress=lambda msg: st.update(msg))
        for w in written:
            console.print(f"wrote {w}")
    if json_out:
        print_json([{**r.to_json(), "split": s} for r, s in zip(run.results, row_splits(run.results),
                                                                 strict=True)])
        return
    console.print(results_table(run.results))
    console.print("Errors are on held-out points except the rows whose workload says in-sample "
                  "(how well a fit reproduces the points it saw). (P) = board power, "
                  "(avgP) = average power, (V) = supply voltage, (BW) = DRAM bandwidth "
                  "instead of energy. Published: " + "; ".join(
                      f"{r.published['value']} % = {r.published['source']}"
                      for r in run.results if r.published))
    if doc is not None:
        console.print(f"wrote {doc} and plots in {doc.parent / 'img'}")


def results_table(results: list) -> Any:  # list[CheckResult] -> rich Table
    """The validation table: one section per check (its name on the section's first row, never
    truncated), every MAPE measured-vs-modeled (title), each in-sample row marked in its workload
    (:func:`row_splits`), a paper's own (published) error in "paper %"."""
    from rich import box
    from rich.table import Table

    t = Table(title="joulebound GPU model vs real measurements (measured vs modeled; held-out "
                    "unless the workload says in-sample)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
              collapse_padding=True)
    t.add_column("check", no_wrap=True)
    t.add_column("gpu", min_width=8)
    t.add_column("workload", min_width=10)
    for col in ("time\nMAPE %", "energy\nMAPE %", "max\nt %", "max\ne %", "n", "paper\n%"):
        t.add_column(col, justify="right", no_wrap=True)

    def f(x: float | None) -> str:
        return "–" if x is None else f"{x:.2f}"

    prev = None
    for r, split in zip(results, row_splits(results), strict=True):
        if prev is not None and r.check != prev:
            t.add_section()
        q = {"energy": "", "power": " (P)", "avg_power": " (avgP)",
             "voltage": " (V)", "bandwidth": " (BW)"}[r.energy_quantity]
        w = r.workload if split == HELD_OUT or IN_SAMPLE in r.workload.lower() \
            else f"{r.workload} ({IN_SAMPLE})"
        t.add_row(r.check if r.check != prev else "", r.gpu, w, f(r.time_mape),
                  f(r.energy_mape) + q, f(r.time_max_err), f(r.energy_max_err),
                  str(r.n_points), str(r.published["value"]) if r.published else "")
        prev = r.check
    return t


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("validate", help=reflow(validate.__doc__ or ""))(validate)
