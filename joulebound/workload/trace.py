"""``Kernel`` and ``Trace``: the ordered kernels of one training iteration.

A trace comes from the analytic transformer model (:mod:`joulebound.workload.analytic`), from a
torch.profiler / Kineto export (:mod:`joulebound.workload.kineto`), or from a file written by
:meth:`Trace.save`. Units: FLOP (floating-point operations, a multiply-add counts 2), bytes (read +
written to DRAM), seconds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from joulebound.core.errors import SchemaError
from joulebound.core.jsonio import Fields, check_header, read_json, write_json
from joulebound.core.vocab import ALL_DTYPES

Category = Literal["gemm", "attention", "elementwise", "norm", "softmax", "reduction",
                   "embedding", "optimizer", "memcpy", "communication", "other"]
CATEGORIES: tuple[str, ...] = ("gemm", "attention", "elementwise", "norm", "softmax", "reduction",
                               "embedding", "optimizer", "memcpy", "communication", "other")
Phase = Literal["forward", "backward", "optimizer", "other"]
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")
DTYPES: tuple[str, ...] = ALL_DTYPES

SCHEMA = "joulebound.trace"
VERSION = 1


@dataclass
class Kernel:
    """One kernel invocation.

    Attributes:
        name: kernel name (analytic: e.g. ``"qkv_gemm"``; imported: the CUDA kernel name).
        category: one of :data:`CATEGORIES`.
        phase: one of :data:`PHASES`.
        layer: transformer layer index, ``None`` outside layers (embedding, loss, optimizer).
        flops: floating-point operations (FLOP).
        bytes: DRAM bytes read + written.
        dtype: math dtype (``"bf16"``, ...), decides the peak rate used.
        duration_s: measured duration (s) when known (imported traces), else ``None``.
        meta: free-form extras (stream, launching CPU op, input shapes, ...).
    """

    name: str
    category: str
    phase: str
    layer: int | None
    flops: float
    bytes: float
    dtype: str = "bf16"
    duration_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte (inf when no bytes move)."""
        return self.flops / self.bytes if self.bytes > 0 else float("inf")

    @property
    def signature(self) -> tuple[str, str, str, float, float]:
        """Key of identical invocations (same name, category, dtype, FLOPs and bytes)."""
        return (self.name, self.category, self.dtype, self.flops, self.bytes)


@dataclass
class Trace:
    """An ordered kernel sequence of one training iteration.

    Attributes:
        kernels: the kernels in launch order.
        name: what was traced (preset name, file name).
        meta: the configuration (L, d, heads, ff, vocab, S, B, dtype, ...) and ``source``
            (``"analytic"``, ``"kineto"``, ``"torch.profiler"``).
    """

    kernels: list[Kernel]
    name: str = "trace"
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kernels)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.kernels)

    def __getitem__(self, i: int) -> Kernel:
        return self.kernels[i]

    # -- array views (cheap, used by the models and solvers) ----------------------------------
    def distinct(self) -> tuple[Trace, np.ndarray]:
        """The trace's distinct kernels (by :attr:`Kernel.signature`, first occurrence order) and
        how many times each occurs: ``(trace, counts)``. A model evaluated on the distinct
        kernels and weighted by the counts gives the whole trace's totals."""
        first: dict[tuple, int] = {}
        kernels: list[Kernel] = []
        counts: list[int] = []
        for k in self.kernels:
            i = first.setdefault(k.signature, len(kernels))
            if i == len(kernels):
                kernels.append(k)
                counts.append(0)
            counts[i] += 1
        return Trace(kernels, name=self.name, meta=dict(self.meta)), np.array(counts, float)

    def flops(self) -> np.ndarray:
        """FLOPs per kernel, shape (K,)."""
        return np.fromiter((k.flops for k in self.kernels), float, len(self.kernels))

    def bytes(self) -> np.ndarray:
        """DRAM bytes per kernel, shape (K,)."""
        return np.fromiter((k.bytes for k in self.kernels), float, len(self.kernels))

    def durations(self) -> np.ndarray:
        """Measured durations (s), NaN where unknown, shape (K,)."""
        return np.array([np.nan if k.duration_s is None else k.duration_s for k in self.kernels])

    def names(self) -> list[str]:
        return [k.name for k in self.kernels]

    def categories(self) -> list[str]:
        return [k.category for k in self.kernels]

    def phases(self) -> list[str]:
        return [k.phase for k in self.kernels]

    @property
    def total_flops(self) -> float:
        return float(self.flops().sum())

    @property
    def total_bytes(self) -> float:
        return float(self.bytes().sum())

    def count_by(self, attr: str) -> Counter[str]:
        """Number of kernels per value of ``attr`` (``"phase"``, ``"category"``, ...)."""
        return Counter(str(getattr(k, attr)) for k in self.kernels)

    def signature_groups(self) -> np.ndarray:
        """Group id per kernel such that identical invocations share an id, shape (K,)."""
        ids: dict[tuple, int] = {}
        return np.array([ids.setdefault(k.signature, len(ids)) for k in self.kernels], dtype=np.int64)

    # -- files --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The trace as a JSON document (kernels as plain dicts; ``meta`` dicts shallow-copied)."""
        return {"schema": SCHEMA, "version": VERSION, "name": self.name, "meta": dict(self.meta),
                "kernels": [{"name": k.name, "category": k.category, "phase": k.phase,
                             "layer": k.layer, "flops": k.flops, "bytes": k.bytes,
                             "dtype": k.dtype, "duration_s": k.duration_s, "meta": dict(k.meta)}
                            for k in self.kernels]}

    def save(self, path: str | Path) -> Path:
        """Write the trace as versioned JSON (``.json`` or ``.json.gz``), compact: a trace of
        10^5 kernels is tens of MB, written by the C encoder (an indented file takes seconds)."""
        return write_json(path, self.to_json(), indent=None)

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace file; a malformed or wrong-version file raises ``SchemaError``."""
        doc = check_header(read_json(path), path, SCHEMA, VERSION)
        return cls.from_json(doc, path)

    @classmethod
    def from_json(cls, doc: dict[str, Any], path: str | Path = "<trace>") -> Trace:
        top = Fields(doc, path)
        raw = top.get("kernels", list)
        kernels = []
        for i, obj in enumerate(raw):
            f = Fields(obj, path, f"kernels[{i}]")
            category = f.get("category", str)
            if category not in CATEGORIES:
                raise SchemaError(path, f"kernels[{i}].category",
                                  f"unknown category {category!r} (one of {', '.join(CATEGORIES)})")
            phase = f.get("phase", str)
            if phase not in PHASES:
                raise SchemaError(path, f"kernels[{i}].phase",
                                  f"unknown phase {phase!r} (one of {', '.join(PHASES)})")
            kernels.append(Kernel(
                name=f.get("name", str), category=category, phase=phase,
                layer=f.get("layer", int, None),
                flops=f.get("flops", float, nonneg=True), bytes=f.get("bytes", float, nonneg=True),
                dtype=f.get("dtype", str, "bf16"),
                duration_s=f.get("duration_s", float, None, nonneg=True),
                meta=f.get("meta", dict, {}),
            ))
        return cls(kernels=kernels, name=top.get("name", str, "trace"), meta=top.get("meta", dict, {}))
