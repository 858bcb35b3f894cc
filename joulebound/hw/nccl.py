"""Time of NCCL collectives from measured tables: a two-protocol model with fitted parameters.

The model (pure functions; the fitted parameters ship in ``joulebound/hw/data/nccl_fit.json``,
written by ``python -m research.nccl_collectives --data DIR --write``) prices one collective of a
buffer of ``S`` bytes over ``n`` ranks on ``nodes`` nodes:

``t = a + min(t_LL, t_Simple)``, per protocol ``p``:
``t_p = α_p·k_in + α_net,p·k_net + S·max(f/B_p + (g − f)/B_loc,p, f_net/B_net,p)``

* ``a`` (s) — the fixed cost of one collective: the host enqueues it and launches its kernel
  (measured back to back in a loop, so it is the host's cost per collective, 4.5–7 µs on all three
  measured systems).
* Two protocols, the faster one wins — NCCL's tuner picks, per message size, between its
  latency-optimized protocols (LL/LL128: a small per-step latency, a low bandwidth) and Simple
  (a larger per-step latency — it synchronizes every chunk — and full bandwidth). A single
  ``α + S/B`` cannot reproduce the measured curves: on an H100 NVSwitch node the large-message
  line of all-reduce has a ~60 µs intercept while a 4 MiB all-reduce takes 52 µs. A smooth
  efficiency ramp ``α + S/(B·(1 − e^{−S/S½}))`` was tried first and fits worse (its fitted
  ``S½`` collapses to 0: the large-message intercept is latency, not a bandwidth ramp).
* Ring steps ``k`` and bytes through each GPU's link per byte of buffer ``f`` (the bus factor):
  all-reduce ``k = 2(n−1)``, ``f = 2(n−1)/n``; all-gather / reduce-scatter / all-to-all
  ``k = n−1``, ``f = (n−1)/n``; send/recv ``k = 1``, ``f = 1``. ``S`` is the full buffer (the
  gathered output of all-gather, the input of reduce-scatter), as the measured tables count it.
* The local share ``(g − f)·S`` (``g`` = 2 for all-reduce, 1 otherwise: the rank's own shard is
  copied / reduced locally) runs at ``B_loc``. On the NVSwitch nodes the fit finds
  ``B_loc ≈ B``: the time of a large collective is nearly independent of ``n`` (the algorithm
  bandwidth, not the bus bandwidth, is constant), which a pure ring formula cannot show; on a
  ring of point-to-point links ``B_loc ≫ B``.
* Across nodes a ring crosses ``nodes`` of its ``n`` edges: ``k_net = k·nodes/n`` of its steps
  pay the network latency, and the bytes through the node's NIC are ``f_net·S`` with
  ``f_net = f`` for a ring (one crossing per node, whatever the GPUs per node) but
  ``f_net = g_pn·(n − g_pn)/n`` for all-to-all (every GPU of the node sends to every other node
  through the one NIC: the NIC is shared by the ``g_pn`` GPUs of a node — the measured V100 cluster
  shows exactly this, all-to-all bandwidth falling with GPUs per node while ring collectives do
  not).

Units: bytes, s, bytes/s. Everything here is **modeled**; the parameters are **calibrated** on
measured NCCL tables (see :data:`PROVENANCE`), except where :attr:`CollectiveFit.source` says
"scaled" or "datasheet".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from joulebound.core.errors import JouleboundError

#: collectives the model prices (the measured tables' names)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
FIT_FILE = "nccl_fit.json"
SCHEMA = "joulebound.nccl-fit/1"
PROVENANCE = "calibrated on measured NCCL tables (microsoft/apex_plus @ 8769096)"


def ring_steps(coll: str, n: int) -> float:
    """Latency steps ``k`` of ``coll`` over ``n`` ranks (ring algorithm; send/recv: 1)."""
    if coll == "all_reduce":
        return 2.0 * (n - 1)
    if coll == "sendrecv":
        return 1.0
    return float(n - 1)


def bus_factor(coll: str, n: int) -> float:
    """Bytes through each rank's peer link per byte of buffer (``f``, dimensionless)."""
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll == "sendrecv":
        return 1.0
    return (n - 1) / n


