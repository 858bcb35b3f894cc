"""``characterize()`` against cells saved from the implementation it replaced.

``fixtures/characterize_reference.npz`` holds time and energy of 3,000 cells per case (half at
random, half among the power-capped cells) and the per-config sums over all kernels, computed by
the previous evaluation (``kernel_time_energy`` cell by cell in float64, 22-step cap bisection;
see ``fixtures/make_characterize_reference.py``). The current evaluation must give the same
figures within :data:`REL` relative, capped or not.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from joulebound.gpumodel import characterize

FIXTURES = Path(__file__).with_name("fixtures")
REL = 1e-7          # relative, on every saved cell and every per-config sum


def _cases() -> dict[str, dict]:
    spec = importlib.util.spec_from_file_location(
        "make_characterize_reference", FIXTURES / "make_characterize_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cases()


@pytest.fixture(scope="module")
def reference():
    with np.load(FIXTURES / "characterize_reference.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("case", ["measured", "capped", "analytic"])
def test_characterize_reproduces_the_saved_reference(case, reference) -> None:
    kw = _cases()[case]
    ch = characterize(**kw)
    ref = {k.split("/", 1)[1]: v for k, v in reference.items() if k.startswith(case + "/")}
    k, j = ref["kernel"].astype(int), ref["config"].astype(int)
    for got, want in ((ch.time_s[k, j], ref["time_s"]), (ch.energy_j[k, j], ref["energy_j"]),
                      (ch.time_s.sum(axis=0), ref["time_colsum"]),
                      (ch.energy_j.sum(axis=0), ref["energy_colsum"])):
        rel = np.abs(got / want - 1.0)
        assert rel.max() <= REL, f"{case}: worst relative difference {rel.max():.2e}"
    assert ch.meta["n_unique_kernels"] == int(ref["n_unique"])
    # the share of capped cells: at most a cell in 10^4 on the other side of the limit
    assert abs(ch.meta["capped_cells_fraction"] - float(ref["capped_fraction"])) <= 1e-4
    if case == "capped":
        assert float(ref["capped_fraction"]) > 0.3      # the cap solve is what is pinned here
