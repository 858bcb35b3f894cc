"""The one-paragraph conclusion of a planning study, shared by the terminal and the HTML report
(so both say the same thing). Plain text; every figure in it is modeled."""

from __future__ import annotations

from joulebound.core.fmt import fmt_pct
from joulebound.core.provenance import PUBLISHED

#: where a demo latency comes from (published figures, see joulebound.planning.solve.switching)
PUBLISHED_LATENCY = {6e-3: "published for H200", 20e-3: "published NVML set-call upper end",
                     150e-3: "published for Turing"}


def find_row(study, granularity: str, eps: float, plan_l: float, replay_l: float):
    """The study row with these attributes (None if the study has none)."""
    return next((r for r in study.rows if r.granularity == granularity and r.slowdown == eps
                 and r.plan_latency_s == plan_l and r.replay_latency_s == replay_l), None)


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:g} ms"


def focus_slowdown(study) -> float:
    """The ε the take-away and the category table describe: 0 when the kernel-level plan saves
    energy there (the paper's strict setting), else the largest ε of the study."""
    eps = sorted({r.slowdown for r in study.rows})
    k0 = find_row(study, "kernel", 0.0, 0.0, 0.0)
    if k0 is not None and k0.plan.energy_delta < -5e-4:
        return 0.0
    return eps[-1] if eps else 0.0


def latency_source(latency_s: float, device: str) -> str | None:
    """Where a study latency comes from, for ``device``: the device's own catalog latency when
    it is that one (published, or a modeled estimate), else a published figure of another GPU,
    named as such (the RTX 3080 Ti take-away quoted the H200's 6 ms as if it were its own)."""
    from joulebound.core.errors import JouleboundError
    from joulebound.hw.latency import device_switch_latency

    try:
        own = device_switch_latency(device)
    except JouleboundError:
        own = None
    if own is not None and abs(own.seconds - latency_s) < 1e-9:
        return (f"the catalog's {own.kind} for {device}" if own.kind != PUBLISHED
                else f"{PUBLISHED} for {device}")
    src = PUBLISHED_LATENCY.get(latency_s)
    if src is None:
        return None
    if "H200" in src and "h200" not in device.lower():
        own_txt = (f", whose catalog {own.kind} is {own.seconds * 1e3:g} ms" if own is not None
                   else "")
        return f"the H200's published latency, not for {device}{own_txt}"
    return src


def takeaway(study) -> str | None:
    """Two or three sentences on the switch-latency effect, built from the study's rows."""
    eps = focus_slowdown(study)
    k = find_row(study, "kernel", eps, 0.0, 0.0)
    lats = sorted({r.plan_latency_s for r in study.rows if r.granularity == "phase"} - {0.0})
    if k is None or not lats:
        return None
    mid = 6e-3 if 6e-3 in lats else lats[len(lats) // 2]
    aware = find_row(study, "phase", eps, mid, mid)
    blind = find_row(study, "kernel", eps, 0.0, mid)
    if aware is None or blind is None:
        return None
    e_b, t_b = blind.replay_energy_delta, blind.replay_time_delta
    e_a = aware.replay_energy_delta
    rest = [(lat, find_row(study, "phase", eps, lat, lat)) for lat in lats if lat > mid]
    tail = ", ".join(f"{fmt_pct(-r.replay_energy_delta, signed=False)} at {fmt_ms(lat)}"
                     for lat, r in rest if r)
    src = latency_source(mid, str(getattr(study.char, "device", "")))
    budget = "at no slowdown" if eps == 0 else f"within {eps:.0%} slowdown"
    late = (f"runs {fmt_pct(t_b - eps, signed=False)} over its time budget" if t_b - eps > 5e-4
            else "still runs on time")
    n = aware.replay.switches
    return (f"What this means (modeled): if clock switches were free, per-kernel clocks "
            f"would save {fmt_pct(-k.plan.energy_delta, signed=False)} energy {budget}. "
            f"But a switch takes "
            f"time: at L = {fmt_ms(mid)}{f' ({src})' if src else ''} that plan {late} "
            f"(energy {fmt_pct(-e_b, signed=False)} saved); "
            f"planning for L keeps the time budget and saves "
            f"{fmt_pct(-e_a, signed=False)} with {n} switch{'es' if n != 1 else ''} per iteration"
            f"{f' ({tail})' if tail else ''}. The longer the latency, the fewer switches pay off.")



def plan_conclusion(study, label: str, latency_s: float | None, latency_note: str = "") -> str:
    """What ``joulebound plan`` concludes: the saved plan's energy and time change against the
    baseline, its switches, the latency it was planned for, and (when a latency was given) what
    the switch-free kernel plan does when replayed at that latency. All modeled."""
    r = study.row(label)
    p = r.plan
    n = p.n_switches
    text = (f"Conclusion (modeled): the plan '{label}' changes energy by {fmt_pct(p.energy_delta)} "
            f"and time by {fmt_pct(p.time_delta)} per iteration against "
            f"{study.baseline_config}, with {n} clock switch{'es' if n != 1 else ''} per "
            "iteration")
    if latency_s:
        text += f", planned for a switch latency of {fmt_ms(latency_s)}"
        if latency_note:
            text += f" ({latency_note})"
        blind = next((x for x in study.rows if x.granularity == "kernel"
                      and x.replay_latency_s == latency_s and x.plan_latency_s == 0), None)
        if blind is not None and blind.plan.n_switches > n:
            text += (f". The switch-free kernel plan would save "
                     f"{fmt_pct(-blind.plan.energy_delta, signed=False)} if switches were free, "
                     f"but replayed at that latency it runs {fmt_pct(blind.replay_time_delta)} "
                     f"against {fmt_pct(p.time_delta)}")
    else:
        text += ", with clock switches taken as free (--switch-latency 0)"
    return text + "."
