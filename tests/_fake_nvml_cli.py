"""Run the joulebound CLI in a real child process whose ``pynvml`` is a cross-process FakeNvml.

``python tests/_fake_nvml_cli.py ARGS...`` behaves as ``joulebound ARGS...`` with:

* ``pynvml`` replaced by :class:`~joulebound.testing.fakenvml.FakeNvml` configured from the
  JSON in ``$JOULEBOUND_TEST_FAKE_NVML`` (``state`` path — shared with the test process, which
  watches the clock locks — and optional ``n_gpus``, ``delays``, ``privileged``,
  ``memory_locks``, ``failing_gpus``);
* the root/CAP_SYS_ADMIN check answered by ``privileged`` (default true);
* the machine's GPU lock folder (``joulebound.hw.gpu.LOCK_DIR``) at ``locks`` in that JSON, else
  ``$JOULEBOUND_TEST_LOCK_DIR`` (the suite's per-test folder) — the library itself reads no
  variable for it.

Used by the clock-safety tests: signals, kills and races against the real CLI.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    cfg = json.loads(os.environ["JOULEBOUND_TEST_FAKE_NVML"])
    from joulebound.testing.fakenvml import FakeNvml

    nv = FakeNvml(n_gpus=int(cfg.get("n_gpus", 1)), state_path=cfg["state"],
                  delays=cfg.get("delays"), privileged=bool(cfg.get("privileged", True)),
                  memory_locks=bool(cfg.get("memory_locks", True)),
                  failing_gpus=set(cfg.get("failing_gpus", ())))
    sys.modules["pynvml"] = nv
    import joulebound.hw.gpu as gpu_layer

    gpu_layer.has_clock_privileges = lambda: bool(cfg.get("privileged", True))
    locks = cfg.get("locks") or os.environ.get("JOULEBOUND_TEST_LOCK_DIR")
    if locks:
        gpu_layer.LOCK_DIR = Path(locks)
    from joulebound.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
