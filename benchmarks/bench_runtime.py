"""Runtime clock control: next-kernel predictor speed/accuracy, hook and controller overhead.

Targets (issue 6): predictor >= 99.9 % correct in steady state on analytic traces and on traces
recorded from a real CPU training loop, >= 95 % on perturbed traces, <= 2 us per prediction; hook
overhead <= 3 % of step time for a model whose ops take >= 1 ms on average.

Run: ``.venv/bin/python -m benchmarks.run_all --only runtime``; the long-stream stall check alone:
``.venv/bin/python -m benchmarks.bench_runtime --stalls [--write]``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from benchmarks.timing import (
    ONE_THREAD,
    fmt,
    fresh_cpu_runs,
    fresh_results,
    in_fresh_process,
    sample_speed,
    spread,
)
from joulebound.runtime.nextop import KeyInterner, NextKernelPredictor
from joulebound.testing.streams import DEFAULT_PERTURBATION, Perturbation, perturbed_stream

PRESETS = ("gpt2-small", "gpt2-xl", "gpt3-xl", "bert-base", "bert-huge")


def analytic_iteration(preset: str) -> list[int]:
    from joulebound.workload.analytic import build_trace

    interner = KeyInterner()
    return [interner.intern(k.signature) for k in build_trace(preset)]


def measure(stream: list[int], skip: int) -> float:
    """Share of the ops after the first ``skip`` whose key was predicted before it came."""
    pred = NextKernelPredictor()
    obs = pred.observe
    for k in stream[:skip]:
        obs(k)
    tail = stream[skip:]
    hits = 0
    for k in tail:
        hits += obs(k)
    return hits / max(1, len(tail))


PROCESSES = 5
"""Fresh processes per timed figure (:func:`benchmarks.timing.fresh_cpu_runs`)."""


def feed_case(preset: str, perturbed: bool) -> Callable[[], object]:
    """One call feeds the 60-iteration stream of ``preset`` (``perturbed``: through the default
    perturbation generator, seed 0) to one predictor built outside the clock; the first call
    (the warm-up) finds the period, later calls follow it (a matched op does the same work
    before and after the history ring has filled)."""
    one = analytic_iteration(preset)
    stream = perturbed_stream(one, 60, DEFAULT_PERTURBATION, seed=0)[0].tolist() if perturbed \
        else one * 60
    obs = NextKernelPredictor().observe

    def feed() -> None:
        for k in stream:
            obs(k)
    return feed


def ns_per_prediction(cases: dict[str, tuple[str, bool]]) -> dict[str, tuple[float, float, float]]:
    """CPU ns per prediction of each (preset, perturbed) case: (median, min, max) over
    :data:`PROCESSES` fresh processes (:func:`feed_case`).

    One prediction = ``observe(op)``, which updates the state and computes the prediction for
    the next op (reading it is an attribute access). Building the predictor is not timed: it
    commits the history ring (:func:`construction_ms`), a once-per-run cost that spread over a
    60-iteration stream of 479 ops would be 600–2400 ns an op (16–68 ms measured)."""

    n = {label: 60 * len(analytic_iteration(p)) for label, (p, _) in cases.items()}
    got = fresh_cpu_runs({label: ("benchmarks.bench_runtime:feed_case", args)
                          for label, args in cases.items()}, processes=PROCESSES)
    return {label: tuple(x / n[label] * 1e9 for x in t) for label, t in got.items()}


def construction_case(builds: int = 7) -> list[float]:
    """In a fresh process: CPU ms of ``builds`` default predictors built one after the other
    (its 2^20-op history ring allocated and committed; each dropped before the next). The first
    build commits memory the process never had; later ones may reuse freed pages."""
    out = []
    for _ in range(builds):
        c0 = time.process_time()
        pred = NextKernelPredictor()
        out.append((time.process_time() - c0) * 1e3)
        del pred
    return out


def construction_ms() -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """:func:`construction_case` in :data:`PROCESSES` fresh processes: (median, min, max) over
    the processes of the first build, and of the later builds pooled (CPU ms)."""

    got = fresh_results({"c": ("benchmarks.bench_runtime:construction_case", ())},
                        processes=PROCESSES)["c"]
    return spread([r[0] for r in got]), spread([x for r in got for x in r[1:]])


def recorded_loop(steps: int, eval_every: int = 0, last_batch: int | None = None,
                  layers: int = 2) -> tuple[list[int], list[int]]:
    """Op keys of a real CPU training loop (tiny GPT) and the op index where each step starts."""
    from joulebound.runtime.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, make_step

    train_step, eval_step = make_step(TinyGPTConfig(layers=layers, hidden=32, seq=16, batch=4))
    starts = []
    with OpStream(record=True) as ops:
        for i in range(steps):
            if eval_every and i and i % eval_every == 0:
                eval_step()
            starts.append(len(ops.keys))
            train_step(batch=last_batch if (last_batch and i == steps - 1) else None)
    return list(ops.keys), starts


def per_op_rounds(n: int = 3000, rounds: int = 9) -> list[list[float]]:
    """Extra CPU us per op of the bare hook and of hook + controller on a trivial op: per round
    ``n`` ops unhooked, hooked, with the controller (back to back, so load drifts cancel);
    ``[hook differences, controller differences]``, one per round."""
    import torch

    from joulebound.core.clocks import ClockConfig
    from joulebound.planning.plan import Plan
    from joulebound.runtime import Controller, DryRunActuator
    from joulebound.runtime.hooks import OpStream

    x = torch.ones(4)

    def loop() -> float:
        c0 = time.process_time()
        for _ in range(n):
            torch.neg(x)
        return (time.process_time() - c0) / n

    with OpStream(record=True) as ops:
        torch.neg(x)
    names = [ops.name(k) for k in ops.keys]
    plan = Plan("test", names, [ClockConfig(1410, 1593)], [0])
    ctl = Controller(plan, DryRunActuator())
    d_hook, d_full = [], []
    loop()
    for _ in range(rounds):
        base = loop()
        with OpStream():
            hook = loop()
        with ctl.hook():
            full = loop()
        d_hook.append((hook - base) * 1e6)
        d_full.append((full - base) * 1e6)
    ctl.close()
    return [d_hook, d_full]


PROCESSES_TORCH = 3
"""Fresh processes for the per-op hook cost (each imports torch)."""


def per_op_cost_us() -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """:func:`per_op_rounds` in :data:`PROCESSES_TORCH` fresh processes, the rounds pooled:
    (median, min, max) of the bare hook's and of hook + controller's per-round differences."""

    got = fresh_results({"ops": ("benchmarks.bench_runtime:per_op_rounds", ())},
                        processes=PROCESSES_TORCH)["ops"]
    return (spread([x for r in got for x in r[0]]), spread([x for r in got for x in r[1]]))


def hf_gpt2_loop(steps: int = 15) -> tuple[list[int], list[int]]:
    """Op keys of a Hugging Face GPT-2 (2 layers, d=64) training loop on CPU."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    from joulebound.runtime.hooks import OpStream

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=64,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    starts = []
    with OpStream(record=True) as ops:
        for _ in range(steps):
            starts.append(len(ops.keys))
            x = torch.randint(512, (4, 32))
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
    return list(ops.keys), starts


