"""Finding the real third-party measurement data (``../shared/data`` beside the checkout).

The data is never copied into the repository. Commands take ``--data PATH``; without it, the
``JOULEBOUND_DATA`` environment variable, then ``../shared/data`` relative to the current directory
and to the package's source checkout are tried.
"""

from __future__ import annotations

import os
from pathlib import Path

from joulebound.core.errors import JouleboundError

ENV_VAR = "JOULEBOUND_DATA"


def candidates() -> list[Path]:
    """Places searched for the data folder, in order."""
    out: list[Path] = []
    if os.environ.get(ENV_VAR):
        out.append(Path(os.environ[ENV_VAR]))
    here = Path.cwd()
    out += [here / "../shared/data", here / "shared/data"]
    src = Path(__file__).resolve().parent.parent  # the checkout root for an editable install
    out += [src / "../shared/data"]
    return out


def find_data(path: str | os.PathLike[str] | None = None, required: bool = True) -> Path | None:
    """Return the data folder (it must contain ``README.md`` or ``MANIFEST.csv``).

    Raises :class:`JouleboundError` naming the places tried when ``required`` and none is found.
    """
    tried = [Path(path)] if path is not None else candidates()
    for p in tried:
        if p.is_dir() and ((p / "MANIFEST.csv").exists() or (p / "README.md").exists()):
            return p.resolve()
    if not required:
        return None
    where = ", ".join(str(p) for p in tried)
    raise JouleboundError(
        f"measurement data folder not found (tried: {where}). Pass --data PATH pointing at the "
        f"shared data folder (the one holding MANIFEST.csv), or set {ENV_VAR}."
    )
