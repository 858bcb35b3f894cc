"""Logging for joulebound's program entry points.

Library modules log through module loggers (``logging.getLogger(__name__)``, all under the
``joulebound`` logger) and never configure logging; an entry point (``python -m ...``) that wants
its progress on the terminal calls :func:`show_progress`.
"""

from __future__ import annotations

import logging
import sys


def show_progress(level: int = logging.INFO) -> logging.Logger:
    """Send ``joulebound`` log records of ``level`` and above to stderr as plain lines (once per
    process; later calls only change the level). Returns the ``joulebound`` logger."""
    logger = logging.getLogger("joulebound")
    if not any(getattr(h, "joulebound_progress", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.joulebound_progress = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
    return logger
