"""``joulebound characterize``: time and energy of every kernel at every clock pair."""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import console, print_json

JSON_HELP = ("Print JSON: device, trace, n_kernels, n_configs, provenance (modeled | measured | "
             "measured+modeled), measured_cells, params_calibration (fit | transfer | none), "
             "power_limit_w, capped_cells_fraction, iteration (per config label: time_s, "
             "energy_j, avg_power_w — whole-trace sums, modeled unless all cells measured), "
             "best_energy_config, output (the .npz path or null).")


def characterize_cmd(
    trace: str = typer.Argument(None, help="Preset name (gpt3-xl, bert-large, ...), a trace "
                                "file, or a Kineto JSON. Optional with --measured (then the table "
                                "must be a complete grid)."),
    device: str = typer.Option(..., "--device", "-d", help="GPU catalog name, e.g. rtx3080ti."),
    measured: Path = typer.Option(None, "--measured", help="CSV with columns kernel, core, mem, "
                                  "time (s), energy (J), repeats. Each measured kernel's work and "
                                  "power activity are fitted to its cells (3 clocks suffice), the "
                                  "other clocks are modeled from the fit, measured cells are kept."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the Characterization (.npz)."),
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
    import numpy as np

    from ..dvfs.model import characterize, resolve_device
    from ..dvfs.model.measured import characterize_with_measurements, from_measured
    from ..errors import JouleboundError

    spec = resolve_device(device)
    if trace is None and measured is None:
        raise JouleboundError("give a TRACE (preset or file) or --measured TABLE.csv")
    if trace is not None:
        from ..workload import load_trace

        tr = load_trace(trace, batch=batch, seq=seq)
        if measured is not None:
            char = characterize_with_measurements(tr, spec, measured)
        else:
            char = characterize(tr, spec)
        name = tr.name
    else:
        char = from_measured(measured, spec)
        name = str(measured)
    if output is not None:
        char.save(output)
    it_t = char.time_s.sum(axis=0)
    it_e = char.energy_j.sum(axis=0)
    best = int(np.argmin(it_e))
    auto = char.auto_index
    top = next((j for j, c in enumerate(char.configs)
                if c.core_mhz == spec.max_core_mhz and c.mem_mhz == spec.max_mem_mhz), None)
    prov = char.provenance()
    if json_out:
        print_json({
            "device": spec.name, "trace": name, "n_kernels": char.n_kernels,
            "n_configs": char.n_configs, "provenance": prov,
            "measured_cells": int(char.measured.sum()),
            "params_calibration": char.meta.get("params_calibration"),
            "power_limit_w": char.meta.get("power_limit_w"),
            "capped_cells_fraction": char.meta.get("capped_cells_fraction"),
            "iteration": {c.label: {"time_s": float(it_t[j]), "energy_j": float(it_e[j]),
                                    "avg_power_w": float(it_e[j] / it_t[j])}
                          for j, c in enumerate(char.configs)},
            "best_energy_config": char.configs[best].label,
            "output": str(output) if output else None})
        return
    from rich.table import Table

    t = Table(title=f"{name} on {spec.name}: whole iteration ({prov})")
    for col in ("config", "time (s)", "energy (J)", "avg power (W)", "provenance"):
        t.add_column(col, justify="left" if col in ("config", "provenance") else "right")
    rows = [("auto (governor)", auto), ("top clocks", top), ("least energy", best)]
    for label, j in rows:
        if j is None:
            continue
        t.add_row(f"{label}: {char.configs[j].label}", f"{it_t[j]:.4f}", f"{it_e[j]:.2f}",
                  f"{it_e[j] / it_t[j]:.1f}", char.provenance(j))
    console.print(t)
    console.print(f"{char.n_kernels} kernels x {char.n_configs} configs; parameters: "
                  f"{char.meta.get('params_calibration', 'measured')}"
                  + (f"; wrote {output}" if output else ""))


def register(app: typer.Typer) -> None:
    app.command("characterize")(characterize_cmd)
