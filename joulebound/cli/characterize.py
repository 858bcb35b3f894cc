"""``joulebound characterize``: time and energy of every kernel at every clock pair."""

from __future__ import annotations

from pathlib import Path

import typer

from joulebound.cli._common import console, print_json
from joulebound.core.provenance import MEASURED, MODELED

JSON_HELP = ("Print JSON: device, trace, n_kernels, n_configs, provenance (modeled | measured | "
             "measured+modeled), measured_cells, params_calibration (fit | published | transfer | "
             "none), power_limit_w, capped_cells_fraction, untested_mem_mhz_excluded, iteration "
             "(per config label: time_s, energy_j, avg_power_w — whole-trace sums, modeled unless "
             "all cells measured), best_energy_config, best_energy_delta (vs auto, fraction), "
             "best_energy_delta_lo / _hi (5-95 % over parameter draws, null without draws), "
             "bytes_sensitivity ({0.5, 1, 2}: best_energy_delta with every kernel's DRAM bytes "
             "scaled), model_heldout_error, memory_warning (text when the step does not fit the "
             "device's memory, else null), output, csv (paths or null).")
CSV_COLUMNS = ("kernel_index", "name", "category", "phase", "layer", "core_mhz", "mem_mhz",
               "time_s", "energy_j", "provenance")


def characterize_cmd(
    trace: str = typer.Argument(None, help="Preset name (gpt3-xl, bert-large, ...), a trace "
                                "file, or a Kineto JSON. Optional with --measured (then the table "
                                "must be a complete grid)."),
    device: str = typer.Option(..., "--device", "-d", help="GPU catalog name, e.g. rtx3080ti."),
    measured: Path = typer.Option(None, "--measured", help="CSV with columns kernel, core, mem, "
                                  "time (s), energy (J), repeats. Each measured kernel's work and "
                                  "power activity are fitted to its cells (3 clocks suffice), the "
                                  "other clocks are modeled from the fit, measured cells are kept."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the Characterization (.npz); "
                                "missing folders are created (a note says which)."),
    csv_out: Path = typer.Option(None, "--csv", help="Write one CSV row per (kernel, clock "
                                 "config): kernel_index, name, category, phase, layer, core_mhz "
                                 "and mem_mhz (MHz or 'auto'), time_s, energy_j, provenance "
                                 "(measured | modeled)."),
    allow_untested_clocks: bool = typer.Option(
        False, "--allow-untested-clocks", help="Also characterize memory clocks never measured "
        "on this GPU's memory technology (e.g. 810/405 MHz on GDDR6X)."),
    batch: int = typer.Option(None, help="Override the preset's batch size."),
    seq: int = typer.Option(None, help="Override the preset's sequence length."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Model (or load measured) time and energy of every kernel at every supported
    (core, memory) clock pair of DEVICE, plus "auto" (the GPU's own governor).

    Cells are labeled measured (from --measured) or modeled (joulebound's GPU model with the
    device's shipped calibrated parameters — or, without any, datasheet defaults). Prints a
    summary: the whole iteration at auto, at the top clocks and at the least-energy pair.
    """
    from joulebound.cli._common import err_console
    from joulebound.planning.workflow import characterize_target

    res = characterize_target(trace, device, measured=measured,
                              allow_untested=allow_untested_clocks, batch=batch, seq=seq)
    if res.memory_warning:
        err_console.print(f"[yellow]warning[/]: {res.memory_warning}", highlight=False)
    char, spec_name = res.char, res.device
    from joulebound.core.paths import missing_folder

    for path, write in ((output, lambda p: char.save(p)),
                        (csv_out, lambda p: write_csv(char, res.trace, p))):
        if path is None:
            continue
        made = missing_folder(Path(path).parent)
        write(path)
        if made is not None:
            err_console.print(f"note: created folder {made} for {path}", highlight=False,
                              soft_wrap=True)
    if json_out:
        print_json(res.to_json(output, csv_out))
        return
    spec = res.spec
    name, best, auto = res.name, res.best, char.auto_index
    it_t = char.time_s.sum(axis=0)
    it_e = char.energy_j.sum(axis=0)
    best_delta, lo, hi = res.best_energy_delta, res.best_energy_delta_lo, res.best_energy_delta_hi
    sens, heldout = res.bytes_sensitivity, res.heldout
    top = next((j for j, c in enumerate(char.configs)
                if c.core_mhz == spec.max_core_mhz and c.mem_mhz == spec.max_mem_mhz), None)
    prov = char.provenance()
    from rich.table import Table

    t = Table(title=f"{name} on {spec_name}: whole iteration ({prov})")
    for col in ("config", "time (s)", "energy (J)", "avg power (W)", "provenance"):
        t.add_column(col, justify="left" if col in ("config", "provenance") else "right")
    rows = [("auto (governor)", auto), ("top clocks", top), ("least energy", best)]
    for label, j in rows:
        if j is None:
            continue
        t.add_row(f"{label}: {char.configs[j].label}", f"{it_t[j]:.4f}", f"{it_e[j]:.2f}",
                  f"{it_e[j] / it_t[j]:.1f}", char.provenance(j))
    console.print(t)
    from joulebound.core.fmt import fmt_pct, fmt_range

    if best_delta is not None:
        line = (f"least-energy pair {char.configs[best].label}: {fmt_pct(best_delta)} energy vs "
                f"auto ({prov})")
        if lo is not None:
            line += f", 5-95 % over parameter draws {fmt_range(lo, hi)} %"
        if sens:
            line += ("; with every kernel's DRAM bytes x0.5 / x2: "
                     f"{fmt_pct(sens['0.5'])} / {fmt_pct(sens['2'])}")
        console.print(line, highlight=False)
    if heldout.get("time_mape") is not None:
        console.print(f"model held-out error on real data: {heldout['time_mape']:.1f} % time, "
                      f"{heldout['energy_mape']:.1f} % energy MAPE ({heldout.get('check')})",
                      highlight=False)
    excl = char.meta.get("untested_mem_mhz_excluded") or []
    if excl:
        console.print(f"memory clocks {', '.join(map(str, excl))} MHz left out: never measured on "
                      f"{spec.memory_type or 'this'} memory (--allow-untested-clocks to include)",
                      highlight=False)
    console.print(f"{char.n_kernels} kernels x {char.n_configs} configs; parameters: "
                  f"{char.meta.get('params_calibration', 'measured')}"
                  + (f"; wrote {output}" if output else "")
                  + (f"; wrote {csv_out}" if csv_out else ""))


def write_csv(char, trace, path: Path) -> None:
    """One row per (kernel, config) of ``char`` (columns :data:`CSV_COLUMNS`)."""
    import csv

    from joulebound.core.errors import JouleboundError

    try:
        fh = Path(path).open("w", newline="")
    except OSError as exc:
        raise JouleboundError(f"cannot write {path}: {exc.strerror}") from None
    with fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        ks = trace.kernels if trace is not None else None
        sensor = char.sensor_measured
        for i, name in enumerate(char.kernel_names):
            k = ks[i] if ks is not None else None
            for j, c in enumerate(char.configs):
                w.writerow([i, name, k.category if k else "", k.phase if k else "",
                            "" if k is None or k.layer is None else k.layer,
                            "auto" if c.core_mhz is None else c.core_mhz,
                            "auto" if c.mem_mhz is None else c.mem_mhz,
                            f"{char.time_s[i, j]:.6e}", f"{char.energy_j[i, j]:.6e}",
                            MEASURED if sensor[i, j] else MODELED])


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("characterize", help=reflow(characterize_cmd.__doc__ or ""))(characterize_cmd)