def hook_overhead(pairs: int = 12) -> dict[str, float]:
    """Step-time overhead of the bare OpStream and of the full controller (dry-run actuator).

    Paired design for a shared machine: each round runs steps without hook, with the bare hook
    and with the controller in the order A B C C B A, timed in process CPU time (one torch
    thread, so other jobs on the cores change it less than wall time); the overhead is the median
    over rounds of the per-round ratio (robust to the load drifting between rounds and to order
    effects), with a 95 % bootstrap interval of that median (2000 resamples of the rounds)."""
    import torch

    from joulebound.core.clocks import ClockConfig
    from joulebound.planning.plan import Plan
    from joulebound.runtime import Controller, DryRunActuator
    from joulebound.runtime.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, make_step

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = TinyGPTConfig(layers=1, hidden=512, seq=256, batch=8, vocab=2048, dropout=0.1)
        train_step, _ = make_step(cfg)
        train_step()
        with OpStream(record=True) as ops:        # warm the Python dispatch path, record keys
            for _ in range(3):
                a = len(ops.keys)
                train_step()
        names = [ops.name(k) for k in ops.keys[a:]]
        n_ops = len(names)
        n_dispatched = (ops.n_ops + ops.n_skipped) // 3
        choice = np.arange(n_ops) % 2           # a clock switch at every op: the worst case
        plan = Plan("test", names, [ClockConfig(1410, 1593), ClockConfig(1005, 1593)], choice)
        ctl = Controller(plan, DryRunActuator())
        def timed(variant: str) -> float:
            t0 = time.process_time()
            if variant == "none":
                train_step()
            elif variant == "hook":
                with OpStream():
                    train_step()
            else:
                with ctl.hook():
                    train_step()
            return time.process_time() - t0

        t_none, r_hook, r_ctl = [], [], []
        for _ in range(pairs):
            # A B C C B A within a round cancels drift and order effects
            t = {v: 0.0 for v in ("none", "hook", "ctl")}
            for v in ("none", "hook", "ctl", "ctl", "hook", "none"):
                t[v] += timed(v) / 2
            t_none.append(t["none"])
            r_hook.append(t["hook"] / t["none"])
            r_ctl.append(t["ctl"] / t["none"])
        ctl.close()
    finally:
        torch.set_num_threads(threads)
    base = statistics.median(t_none)
    rng = np.random.default_rng(0)

    def ci(r: list[float]) -> tuple[float, float]:
        boot = np.median(rng.choice(np.asarray(r), (2000, len(r))), axis=1) - 1
        return float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))

    return {"ops": n_ops, "dispatched": n_dispatched, "step_s": base, "rounds": pairs,
            "op_ms": base / n_ops * 1e3, "hook": statistics.median(r_hook) - 1,
            "ctl": statistics.median(r_ctl) - 1, "hook_ci": ci(r_hook), "ctl_ci": ci(r_ctl),
            "spread": max(t_none) / min(t_none) - 1, "switches": ctl.stats.switches}


