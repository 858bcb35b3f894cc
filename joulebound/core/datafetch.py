"""``joulebound data fetch``: assemble the measurement data folder from the upstream repositories.

The checks of ``joulebound validate`` and ``joulebound fit --data`` read third-party measurement
files (Perseus, Zeus, gpuPTXModel, Guerreiro et al., vTrain, apex_plus, EnergAIzer, telegraf's
nvidia-smi samples, Mayaki & Charpenay). joulebound never ships them. This module downloads each
openly licensed file from its upstream repository **at the commit recorded in the data manifest**
(``core/data/manifest.csv``: path, upstream repository, commit, path upstream, the upstream git
blob id, the transform) and checks it against the manifest before writing it:

* ``verbatim copy`` files: the SHA-256 of the bytes must equal the manifest's;
* ``gzip`` files (stored compressed, the decompressed bytes identical to upstream): the git blob id
  of the downloaded bytes must equal the manifest's ``upstream_git_blob``; the file is then stored
  gzip-compressed (gzip headers differ between compressors, so the stored file's SHA-256 is not
  comparable; the content is).

Files that are not upstream files — written, derived or transcribed by the data's maintainers (the
folder's README, ``*/derived/*``, the Spaan et al. table) — cannot be fetched and are listed as
such. Nothing is written for a file that fails its check; a file already present and correct is
kept. Sources and licenses: ``../shared/data/README.md`` and the README of this project.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import logging
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from joulebound.core.errors import InputError, JouleboundError

log = logging.getLogger(__name__)

#: where raw files are read from: ``{base}/{owner/repo}/{commit}/{path}``
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
#: seconds to wait for one file
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Entry:
    """One row of the data manifest."""

    path: str
    size_bytes: int
    sha256: str
    source_repo: str
    source_commit: str
    source_path: str
    upstream_git_blob: str
    transform: str

    @property
    def fetchable(self) -> bool:
        """An upstream file at a recorded commit (not written or derived by the maintainers)."""
        return ("/" in self.source_repo and bool(self.source_commit) and bool(self.source_path)
                and (self.verbatim or self.gzipped))

    @property
    def verbatim(self) -> bool:
        return self.transform.startswith("verbatim")

    @property
    def gzipped(self) -> bool:
        return self.transform.startswith("gzip")

    def url(self, base: str) -> str:
        path = urllib.parse.quote(self.source_path, safe="/+:,=@-_.~")
        return f"{base.rstrip('/')}/{self.source_repo}/{self.source_commit}/{path}"


def load_manifest(path: str | os.PathLike[str] | None = None) -> list[Entry]:
    """The manifest's rows (default: the copy shipped with joulebound)."""
    if path is None:
        text = (resources.files("joulebound.core") / "data" / "manifest.csv").read_text()
    else:
        text = Path(path).read_text()
    out = []
    for i, r in enumerate(csv.DictReader(text.splitlines()), 2):
        try:
            out.append(Entry(r["path"], int(r["size_bytes"] or 0), r["sha256"], r["source_repo"],
                             r["source_commit"], r["source_path"], r["upstream_git_blob"],
                             r["transform"]))
        except (KeyError, ValueError) as exc:
            raise JouleboundError(f"data manifest line {i}: {exc}") from None
    return out


def git_blob_id(data: bytes) -> str:
    """Git's object id of a file's bytes (``git hash-object``: SHA-1 of ``blob <n>\\0`` + data)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _present_ok(e: Entry, dest: Path) -> bool:
    """The file is already there with the manifest's content."""
    if not dest.is_file():
        return False
    data = dest.read_bytes()
    if _sha256(data) == e.sha256:
        return True
    if e.gzipped:
        try:
            return git_blob_id(gzip.decompress(data)) == e.upstream_git_blob
        except (OSError, EOFError):
            return False
    return False


def _download(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return resp.read()


def _write_atomic(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class FetchResult:
    """What :func:`fetch` did, by manifest path."""

    fetched: list[str]
    kept: list[str]
    failed: dict[str, str]
    not_fetchable: list[str]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict:
        return {"fetched": self.fetched, "kept": self.kept, "failed": self.failed,
                "not_fetchable": self.not_fetchable}


def fetch(to: str | os.PathLike[str], *, base_url: str = DEFAULT_BASE_URL,
          only: Iterable[str] | None = None, manifest: list[Entry] | None = None,
          timeout_s: float = TIMEOUT_S, progress: Callable[[int, int, str], None] | None = None
          ) -> FetchResult:
    """Download every fetchable manifest file into the folder ``to`` (created if missing).

    Args:
        to: the data folder to fill (point ``--data`` / ``JOULEBOUND_DATA`` at it afterwards).
        base_url: where raw files are read from (``{base}/{repo}/{commit}/{path}``; a
            ``file://`` mirror works the same way).
        only: top-level data sets to fetch (e.g. ``["perseus", "zeus_nsdi23"]``; default all).
        manifest: the rows (default: the shipped manifest).
        timeout_s: per file.
        progress: ``progress(done, total, path)`` after each file.

    Returns:
        A :class:`FetchResult`; files that failed their check are not written.
    """
    rows = manifest if manifest is not None else load_manifest()
    root = Path(to)
    if root.exists() and not root.is_dir():
        raise InputError(f"{root} is a file; give a folder to fetch the data into")
    root.mkdir(parents=True, exist_ok=True)
    if manifest is None and not (root / "MANIFEST.csv").exists():   # marks the data folder
        _write_atomic(root / "MANIFEST.csv",
                      (resources.files("joulebound.core") / "data" / "manifest.csv").read_bytes())
    want = set(only or ())
    known = {e.path.split("/", 1)[0] for e in rows if "/" in e.path}
    unknown = want - known
    if unknown:
        raise InputError(f"unknown data set(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(known))}")
    rows = [e for e in rows if not want or e.path.split("/", 1)[0] in want]
    res = FetchResult([], [], {}, [])
    total = len(rows)
    for i, e in enumerate(rows, 1):
        dest = root / e.path
        if not e.fetchable:
            res.not_fetchable.append(e.path)
        elif _present_ok(e, dest):
            res.kept.append(e.path)
        else:
            try:
                data = _download(e.url(base_url), timeout_s)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                res.failed[e.path] = f"download failed: {exc}"
            else:
                if e.verbatim and _sha256(data) != e.sha256:
                    res.failed[e.path] = "SHA-256 differs from the manifest"
                elif e.gzipped and git_blob_id(data) != e.upstream_git_blob:
                    res.failed[e.path] = "content differs from the upstream blob in the manifest"
                else:
                    _write_atomic(dest, gzip.compress(data, mtime=0) if e.gzipped else data)
                    res.fetched.append(e.path)
        if progress:
            progress(i, total, e.path)
    log.info("data fetch: %d fetched, %d kept, %d failed, %d not fetchable", len(res.fetched),
             len(res.kept), len(res.failed), len(res.not_fetchable))
    return res
