"""Collective times from measured NCCL tables: the fit that writes ``joulebound/hw/data/nccl_fit.json``
and the held-out check ``joulebound validate --only nccl-collectives``.

Data: ``apex_plus_comm/`` of the shared data folder (README section 10; microsoft/apex_plus @
8769096, MIT): per GPU system and collective a CSV with ``gpu, num_nodes, num_gpus_per_node,
dtype, size(kb), time(us)`` — the time of one collective of a ``size`` KiB buffer, averaged over
a back-to-back loop. Systems: H100-SXM-80GB and H200-SXM-141GB (one NVSwitch node, 2/4/8 GPUs),
V100-PCIE-16GB (PCIe, 1–4 nodes × 1–4 GPUs; NCCL over sockets between nodes — the upstream script
runs without its ``--ib`` flag — at ~1.2 GB/s, i.e. 10 Gb/s Ethernet).

Data handling (stated, not silent): rows of size 0 are left out (no message); upstream's
``V100-PCIE-16GB/reduce_scatter.csv`` holds its 4-node × 1-GPU block with the GPU-count and size
columns swapped (a run of ``size(kb) = 1`` rows whose GPUs-per-node column climbs 1 … 262144); the
loader swaps them back (:func:`load_tables` logs it). ``half`` and ``float`` rows are both used (the
time depends on bytes only).

Model and mechanisms: :mod:`joulebound.hw.nccl`. The fit is in log space (relative error) with a
robust loss (``soft_l1``: a few upstream spikes — e.g. a 1.9 ms 4 KiB H100 float all-to-all — must
not steer it), per system and collective: first the one-node rows, then the node crossing on the
multi-node rows with the one-node parameters fixed.

Regenerate the shipped parameters: ``python -m research.nccl_collectives --data DIR --write``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from joulebound.hw.nccl import (
    COLLECTIVES,
    PROVENANCE,
    SCHEMA,
    CollectiveFit,
    LinkFit,
    NetFit,
    Protocol,
    buffer_factor,
    bus_factor,
    collective_time,
    fit_path,
    net_factor,
    ring_steps,
    scale_bandwidth,
)
from joulebound.jobs.collectives import allgather, allreduce, reduce_scatter, sendrecv
from research.result import CheckResult

log = logging.getLogger(__name__)

SUBDIR = "apex_plus_comm"
#: measured systems: folder -> (intra-node link key, inter-node link key or None)
SYSTEMS = {"H100-SXM-80GB": ("nvlink4", None), "H200-SXM-141GB": ("nvlink4", None),
           "V100-PCIE-16GB": ("pcie3-nop2p", "eth-10g")}
#: the pre-fit link table's (effective bandwidth B/s, per-step latency s) of each system's links,
#: frozen here for the "before" figures: the catalog's link of the GPU (``nvlink4`` 450 GB/s x 0.8,
#: 2 us; V100 PCIe: ``pcie3`` 15.75 GB/s x 0.8, 10 us) and the table's ``eth-10g`` (10 Gb/s x 0.6,
#: 50 us) for the socket network
TODAY_LINKS: dict[str, tuple[tuple[float, float], tuple[float, float] | None]] = {
    "H100-SXM-80GB": ((360e9, 2e-6), None), "H200-SXM-141GB": ((360e9, 2e-6), None),
    "V100-PCIE-16GB": ((12.6e9, 10e-6), (0.75e9, 50e-6))}
BIG = 2**20  # "large message" threshold, bytes (1 MiB)
CHECK = "nccl-collectives"


@dataclass(frozen=True)
class Table:
    """Measured rows of one system (arrays of equal length).

    Attributes:
        system: folder name (``"H100-SXM-80GB"``).
        coll: collective name per row (:data:`joulebound.hw.nccl.COLLECTIVES`).
        nodes, per_node: nodes and GPUs per node per row.
        size: buffer bytes. time: measured seconds.
    """

    system: str
    coll: np.ndarray
    nodes: np.ndarray
    per_node: np.ndarray
    size: np.ndarray
    time: np.ndarray

    @property
    def n(self) -> np.ndarray:
        """Ranks per row."""
        return self.nodes * self.per_node

    def take(self, mask: np.ndarray) -> Table:
        return Table(self.system, self.coll[mask], self.nodes[mask], self.per_node[mask],
                     self.size[mask], self.time[mask])


def _repair(rows: list[list[str]], name: str) -> list[list[str]]:
    """Swap back a block whose GPUs-per-node and size columns upstream wrote transposed: a run of
    >= 3 consecutive ``size(kb) == 1`` rows of one node count with a GPUs-per-node value > 64."""
    out: list[list[str]] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][4] == "1" and rows[j][1] == rows[i][1]:
            j += 1
        if j - i >= 3 and max(int(r[2]) for r in rows[i:j]) > 64:
            log.info("%s: rows %d-%d have the GPUs-per-node and size columns swapped; swapped back",
                     name, i + 2, j + 1)
            out += [[r[0], r[1], "1", r[3], r[2], r[5]] for r in rows[i:j]]
            i = j
        else:
            out.append(rows[i])
            i += 1
    return out


def load_tables(data: Path) -> dict[str, Table]:
    """The measured tables under ``data/apex_plus_comm`` by system (sizes > 0 only)."""
    root = Path(data) / SUBDIR
    if not root.is_dir():
        raise FileNotFoundError(f"{root} (the measured NCCL tables, shared data README section 10)")
    out: dict[str, Table] = {}
    for system in SYSTEMS:
        cols: dict[str, list] = {k: [] for k in ("coll", "nodes", "per_node", "size", "time")}
        for coll in COLLECTIVES:
            path = root / system / f"{coll}.csv"
            with path.open(newline="") as fh:
                rows = list(csv.reader(fh))[1:]
            for r in _repair([r for r in rows if r], str(path)):
                kb, us = float(r[4]), float(r[5])
                if kb <= 0:
                    continue
                cols["coll"].append(coll)
                cols["nodes"].append(int(r[1]))
                cols["per_node"].append(int(r[2]))
                cols["size"].append(kb * 1024.0)
                cols["time"].append(us * 1e-6)
        out[system] = Table(system, np.array(cols["coll"]), np.array(cols["nodes"]),
                            np.array(cols["per_node"]), np.array(cols["size"], float),
                            np.array(cols["time"], float))
    return out


def pool(a: Table, b: Table, system: str) -> Table:
    """Two systems' rows as one table (the shipped NVLink 4 fit pools H100 and H200)."""
    return Table(system, *(np.concatenate([getattr(a, k), getattr(b, k)])
                           for k in ("coll", "nodes", "per_node", "size", "time")))


