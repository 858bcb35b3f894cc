"""Library code logs; only entry points show it (joulebound.core.logs.show_progress)."""

from __future__ import annotations

import logging
import subprocess
import sys


def test_show_progress_prints_plain_lines_once(capsys) -> None:
    from joulebound.core.logs import show_progress

    logger = logging.getLogger("joulebound")
    handlers, level = list(logger.handlers), logger.level
    try:
        show_progress()
        show_progress()  # idempotent: one handler
        logging.getLogger("joulebound.jobs.report").info("evaluated %s", "x")
        assert capsys.readouterr().err.count("evaluated x") == 1
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)


def test_importing_the_package_configures_no_logging() -> None:
    code = ("import logging, joulebound.cli, joulebound.jobs.report, joulebound.workload.capture;"
            "print(logging.getLogger().handlers, logging.getLogger('joulebound').handlers)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[] []"
