"""The pipeline that writes the shipped GPU-model parameter files
(``joulebound/gpumodel/params/*.json``) from the validation fits: Perseus kernel-level fits for
the A100-SXM4 and A40, the A100-PCIe transfer, and the RTX 3080 Ti calibrated on Spaan et al.'s
published rows — each with its held-out error and bootstrap draws. Run by
``joulebound validate --write-params`` in a source checkout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from joulebound.gpumodel import shipping
from joulebound.hw.catalog import get_device
from research import energaizer, perseus_kernel, spaan


def write_params(run, n_draws: int = 24,  # type: ignore[no-untyped-def]
                 progress: Callable[[str], None] | None = None) -> list[Path]:
    """Regenerate the shipped ``joulebound/gpumodel/params/*.json`` from a validation run's
    kernel-level fits (``run`` from :func:`research.report.run_all` on every check, with
    ``run.extras['data']`` the data folder), with ``n_draws`` bootstrap draws each; returns the
    files written. ``progress(message)`` is called as the draws advance."""
    say = progress or (lambda msg: None)
    res = {(r.check, r.gpu, r.workload): r for r in run.results}
    data = run.extras["data"]
    written = []
    fitted = {}

    def heldout(r) -> dict:  # type: ignore[no-untyped-def]
        return {"check": r.check, "workload": r.workload, "time_mape": r.time_mape,
                "energy_mape": r.energy_mape, "n_points": r.n_points}

    for key, label in (("a100_sxm", "A100-SXM4-80GB"), ("a40", "A40")):
        full = run.extras["kernel_fits"][key]
        if key == "a100_sxm":      # idle clock-tree power measured per locked clock (GA100)
            _, clk = energaizer.clock_power_for(data, full.params.vf)
            full.params = full.params.set({"idle_clk_w": clk})
        r = res[("perseus-kernel", label, "kernel model, held-out model and clocks")]
        draws = perseus_kernel.draws(
            data, key, full, n_draws=n_draws,
            progress=lambda i, n, label=label: say(f"bootstrap draws: {label} {i}/{n}"))
        p = shipping.with_provenance(
            full.params, perseus_kernel.FITTED,
            f"Perseus stage profiles ({key}), kernel-level fit, joulebound validate",
            heldout(r), draws)
        if key == "a100_sxm":
            p.sources["idle_clk_w"] = ("EnergAIzer A100-SXM4-80GB idle power per locked core clock "
                                       "(energaizer_device/netsres117), against the shipped V-f "
                                       "curve (research/energaizer.py)")
        fitted[key] = p
        written.append(shipping.write(p))
    r = res[("perseus-plans", "A100-PCIe-80GB", "all 4 workloads")]
    pcie = shipping.for_a100_pcie(get_device("a100-pcie-80gb"), fitted["a100_sxm"],
                                  run.extras["plan_params"].f_cap, heldout(r))
    written.append(shipping.write(pcie))
    su, fit = run.extras["spaan"]
    r = res[("spaan-table1", "RTX 3080 Ti", "19 forward kernels, leave-one-row-out")]
    draws = spaan.draws(su, fit, n_draws=n_draws,
                        progress=lambda i, n: say(f"bootstrap draws: RTX 3080 Ti {i}/{n}"))
    p = shipping.with_provenance(fit.params, spaan.FITTED, spaan.LABEL + f" ({spaan.SOURCE})",
                                 heldout(r), draws, calibration="published",
                                 extra={"tested_mem_fracs": "memory clocks of Spaan et al. "
                                        "Table 1 (9501, 9251, 5001 MHz)"})
    written.append(shipping.write(p))
    return written