# ---------------------------------------------------------------------------------------------
# fitting

#: weak prior pulling B_loc toward B (the switch case) where the rows cannot tell them apart
_PRIOR_W = 0.05


def _unpack(x: np.ndarray) -> tuple[float, ...]:
    """``(a, α_LL, B_LL, α_S, B_S, B_loc)`` from the fit's free parameters, which keep the
    protocols physical: LL has the smaller latency (``α_S = α_LL + e^x3``) and at most Simple's
    bandwidth (``B_LL = B_S·σ(x2)``: LL spends part of each line on flags)."""
    a, al, bs, bloc = np.exp(x[[0, 1, 4, 5]])
    return (float(a), float(al), float(bs / (1 + np.exp(-x[2]))), float(al + np.exp(x[3])),
            float(bs), float(bloc))


def _pack(a: float, al: float, bl: float, as_: float, bs: float, bloc: float) -> list[float]:
    """Inverse of :func:`_unpack` (starting values, clipped into the physical region)."""
    frac = min(max(bl / bs, 0.01), 0.9)
    return [math.log(a), math.log(al), math.log(frac / (1 - frac)), math.log(max(as_ - al, 0.5 * al)),
            math.log(bs), math.log(bloc)]


def _cfit(x: np.ndarray) -> CollectiveFit:
    a, al, bl, as_, bs, bloc = _unpack(x)
    return CollectiveFit(a, Protocol(al, bl), Protocol(as_, bs, bloc))


