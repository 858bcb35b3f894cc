"""Output folders the user names: made (with parents) or refused with a message that says what
is in the way and how to fix it, never an ``OSError`` traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from joulebound.core.errors import JouleboundError


def ensure_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Create folder ``path`` (and its parents) if missing and check that it can be written;
    return it as a :class:`~pathlib.Path`.

    Raises :class:`~joulebound.core.errors.JouleboundError` naming ``what`` and the path when a
    file (not a folder) stands at ``path`` or at one of its parents, when a parent cannot be
    created (a read-only or virtual file system such as ``/proc``), or when the folder is not
    writable. Nothing existing is removed or overwritten."""
    p = Path(path).expanduser()
    for parent in (p, *p.parents):
        if parent.exists() and not parent.is_dir():
            raise JouleboundError(
                f"{what} {p}: {parent} is a file, not a folder; pass a new or existing folder "
                "(nothing was written)")
        if parent.exists():
            break
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        hint = ("choose a folder you can write" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
                else "choose a folder on a writable file system")
        raise JouleboundError(f"cannot create {what} {p}: {why}; {hint} "
                              "(nothing was written)") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise JouleboundError(f"{what} {p} is not writable; choose a folder you can write "
                              "(nothing was written)")
    return p


def missing_folder(path: str | os.PathLike[str]) -> Path | None:
    """The outermost folder of ``path`` (itself or a parent) that does not exist yet, which
    writing a file into ``path`` creates; ``None`` when ``path`` exists. A command that makes
    folders for its output says so with it."""
    p = Path(path).expanduser()
    top = None
    for q in (p, *p.parents):
        if q.exists():
            break
        top = q
    return top
