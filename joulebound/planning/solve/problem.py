"""Shared pieces of every planning problem: baseline, alignment with a trace, granularity groups.

Pure functions of arrays (and of a :class:`~joulebound.workload.trace.Trace` for the group
structure); no I/O.
"""

from __future__ import annotations

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.vocab import PLAN_GRANULARITIES
from joulebound.gpumodel.characterization import Characterization
from joulebound.workload.trace import Trace

#: plan granularities, coarsest first
GRANULARITIES: tuple[str, ...] = PLAN_GRANULARITIES


def baseline_column(char: Characterization) -> int:
    """Column of the baseline: the governor ("auto") if characterized, else the top clocks.

    "Top clocks" is the configuration with the highest memory clock, then the highest core clock
    (auto in one domain counts as higher than any fixed clock).
    """
    auto = char.auto_index
    if auto is not None:
        return auto
    big = 10**9

    def key(i: int) -> tuple[int, int]:
        c = char.configs[i]
        return (big if c.mem_mhz is None else c.mem_mhz, big if c.core_mhz is None else c.core_mhz)

    return max(range(char.n_configs), key=key)


def planning_columns(char: Characterization, allow_auto: bool = True) -> np.ndarray:
    """Columns a plan may choose: every configuration, without the governor ("auto") when
    ``allow_auto`` is False (and another configuration exists)."""
    cols = np.arange(char.n_configs)
    if not allow_auto and char.auto_index is not None and char.n_configs > 1:
        cols = cols[cols != char.auto_index]
    return cols


def baseline_totals(char: Characterization) -> tuple[float, float]:
    """Modeled (time_s, energy_j) of one iteration at the baseline column."""
    b = baseline_column(char)
    return float(char.time_s[:, b].sum()), float(char.energy_j[:, b].sum())


def align(char: Characterization, trace: Trace) -> Characterization:
    """``char`` with one row per kernel of ``trace``, in trace order.

    When the names already match row for row, ``char`` is returned unchanged. Otherwise rows are
    matched by kernel name (a characterization measured once per distinct kernel serves every
    invocation). Raises :class:`JouleboundError` naming the trace's kernels the
    characterization lacks, or names whose rows disagree.
    """
    names = trace.names()
    if names == list(char.kernel_names):
        return char
    index: dict[str, int] = {}
    ambiguous: set[str] = set()
    for i, n in enumerate(char.kernel_names):
        j = index.setdefault(n, i)
        if j != i and not (np.array_equal(char.time_s[i], char.time_s[j])
                           and np.array_equal(char.energy_j[i], char.energy_j[j])):
            ambiguous.add(n)
    missing = sorted({n for n in names if n not in index})
    if missing:
        shown = ", ".join(repr(n) for n in missing[:10])
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        raise JouleboundError(
            f"the characterization (device {char.device or '?'}, {char.n_kernels} kernels) lacks "
            f"{len(missing)} kernel name(s) of trace {trace.name!r}: {shown}{more}. "
            "Characterize this trace (`joulebound characterize`), or measure those kernels.")
    used = sorted(ambiguous & set(names))
    if used:
        raise JouleboundError(
            f"kernel name(s) {', '.join(repr(n) for n in used[:10])} appear several times in the "
            "characterization with different times/energies, so trace kernels cannot be matched by "
            "name; characterize the trace itself so rows follow the trace order.")
    rows = np.fromiter((index[n] for n in names), np.int64, len(names))
    return Characterization(
        kernel_names=names, configs=list(char.configs), time_s=char.time_s[rows],
        energy_j=char.energy_j[rows], measured=char.measured[rows], device=char.device,
        time_spread_s=None if char.time_spread_s is None else char.time_spread_s[rows],
        energy_spread_j=None if char.energy_spread_j is None else char.energy_spread_j[rows],
        meta={**char.meta, "aligned_to": trace.name})


def granularity_groups(granularity: str, n_kernels: int, trace: Trace | None = None,
                       tie: bool = False) -> np.ndarray:
    """Group id per kernel: kernels of one group share one clock configuration.

    * ``iteration``: one group;
    * ``pass``: one group per phase (forward, backward, optimizer, other);
    * ``layer``: one group per (phase, layer); kernels outside layers (embedding, loss, head,
      optimizer) form one group per phase;
    * ``kernel``: one group per kernel invocation.

    ``tie=True`` additionally forces identical invocations (same
    :meth:`~joulebound.workload.trace.Trace.signature_groups`) onto one configuration, merging
    groups that share such a kernel (connected components).
    """
    if granularity not in GRANULARITIES:
        raise JouleboundError(f"unknown granularity {granularity!r}; one of {', '.join(GRANULARITIES)}")
    if granularity in ("pass", "layer") or tie:
        if trace is None:
            raise JouleboundError(f"granularity {granularity!r}{' with tying' if tie else ''} "
                                  "needs the trace (phases, layers, kernel signatures)")
        if len(trace) != n_kernels:
            raise JouleboundError(f"trace has {len(trace)} kernels, characterization {n_kernels}")
    if granularity == "iteration":
        g = np.zeros(n_kernels, np.int64)
    elif granularity == "kernel":
        g = np.arange(n_kernels, dtype=np.int64)
    elif granularity == "pass":
        _, g = np.unique(np.array(trace.phases()), return_inverse=True)  # type: ignore[union-attr]
    else:
        keys = [f"{k.phase}:{'-' if k.layer is None else k.layer}" for k in trace]  # type: ignore[union-attr]
        _, g = np.unique(np.array(keys), return_inverse=True)
    if tie:
        from scipy.sparse import coo_array
        from scipy.sparse.csgraph import connected_components

        sig = trace.signature_groups()  # type: ignore[union-attr]
        n_g = int(g.max()) + 1 if n_kernels else 0
        # bipartite graph: granularity groups <-> signatures; components are the tied groups
        n = n_g + int(sig.max()) + 1 if n_kernels else 0
        adj = coo_array((np.ones(n_kernels), (g, sig + n_g)), shape=(n, n))
        _, comp = connected_components(adj, directed=False)
        g = comp[g]
    _, g = np.unique(g, return_inverse=True)
    return g.astype(np.int64)


def aggregate(values: np.ndarray, groups: np.ndarray, n_groups: int | None = None) -> np.ndarray:
    """Sum rows of ``values`` (K, C) per group id: (G, C)."""
    from scipy.sparse import csr_array

    k = len(groups)
    n_groups = int(groups.max()) + 1 if n_groups is None else n_groups
    m = csr_array((np.ones(k), (groups, np.arange(k))), shape=(n_groups, k))
    return np.asarray(m @ values)