def _predict(coll: str, t: Table, fit: CollectiveFit, net: NetFit | None = None) -> np.ndarray:
    return np.array([collective_time(coll, s, int(n), fit, int(nd), net)
                     for s, n, nd in zip(t.size, t.n, t.nodes, strict=True)])


def _split(size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the large (≥ 4 MiB, else the top 30 %) and small (≤ 256 KiB, else the bottom
    30 %) messages, for the fit's linear starting point."""
    big = size >= 4 * 2**20
    small = size <= 256 * 1024
    if big.sum() < 3:
        big = size >= np.quantile(size, 0.7)
    if small.sum() < 3:
        small = size <= np.quantile(size, 0.3)
    return big, small


def _nnls(a: np.ndarray, y: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Non-negative least squares of ``a·x ≈ y`` relative to ``scale`` (default ``y``)."""
    from scipy.optimize import nnls

    w = 1.0 / (y if scale is None else scale)
    return nnls(a * w[:, None], y * w)[0]


def _pos(x: float, fallback: float) -> float:
    """``x`` if positive, else ``fallback`` (a starting value must be > 0 for the log fit)."""
    return float(x) if x > 0 else float(fallback)


def fit_collective(coll: str, t: Table) -> CollectiveFit:
    """The one-node parameters of ``coll`` from the one-node rows of ``t``."""
    m = (t.coll == coll) & (t.nodes == 1)
    d = t.take(m)
    if len(d.size) < 6:
        raise ValueError(f"{t.system} {coll}: {len(d.size)} one-node rows, need >= 6")
    S, n, y = d.size, d.n.astype(float), np.log(d.time)
    k = np.array([ring_steps(coll, int(x)) for x in n])
    f = np.array([bus_factor(coll, int(x)) for x in n])
    g = buffer_factor(coll)

    def res(x: np.ndarray) -> np.ndarray:
        a, al, bl, as_, bs, bloc = _unpack(x)
        t_ll = al * k + S * f / bl
        t_s = as_ * k + S * (f / bs + (g - f) / bloc)
        r = np.log(a + np.minimum(t_ll, t_s)) - y
        return np.append(r, _PRIOR_W * (x[5] - x[4]))

    # starts: linear least squares (relative weights) on the large and the small messages
    big, small = _split(S)
    c_big = _nnls(np.column_stack([np.ones_like(S), k, S * f, S * (g - f)])[big], d.time[big])
    c_small = _nnls(np.column_stack([np.ones_like(S), k, S * f])[small], d.time[small])
    tmin = float(np.min(d.time))
    a0 = _pos(c_small[0], 0.5 * tmin)
    al0 = _pos(c_small[1], tmin / 20)
    bl0 = 1.0 / _pos(c_small[2], 1e-12)
    bs0 = 1.0 / _pos(c_big[2], 1e-12)
    bloc0 = 1.0 / _pos(c_big[3], 0.1 / bs0)
    as0 = max(_pos(c_big[1], 0.0), 2 * al0)
    best = None
    for x0 in ([a0, al0, bl0, as0, bs0, bloc0], [a0, al0, bl0, 4 * as0, bs0, bs0],
               [0.7 * a0, al0, min(bl0, bs0 / 5), as0, bs0, bs0]):
        r = least_squares(res, _pack(*x0), loss="soft_l1", f_scale=0.05)
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    return _cfit(best.x)


def fit_net(coll: str, t: Table, fit: CollectiveFit) -> NetFit | None:
    """The node-crossing parameters of ``coll`` from the multi-node rows (one-node ``fit``
    fixed); None without multi-node rows."""
    d = t.take((t.coll == coll) & (t.nodes > 1))
    if len(d.size) < 4:
        return None

    def mk(x: np.ndarray) -> NetFit:  # the same physical constraints as _unpack
        al, bs = np.exp(x[[0, 3]])
        return NetFit(Protocol(float(al), float(bs / (1 + np.exp(-x[1])))),
                      Protocol(float(al + np.exp(x[2])), float(bs)))

    def pk(al: float, bl: float, as_: float, bs: float) -> list[float]:
        frac = min(max(bl / bs, 0.01), 0.9)
        return [math.log(al), math.log(frac / (1 - frac)), math.log(max(as_ - al, 0.5 * al)),
                math.log(bs)]

    def res(x: np.ndarray) -> np.ndarray:
        return np.log(_predict(coll, d, fit, mk(x))) - np.log(d.time)

    # starts: linear least squares on what the one-node part leaves (large / small messages)
    kn = np.array([ring_steps(coll, int(n)) * nd / n for n, nd in zip(d.n, d.nodes, strict=True)])
    fn = np.array([net_factor(coll, int(n), int(p)) for n, p in zip(d.n, d.per_node, strict=True)])
    kin = np.array([ring_steps(coll, int(n)) for n in d.n]) - kn
    big, small = _split(d.size)
    rest_s = d.time - fit.launch_s - fit.simple.alpha_s * kin
    rest_l = d.time - fit.launch_s - fit.ll.alpha_s * kin
    cs = _nnls(np.column_stack([kn, d.size * fn])[big], rest_s[big], d.time[big])
    cl = _nnls(np.column_stack([kn, d.size * fn])[small], rest_l[small], d.time[small])
    tmin = float(np.min(d.time))
    as0, bs0 = _pos(cs[0], tmin / 2), 1.0 / _pos(cs[1], 1e-12)
    al0, bl0 = _pos(cl[0], tmin / 4), 1.0 / _pos(cl[1], 1e-12)
    best = None
    for x0 in ([al0, bl0, as0, bs0], [al0, min(bl0, bs0 / 4), max(as0, 2 * al0), bs0]):
        r = least_squares(res, pk(*x0), loss="soft_l1", f_scale=0.05)
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    return mk(best.x)


def fit_system(t: Table, colls: tuple[str, ...] = COLLECTIVES) -> tuple[dict[str, CollectiveFit], dict[str, NetFit]]:
    """Per collective: one-node fit and (where there are multi-node rows) node-crossing fit."""
    intra: dict[str, CollectiveFit] = {}
    inter: dict[str, NetFit] = {}
    for c in colls:
        if np.sum((t.coll == c) & (t.nodes == 1)) < 6:
            continue
        intra[c] = fit_collective(c, t)
        nf = fit_net(c, t, intra[c])
        if nf is not None:
            inter[c] = nf
    return intra, inter


def predict_table(t: Table, intra: dict[str, CollectiveFit], inter: dict[str, NetFit]) -> np.ndarray:
    """Modeled seconds of every row of ``t`` (NaN where a collective has no fit)."""
    out = np.full(len(t.size), np.nan)
    for c in np.unique(t.coll):
        m = t.coll == c
        if c not in intra or (np.any(t.nodes[m] > 1) and c not in inter):
            continue
        out[m] = _predict(str(c), t.take(m), intra[c], inter.get(str(c)))
    return out


def today_table(t: Table) -> np.ndarray:
    """Seconds of every row by the pre-fit α–β link table (joulebound 2026-12 before this fit):
    ring/tree all-reduce, ring all-gather/reduce-scatter (all-to-all priced as all-gather),
    nominal × NCCL-efficiency estimate, per-step latency estimate; across nodes the smaller
    bandwidth and the larger latency."""
    a, b = TODAY_LINKS[t.system]
    out = np.empty(len(t.size))
    for i, (c, s, n, nd) in enumerate(zip(t.coll, t.size, t.n, t.nodes, strict=True)):
        bw, lat = a
        if nd > 1 and b is not None:
            bw, lat = min(bw, b[0]), max(lat, b[1])
        n = int(n)
        out[i] = (allreduce(s, n, bw, lat) if c == "all_reduce" else
                  reduce_scatter(s, n, bw, lat) if c == "reduce_scatter" else
                  sendrecv(s, bw, lat) if c == "sendrecv" else allgather(s, n, bw, lat))
    return out


# ---------------------------------------------------------------------------------------------
# held-out evaluation


def leave_one_count_out(t: Table) -> np.ndarray:
    """Per row, its time predicted by a fit that never saw its GPU count (total ranks); NaN
    where the rest cannot fit it (send/recv has one count per system)."""
    out = np.full(len(t.size), np.nan)
    for m in np.unique(t.n):
        hold = t.n == m
        train = t.take(~hold)
        colls = tuple(c for c in COLLECTIVES if np.sum((train.coll == c) & (train.nodes == 1)) >= 6)
        intra, inter = fit_system(train, colls)
        out[hold] = predict_table(t.take(hold), intra, inter)
    return out


def leave_one_type_out(train: Table, test: Table) -> np.ndarray:
    """``test``'s times predicted by the fit on ``train`` (another GPU type, same link class)."""
    intra, inter = fit_system(train)
    return predict_table(test, intra, inter)


def _med(pred: np.ndarray, meas: np.ndarray, mask: np.ndarray) -> float:
    m = mask & np.isfinite(pred)
    return float(np.median(np.abs(pred[m] / meas[m] - 1.0)) * 100.0) if m.any() else math.nan


def summary(data: Path) -> dict[str, dict[str, float]]:
    """Median |error| % of collective time by split: ``{split: {"big": %, "small": %, "n": rows}}``
    for ``today`` (the pre-fit link table on every row), ``count-out`` (leave-one-GPU-count-out,
    all systems) and ``type-out`` (fit on H100, predict H200); messages ≥ 1 MiB are "big"."""
    tabs = load_tables(data)
    acc: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {"today": [], "count-out": [],
                                                                        "type-out": []}
    for t in tabs.values():
        acc["today"].append((today_table(t), t.time, t.size))
        acc["count-out"].append((leave_one_count_out(t), t.time, t.size))
    h200 = tabs["H200-SXM-141GB"]
    acc["type-out"].append((leave_one_type_out(tabs["H100-SXM-80GB"], h200), h200.time, h200.size))
    acc["type-out-today"] = [(today_table(h200), h200.time, h200.size)]
    out: dict[str, dict[str, float]] = {}
    for k, parts in acc.items():
        p, y, s = (np.concatenate(x) for x in zip(*parts, strict=True))
        ok = np.isfinite(p)
        out[k] = {"big": _med(p, y, s >= BIG), "small": _med(p, y, s < BIG), "n": int(ok.sum())}
    return out


def run(data: Path) -> list[CheckResult]:
    """The validation rows: per system and message class, today's link table and the
    leave-one-GPU-count-out fit; H200 predicted from an H100 fit."""
    tabs = load_tables(data)
    out: list[CheckResult] = []
    note = ("median |error| in the workload; MAPE in the columns. Model: joulebound.hw.nccl "
            "(launch + min(LL, Simple) per-step latency and bus bandwidth, local share, NIC "
            f"crossing). Data: {PROVENANCE}")

    def add(gpu: str, what: str, pred: np.ndarray, t: Table) -> None:
        for label, m in (("≥ 1 MiB", t.size >= BIG), ("< 1 MiB", t.size < BIG)):
            ok = m & np.isfinite(pred)
            if not ok.any():
                continue
            med = _med(pred, t.time, m)
            out.append(CheckResult.from_arrays(
                CHECK, gpu, f"{what}, {label}: median {med:.1f} %", pred[ok], t.time[ok],
                None, None, provenance="measured (NCCL tables) vs modeled", note=note,
                points={"x": t.size[ok], "t_meas": t.time[ok], "t_pred": pred[ok]}))

    for name, t in tabs.items():
        add(name, "before: α–β link table", today_table(t), t)
        add(name, "held-out GPU count", leave_one_count_out(t), t)
    h200 = tabs["H200-SXM-141GB"]
    add("H200-SXM-141GB", "held-out GPU type (fit on H100)",
        leave_one_type_out(tabs["H100-SXM-80GB"], h200), h200)
    return out


# ---------------------------------------------------------------------------------------------
# the shipped parameters

#: PCIe generations derived from the measured PCIe 3.0 host-staged fit by the link-rate ratio
_SCALED = {"pcie4-nop2p": 2.0, "pcie5-nop2p": 4.0}


def shipped_document(data: Path) -> dict:
    """The parameter document :mod:`joulebound.hw.nccl` loads (written by :func:`write`)."""
    tabs = load_tables(data)
    nv = pool(tabs["H100-SXM-80GB"], tabs["H200-SXM-141GB"], "H100-SXM-80GB + H200-SXM-141GB")
    nv_intra, _ = fit_system(nv)
    v_intra, v_inter = fit_system(tabs["V100-PCIE-16GB"])
    links = [
        LinkFit("nvlink4", "intra", "HGX H100 / H200 (NVLink 4 + NVSwitch), one node of 2/4/8 GPUs",
                dict(nv_intra), "fitted on the pooled H100-SXM-80GB and H200-SXM-141GB tables"),
        LinkFit("pcie3-nop2p", "intra", "V100-PCIE-16GB node (PCIe 3.0), 2/4 GPUs", dict(v_intra),
                "fitted on the one-node V100 PCIe tables: bus bandwidth 3-4.5 GB/s, about 30 % of "
                "PCIe 3.0 x16, as when NCCL stages through host memory (no peer-to-peer)"),
        LinkFit("eth-10g", "inter", "V100-PCIE-16GB cluster, 2/4 nodes x 1/2/4 GPUs, NCCL sockets",
                dict(v_inter), "fitted on the multi-node V100 tables (NIC bus bandwidth ~1.2 GB/s "
                               "= 10 Gb/s Ethernet, NCCL socket transport)"),
    ]
    for key, ratio in _SCALED.items():
        links.append(LinkFit(key, "intra", f"scaled from pcie3-nop2p x{ratio:g} (link rate)",
                             {c: replace(scale_bandwidth(f, ratio), source="scaled")
                              for c, f in v_intra.items()},
                             "not measured: the PCIe 3.0 host-staged fit with its bandwidths "
                             f"scaled by the PCIe generation's rate ({ratio:g}x)"))
    return {"schema": SCHEMA, "provenance": PROVENANCE,
            "data": f"{SUBDIR}/ of the shared data folder (README section 10)",
            "regenerate": "python -m research.nccl_collectives --data DIR --write",
            "links": [x.to_json() for x in links]}


def _rounded(x: object) -> object:
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def write(data: Path, path: Path | None = None) -> Path:
    """Fit on ``data`` and write the shipped parameter file (default: the package's)."""
    p = path or fit_path()
    p.write_text(json.dumps(_rounded(shipped_document(data)), indent=1) + "\n")
    return p


def main(argv: list[str] | None = None) -> None:
    """``python -m research.nccl_collectives --data DIR [--write] [--out FILE]``."""
    ap = argparse.ArgumentParser(description="Fit the NCCL collective model on the measured tables "
                                             "and print the held-out error (median |error| %).")
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (holds MANIFEST.csv)")
    ap.add_argument("--write", action="store_true", help="write joulebound/hw/data/nccl_fit.json")
    ap.add_argument("--out", type=Path, default=None, help="write the parameters here instead")
    a = ap.parse_args(argv)
    from joulebound.core.datapath import find_data

    data = find_data(a.data)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.write or a.out:
        log.info("wrote %s", write(data, a.out))
    for k, v in summary(data).items():
        log.info("%-15s median |error|: >= 1 MiB %5.1f %%, < 1 MiB %5.1f %% (%d rows)", k, v["big"],
                 v["small"], v["n"])


if __name__ == "__main__":
    main()