def controller_case(n_iter: int = 5) -> Callable[[], object]:
    """One call: ``n_iter`` iterations of gpt2-small through ``Controller.on_op`` (predictor +
    command lookup + dry-run actuator, a switch every 25 ops), the controller warmed up."""
    from joulebound.core.clocks import ClockConfig
    from joulebound.planning.plan import Plan
    from joulebound.runtime import Controller, DryRunActuator

    one = analytic_iteration("gpt2-small")
    names = [f"k{k}" for k in one]
    choice = (np.arange(len(one)) // 25) % 2
    plan = Plan("test", names, [ClockConfig(1410, 1593), ClockConfig(1005, 1593)], choice)
    ctl = Controller(plan, DryRunActuator())
    ids = [ctl.interner.intern(n) for n in names]
    for k in ids * 2:
        ctl.on_op(k)
    on_op = ctl.on_op

    def run() -> None:
        for _ in range(n_iter):
            for k in ids:
                on_op(k)
    return run


def controller_ns(n_iter: int = 5) -> tuple[float, float, float]:
    """CPU ns per Controller.on_op, torch-free: (median, min, max) over :data:`PROCESSES` fresh
    processes (:func:`controller_case`)."""

    n = n_iter * len(analytic_iteration("gpt2-small"))
    t = fresh_cpu_runs({"on_op": ("benchmarks.bench_runtime:controller_case", (n_iter,))},
                       processes=PROCESSES)["on_op"]
    return t[0] / n * 1e9, t[1] / n * 1e9, t[2] / n * 1e9


def _fixed_work(rounds: int):
    """A call doing ``rounds`` steps of integer arithmetic on locals: no memory touched, nothing
    allocated that outlives it (the noise-floor call of :func:`stall_runs`)."""
    def call(k: int) -> int:
        x = k
        for _ in range(rounds):
            x = (x * 7 + 1) & 1023
        return x
    return call


def _timed_block(fn, keys: list[int], clock) -> tuple[int, int, int, int]:
    """Per-call CPU ns of ``fn(k)`` over ``keys``: (calls over 50 us, worst, index of the worst,
    total)."""
    over = worst = worst_at = total = 0
    for j, k in enumerate(keys):
        t0 = clock()
        fn(k)
        d = clock() - t0
        total += d
        if d > worst:
            worst, worst_at = d, j
        if d > 50_000:
            over += 1
    return over, worst, worst_at, total


def stall_runs(n_ops: int = 3_500_000, repeats: int = 3) -> dict:
    """Per-call CPU time of ``observe()`` over long streams, against two noise floors measured
    in the same run.

    Each of ``repeats`` runs feeds a fresh default predictor ``n_ops`` ops of GPT-3-XL
    iterations (947 ops each) — through the ring's filling (its pages touched for the first
    time) and then more than twice round it. Iteration by iteration, the same timing loop also
    runs around a no-op call and around a fixed-work call (:func:`_fixed_work`, calibrated to
    the predictor's mean time per call, so it is exposed to the machine's interruptions as long
    as the predictor is): load changes on the shared machine hit all three alike. Per call:
    thread CPU time (``time.thread_time_ns``), so other processes' scheduling is not counted.
    Returns per variant and run: calls over 50 us while the ring fills / after, worst call
    (ns) and the op it was at, mean ns per call."""
    one = analytic_iteration("gpt3-xl")
    iters = n_ops // len(one) + 1
    clock = time.thread_time_ns
    fill = NextKernelPredictor().max_history

    # calibrate the fixed-work call to the predictor's mean per-call time (steady state)
    warm = NextKernelPredictor()
    for k in one * 3:
        warm.observe(k)
    target = min(_timed_block(warm.observe, one * 20, clock)[3] for _ in range(3))
    cost = {r: min(_timed_block(_fixed_work(r), one * 20, clock)[3] for _ in range(3))
            for r in (0, 16)}
    rounds = max(0, round((target - cost[0]) / max(1, cost[16] - cost[0]) * 16))

    names = ("predictor", "no-op", "fixed work")
    runs: dict[str, list[dict]] = {v: [] for v in names}
    for _ in range(repeats):
        pred = NextKernelPredictor()
        fns = {"predictor": pred.observe, "no-op": lambda k: None,
               "fixed work": _fixed_work(rounds)}
        acc = {v: {"fill": 0, "full": 0, "worst": 0, "worst_at": 0, "total": 0} for v in names}
        i = 0
        for _ in range(iters):
            phase = "fill" if i + len(one) <= fill else "full"
            for v in names:
                over, worst, at, total = _timed_block(fns[v], one, clock)
                a = acc[v]
                a[phase] += over
                a["total"] += total
                if worst > a["worst"]:
                    a["worst"], a["worst_at"] = worst, i + at
            i += len(one)
        for v in names:
            acc[v]["mean_ns"] = acc[v]["total"] / i
            acc[v]["over"] = acc[v]["fill"] + acc[v]["full"]
            acc[v]["per_s"] = acc[v]["over"] / (acc[v]["total"] / 1e9)
            acc[v]["rounds"] = rounds
            runs[v].append(acc[v])
        # re-fit the fixed work to this run's predictor (the calibration above is short)
        base, fixed = acc["no-op"]["mean_ns"], acc["fixed work"]["mean_ns"]
        per_round = (fixed - base) / max(1, rounds)
        if per_round > 0:
            rounds = max(1, round((acc["predictor"]["mean_ns"] - base) / per_round))
    return {"ops": i, "fill_ops": fill, "runs": runs}


def _mr(xs: list[float], spec: str = ".0f") -> str:
    """``median (min–max)`` of the runs."""
    return fmt(spread(xs), spec)


def stall_table(n_ops: int = 3_500_000, repeats: int = 3) -> list[str]:
    """The *Long streams* subsection: :func:`stall_runs` as a table, with the verdict."""
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    import threading

    threads = threading.active_count()
    r = stall_runs(n_ops, repeats)
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runs = r["runs"]
    rows = ["### Long streams: no `observe()` stalls", "",
            f"{repeats} runs, each a fresh predictor (defaults: a history ring of 2^20 ops "
            f"allocated and committed at construction) fed {r['ops']:,} ops of GPT-3-XL "
            f"iterations (947 ops each): the first {r['fill_ops']:,} fill the ring, the rest go "
            f"more than twice round it. Interleaved iteration by iteration "
            f"in the same runs, the same timing loop around two noise-floor calls: a no-op, and "
            f"a fixed amount of pure-Python arithmetic ("
            f"{'/'.join(str(x['rounds']) for x in runs['fixed work'])} steps in the successive runs, no memory "
            f"touched) calibrated to the predictor's mean time per call (re-fitted after each "
            f"run), so it is exposed about as long to the machine's interruptions (page faults, cache and VM effects, timer ticks counted in "
            f"thread CPU time). Per call: this thread's CPU time (`time.thread_time_ns`), "
            f"measured; median (min–max) over the runs; a fresh process "
            f"({threads} thread{'s' if threads != 1 else ''}, nothing else of the benchmarks "
            f"loaded). Machine load (1-min load average, "
            f"{os.cpu_count()} cores): {load0:.1f} at the start, {load1:.1f} at the end.", "",
            "| call | calls > 50 µs while filling | after (ring full) | all | per second timed "
            "| worst call (µs) | mean per call incl. timer (ns) |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for v, label in (("predictor", "predictor `observe()`"), ("no-op", "no-op (floor)"),
                     ("fixed work", "fixed work, same mean time (floor)")):
        a = runs[v]
        rows.append(f"| {label} | {_mr([x['fill'] for x in a])} | {_mr([x['full'] for x in a])} "
                    f"| {_mr([x['over'] for x in a])} | {_mr([x['per_s'] for x in a])} | "
                    f"{_mr([x['worst'] / 1e3 for x in a], '.1f')} | "
                    f"{_mr([x['mean_ns'] for x in a])} |")
    p, f = runs["predictor"], runs["fixed work"]
    excess = [a["over"] - b["over"] for a, b in zip(p, f, strict=True)]
    p_rate = statistics.median(a["per_s"] for a in p)
    floor_hi = max(b["per_s"] for b in f)
    p_worst = statistics.median(a["worst"] for a in p)
    floor_worst = max(b["worst"] for v in ("no-op", "fixed work") for b in runs[v])
    met = p_rate <= floor_hi and p_worst <= floor_worst
    worst_run = max(p, key=lambda a: a["worst"])
    rows += ["", f"Excess slow calls, predictor − same-time floor, per run: {_mr(excess)}. "
             f"The predictor's worst call of all runs was at op {worst_run['worst_at']:,} "
             f"({'while filling' if worst_run['worst_at'] < r['fill_ops'] else 'ring full'}). "
             f"Target: no `observe()` over 50 µs beyond the machine's noise floor, i.e. the "
             f"predictor's median rate of calls over 50 µs (per second of timed CPU, so a "
             f"longer call's longer exposure is allowed for) within the same-time floor's range "
             f"(≤ {floor_hi:.0f} /s) and its median worst call no worse than the floors' worst "
             f"({floor_worst / 1e3:.1f} µs): **{'met' if met else 'NOT met'}** (median "
             f"{p_rate:.0f} /s, worst {p_worst / 1e3:.1f} µs).", ""]
    return rows


def stall_table_fresh() -> list[str]:
    """:func:`stall_table` run in a fresh child process (:func:`in_fresh_process`), so the
    figures do not depend on what the sections before it left in this one (imported modules, a
    large heap, background threads of other meters holding the GIL): the same figures as the
    subsection rerun alone."""
    return in_fresh_process("benchmarks.bench_runtime:stall_table", env=ONE_THREAD)


def latency_table() -> list[str]:
    """Modeled: what the switch latency leaves of a kernel-level plan, and runtime vs simulator."""
    from joulebound.gpumodel import characterize
    from joulebound.planning.simulate import simulate
    from joulebound.planning.solve.switching import plan_switch_aware
    from joulebound.runtime import lookahead_commands
    from joulebound.runtime.actuators import replay_plan
    from joulebound.runtime.session import plan_kernel_times
    from joulebound.workload.analytic import build_trace

    char = characterize(build_trace("gpt3-xl"), "rtx3080ti")
    base = simulate(char, None)
    rows = ["### What the switch latency leaves (modeled: GPT-3 XL analytic trace, RTX 3080 Ti "
            "device model, slowdown budget 1 %)", "",
            "Planner: `plan_switch_aware` (phases >= L); simulator: `joulebound.planning.simulate` "
            "(one iteration starting at the plan's first clocks); runtime: the controller's "
            "lookahead commands replayed through `SimulatedActuator` in steady state (cyclic: the "
            "switch back at the iteration boundary must also fit), serial switches.", "",
            "| L | planned switches | simulator energy vs auto | runtime switches / iter | "
            "runtime energy vs auto | runtime vs simulator |", "|---|---:|---:|---:|---:|---:|"]
    for lat in (0.0, 0.006, 0.02, 0.05, 0.15):
        plan = plan_switch_aware(char, slowdown=0.01, switch_latency_s=lat)
        sim = simulate(char, plan, switch_latency_s=lat)
        cmd = lookahead_commands(plan.choice, plan_kernel_times(plan, char), lat)
        t_r, e_r = replay_plan(char, plan, cmd, 4, lat).per_iteration[-1]
        n_sw = int(np.count_nonzero(cmd != np.roll(cmd, 1)))
        rows.append(f"| {lat * 1e3:.0f} ms | {plan.n_switches} | "
                    f"{(sim.energy_j / base.energy_j - 1) * 100:+.2f} % | {n_sw} | "
                    f"{(e_r / base.energy_j - 1) * 100:+.2f} % | "
                    f"{(e_r / sim.energy_j - 1) * 100:+.2f} % |")
    return rows + [""]


def run() -> str:

    out = ["## Runtime: next-kernel predictor and clock controller", "",
           "Predictor = period following (pointer into the op history) + order-2 Markov "
           "fallback (`joulebound/runtime/nextop.py`). Accuracy = share of ops whose key was "
           "predicted before it was dispatched. Steady state skips the first 2 iterations. "
           "All figures measured on this machine (pure Python, one core).", ""]
    out += ["### Analytic traces (`build_trace`), 60 iterations", "",
            "| trace | ops/iter | steady accuracy | perturbed accuracy (default generator) "
            "| ns / prediction (steady) | ns / prediction (perturbed) |",
            "|---|---:|---:|---:|---:|---:|"]
    worst_ns = 0.0
    speed = ns_per_prediction({f"{p} {kind}": (p, kind == "perturbed") for p in PRESETS
                               for kind in ("steady", "perturbed")})
    for p in PRESETS:
        one = analytic_iteration(p)
        acc = measure(one * 60, 2 * len(one))
        ns = speed[f"{p} steady"]
        keys, _ = perturbed_stream(one, 60, DEFAULT_PERTURBATION, seed=0)
        pacc = measure(keys.tolist(), 0)
        pns = speed[f"{p} perturbed"]
        worst_ns = max(worst_ns, ns[0], pns[0])
        out.append(f"| {p} | {len(one)} | {acc * 100:.3f} % | {pacc * 100:.2f} % | "
                   f"{ns[0]:.0f} ({ns[1]:.0f}–{ns[2]:.0f}) | {pns[0]:.0f} ({pns[1]:.0f}–{pns[2]:.0f}) |")
    cm = construction_ms()
    out += ["", "ns / prediction: CPU time of feeding the whole 60-iteration stream to a "
            f"predictor built before the clock starts, per op; each case in {PROCESSES} fresh "
            "processes (in each, 5 feeds after a warm-up feed that finds the period), the "
            "median (min–max) of all the feeds pooled. Building a predictor "
            "(its 2^20-op history ring allocated and committed, once per run), CPU ms, in "
            f"{PROCESSES} fresh processes of 7 builds each: the first build "
            f"{cm[0][0]:.1f} ({cm[0][1]:.1f}–{cm[0][2]:.1f}) (median (min–max) over the "
            f"processes), later builds {cm[1][0]:.1f} ({cm[1][1]:.1f}–{cm[1][2]:.1f}) (pooled).",
            "", f"Target <= 2000 ns / prediction: worst median {worst_ns:.0f} ns "
                f"({'met' if worst_ns <= 2000 else 'NOT met'} on this machine).", ""]

    one = analytic_iteration("gpt2-small")
    out += ["### Perturbation types (gpt2-small, 60 iterations, whole stream incl. warm-up)", "",
            "| perturbation | accuracy |", "|---|---:|"]
    cases = {
        "default (`DEFAULT_PERTURBATION`)": DEFAULT_PERTURBATION,
        "stray op 1 % per op": Perturbation(insert_rate=0.01),
        "dropped op 1 %": Perturbation(drop_rate=0.01),
        "swapped pair 1 %": Perturbation(swap_rate=0.01),
        "eval step every 5 iterations": Perturbation(eval_every=5),
        "short last batch every 10 iterations": Perturbation(epoch_len=10),
        "lazy-init ops in iteration 0 (50)": Perturbation(first_iter_extra=50),
    }
    for label, spec in cases.items():
        keys, _ = perturbed_stream(one, 60, spec, seed=1)
        acc = measure(keys.tolist(), 0)
        out.append(f"| {label} | {acc * 100:.2f} % |")
    fb = list(range(40)) * 4 + list(range(100, 110))
    acc = measure(fb * 30, 2 * len(fb))
    out += [f"| gradient accumulation (4 micro-batches), steady | {acc * 100:.3f} % |", ""]

    out += ["### Traces recorded from a real CPU training loop (tiny GPT, `OpStream`)", "",
            "| loop | ops | accuracy (after 3 steps) |", "|---|---:|---:|"]
    keys, starts = recorded_loop(20)
    acc = measure(keys, starts[3])
    out.append(f"| 20 train steps, 2 layers | {len(keys)} | {acc * 100:.3f} % |")
    keys, starts = recorded_loop(20, layers=4)
    acc = measure(keys, starts[3])
    out.append(f"| 20 train steps, 4 layers | {len(keys)} | {acc * 100:.3f} % |")
    try:
        keys, starts = hf_gpt2_loop()
        acc = measure(keys, starts[3])
        out.append(f"| Hugging Face GPT-2 (2 layers, d=64), 15 steps | {len(keys)} | "
                   f"{acc * 100:.3f} % |")
    except ImportError:
        out.append("| Hugging Face GPT-2 | — | transformers not installed |")
    keys, starts = recorded_loop(30, eval_every=5, last_batch=2)
    acc = measure(keys, starts[3])
    out.append(f"| 30 steps + eval every 5 + short last batch | {len(keys)} | "
               f"{acc * 100:.2f} % |")
    keys, starts = recorded_loop(4)
    pk, _ = perturbed_stream(keys[starts[3]:], 60, DEFAULT_PERTURBATION, seed=2)
    acc = measure(pk.tolist(), 0)
    out.append(f"| recorded iteration x 60 + default perturbations (whole stream) | {len(pk)} | "
               f"{acc * 100:.2f} % |")
    out.append("")

    sample_speed()
    out += stall_table_fresh()
    sample_speed()
    out += latency_table()
    ns = controller_ns()
    (hook_us, hook_lo, hook_hi), (full_us, full_lo, full_hi) = per_op_cost_us()
    h = hook_overhead()
    sample_speed()
    est = (hook_us * h["dispatched"] + (full_us - hook_us) * h["ops"]) * 1e-6 / h["step_s"]
    half = max((h["ctl_ci"][1] - h["ctl_ci"][0]) / 2, (h["hook_ci"][1] - h["hook_ci"][0]) / 2)
    resolved = ("resolves ±1 %" if half <= 0.01 else
                f"does **not** resolve ±1 % on this machine (interval half-width up to "
                f"{half * 100:.1f} %): the per-op estimate is the figure to quote")
    out += ["### Overhead", "",
            f"- `Controller.on_op` (predictor + command lookup + dry-run actuator, a switch every "
            f"25 ops), torch-free: **{ns[0]:.0f} ns / op** ({ns[1]:.0f}–{ns[2]:.0f}; CPU time, "
            f"median (min–max) of 5 runs in each of {PROCESSES} fresh processes, pooled).",
            f"- Per dispatched op (trivial `torch.neg`; in {PROCESSES_TORCH} fresh processes, 9 "
            f"rounds each of 3000 ops unhooked, hooked, with the controller, back to back; CPU "
            f"time; median (min–max) of the per-round differences, the processes' rounds "
            f"pooled): bare `OpStream` **+{hook_us:.1f} us** ({hook_lo:.1f}–{hook_hi:.1f}), "
            f"`OpStream` + controller **+{full_us:.1f} us** ({full_lo:.1f}–{full_hi:.1f}).",
            f"- **Per-op estimate of the hook overhead** (method: bare-hook cost × ops dispatched "
            f"+ controller cost × kernel ops, over the unhooked step's CPU time) on a model whose "
            f"kernel ops take {h['op_ms']:.2f} ms on average (1-layer GPT, d=512, S=256, B=8; "
            f"{h['dispatched']} ops dispatched per step, of which {h['ops']} launch kernels; step "
            f"{h['step_s'] * 1e3:.0f} ms CPU, one torch thread): **{est * 100:.2f} %** of step "
            f"time. Target <= 3 %.",
            f"- End to end, the same model (median over {h['rounds']} rounds of A B C C B A steps "
            f"of the per-round CPU-time ratio, 95 % bootstrap interval): bare hook "
            f"{h['hook'] * 100:+.2f} % ({h['hook_ci'][0] * 100:+.2f} to "
            f"{h['hook_ci'][1] * 100:+.2f} %), controller with a dry-run clock switch at every op "
            f"{h['ctl'] * 100:+.2f} % ({h['ctl_ci'][0] * 100:+.2f} to "
            f"{h['ctl_ci'][1] * 100:+.2f} %; {h['switches']} switches). Unhooked steps alone "
            f"vary by {h['spread'] * 100:.0f} % (max vs min); this measurement {resolved}.",
            "- The per-op estimate uses the trivial-op cost, a lower bound (inside autograd an op "
            "costs about twice as much). A Python dispatch mode costs a fixed few us per op "
            "regardless of op size, so for tiny ops (a few us, like the d=32 test model) the hook "
            "more than doubles step time; the target is about ops >= 1 ms, as the GPU kernels of "
            "large models are."]
    return "\n".join(out)


def write_subsection(lines: list[str]) -> None:
    """Replace the subsection headed ``lines[0]`` in docs/benchmarks.md by ``lines``, stamped with
    the date, commit and machine (the rest of the *Runtime* section keeps its own stamp)."""
    import datetime as dt

    from .run_all import DOC, commit, machine

    text = DOC.read_text()
    head = lines[0]
    start = text.find(head)
    if start < 0:
        raise SystemExit(f"{DOC}: no subsection {head!r}; run the whole area first "
                         "(python -m benchmarks.run_all --only runtime)")
    ends = [e for e in (text.find(m, start + len(head)) for m in ("\n### ", "\n## ", "\n<!-- "))
            if e >= 0]
    end = min(ends) if ends else len(text)
    stamp = (f"_This subsection rerun alone (`python -m benchmarks.bench_runtime --stalls "
             f"--write`): measured {dt.date.today().isoformat()} at commit {commit()} on "
             f"{machine()}._")
    DOC.write_text(text[:start] + "\n".join([*lines, stamp, ""]) + text[end:])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stalls", action="store_true",
                        help="only the long-stream stall check (a few CPU minutes)")
    parser.add_argument("--write", action="store_true",
                        help="with --stalls: replace that subsection in docs/benchmarks.md")
    args = parser.parse_args()
    if args.stalls:
        table = stall_table()
        print("\n".join(table))
        if args.write:
            write_subsection(table)
    else:
        print(run())