def buffer_factor(coll: str) -> float:
    """Bytes each rank moves per byte of buffer, peer and local together (``g``): 2 for
    all-reduce (reduce-scatter then all-gather), 1 otherwise."""
    return 2.0 if coll == "all_reduce" else 1.0


def net_factor(coll: str, n: int, per_node: int) -> float:
    """Bytes through one node's NIC per byte of buffer (``f_net``) when ``n`` ranks sit on
    nodes of ``per_node``: a ring crosses each node boundary once (``f``); all-to-all sends
    every GPU's share for the other nodes through the node's one NIC."""
    if coll == "alltoall":
        return per_node * (n - per_node) / n
    return bus_factor(coll, n)


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol regime on one link.

    Attributes:
        alpha_s: latency per ring step (s).
        bw_bps: bus bandwidth of the peer link (bytes/s).
        local_bps: bandwidth of the local share (bytes/s; ``inf`` = free).
    """

    alpha_s: float
    bw_bps: float
    local_bps: float = math.inf


@dataclass(frozen=True)
class CollectiveFit:
    """The parameters of one collective on one link class.

    Attributes:
        launch_s: fixed host + launch cost per collective (s).
        ll: the latency-optimized protocol (LL/LL128).
        simple: the bandwidth-optimized protocol (Simple).
        source: ``"fit"`` (calibrated on the measured table), ``"scaled"`` (a fit with its
            bandwidths scaled by the link-rate ratio) or ``"datasheet"`` (α–β from the link table).
    """

    launch_s: float
    ll: Protocol
    simple: Protocol
    source: str = "fit"

@dataclass(frozen=True)
class NetFit:
    """Node-crossing parameters of one collective (network latency per crossing step, NIC bus
    bandwidth) per protocol."""

    ll: Protocol
    simple: Protocol
    source: str = "fit"


def collective_time(coll: str, size: float, n: int, fit: CollectiveFit, nodes: int = 1,
                    net: NetFit | None = None, net_share: float = 1.0) -> float:
    """Modeled time (s) of ``coll`` on a buffer of ``size`` bytes over ``n`` ranks spread over
    ``nodes`` nodes (see the module docstring); ``net`` prices the node crossing, shared by
    ``net_share`` concurrent groups per NIC. 0 for one rank or an empty buffer."""
    if coll not in COLLECTIVES:
        raise JouleboundError(f"unknown collective {coll!r}; one of {', '.join(COLLECTIVES)}")
    if n <= 1 or size <= 0:
        return 0.0
    nodes = max(1, min(int(nodes), n))
    if nodes > 1 and net is None:
        raise JouleboundError(f"{coll} over {nodes} nodes needs the network link's parameters")
    k = ring_steps(coll, n)
    f, g = bus_factor(coll, n), buffer_factor(coll)
    k_net = k * nodes / n if nodes > 1 else 0.0
    best = math.inf
    for p_in, p_net in ((fit.ll, net.ll if net else None), (fit.simple, net.simple if net else None)):
        per_byte = f / p_in.bw_bps + (g - f) / p_in.local_bps
        lat = p_in.alpha_s * (k - k_net)
        if p_net is not None and nodes > 1:
            per_byte = max(per_byte, net_factor(coll, n, math.ceil(n / nodes)) * net_share
                           / p_net.bw_bps)
            lat += p_net.alpha_s * k_net
        best = min(best, lat + size * per_byte)
    return fit.launch_s + best


@dataclass(frozen=True)
class LinkFit:
    """Fitted collective parameters of one link class (a key of :data:`joulebound.hw.links.LINKS`).

    Attributes:
        link: the link-table key (``"nvlink4"``, ``"pcie3-nop2p"``, ``"eth-10g"``).
        scope: ``"intra"`` (GPUs of a node) or ``"inter"`` (between nodes).
        system: the measured system the fit comes from.
        collectives: per collective, its :class:`CollectiveFit` (intra) or :class:`NetFit` (inter).
        note: how the figures were obtained.
    """

    link: str
    scope: str
    system: str
    collectives: dict[str, CollectiveFit | NetFit] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict:
        return {"link": self.link, "scope": self.scope, "system": self.system, "note": self.note,
                "collectives": {c: _fit_json(v) for c, v in self.collectives.items()}}

    @classmethod
    def from_json(cls, d: dict) -> LinkFit:
        out: dict[str, CollectiveFit | NetFit] = {}
        for c, v in d["collectives"].items():
            ll, simple = Protocol(**_inf(v["ll"])), Protocol(**_inf(v["simple"]))
            out[c] = (CollectiveFit(v["launch_s"], ll, simple, v.get("source", "fit"))
                      if "launch_s" in v else NetFit(ll, simple, v.get("source", "fit")))
        return cls(d["link"], d["scope"], d["system"], out, d.get("note", ""))


def _fit_json(v: CollectiveFit | NetFit) -> dict:
    d = asdict(v)
    for p in ("ll", "simple"):
        if math.isinf(d[p]["local_bps"]):
            d[p]["local_bps"] = None  # JSON has no infinity
    return d


def _inf(p: dict) -> dict:
    return {**p, "local_bps": math.inf if p.get("local_bps") is None else p["local_bps"]}


def fit_path() -> Path:
    """The shipped parameter file."""
    return Path(str(resources.files("joulebound.hw") / "data" / FIT_FILE))


def fits_from_json(doc: dict) -> dict[str, LinkFit]:
    """The link fits of a parameter document (``{"schema", "provenance", "links": [...]}``)."""
    if doc.get("schema") != SCHEMA:
        raise JouleboundError(f"not a joulebound NCCL fit (schema {doc.get('schema')!r}, "
                              f"expected {SCHEMA!r})")
    return {d["link"]: LinkFit.from_json(d) for d in doc["links"]}


@lru_cache(maxsize=1)
def shipped_fits() -> dict[str, LinkFit]:
    """The shipped fits by link key (empty when the file is absent: every link then falls back to
    its datasheet α–β)."""
    p = fit_path()
    if not p.is_file():
        return {}
    return fits_from_json(json.loads(p.read_text()))


#: fitted launch cost per collective (s) when a link has no fit: the median of the fitted
#: systems' (4.5–7 µs), else this
DEFAULT_LAUNCH_S = 6e-6


@lru_cache(maxsize=1)
def default_launch_s() -> float:
    """The launch cost per collective (s) used for links the tables do not cover: the median of
    every fitted collective's ``launch_s``."""
    xs = sorted(v.launch_s for f in shipped_fits().values() for v in f.collectives.values()
                if isinstance(v, CollectiveFit) and v.source == "fit")
    return xs[len(xs) // 2] if xs else DEFAULT_LAUNCH_S


def scale_bandwidth(fit: CollectiveFit | NetFit, ratio: float) -> CollectiveFit | NetFit:
    """``fit`` with every bandwidth multiplied by ``ratio`` (a calibrated efficiency scale);
    latencies and the launch cost unchanged."""
    if ratio == 1.0:
        return fit
    def sc(p: Protocol) -> Protocol:
        return Protocol(p.alpha_s, p.bw_bps * ratio, p.local_bps * ratio)
    if isinstance(fit, CollectiveFit):
        return CollectiveFit(fit.launch_s, sc(fit.ll), sc(fit.simple), fit.source)
    return NetFit(sc(fit.ll), sc(fit.simple), fit.source)


@lru_cache(maxsize=256)
def link_fit(link: str, coll: str) -> CollectiveFit | NetFit | None:
    """The shipped fit of ``coll`` on the link ``link`` (a link-table key), or None."""
    f = shipped_fits().get(link)
    return None if f is None else f.collectives.get(coll)
