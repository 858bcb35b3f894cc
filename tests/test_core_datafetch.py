"""Issue 28 item 13: ``joulebound data fetch`` assembles the measurement folder from upstream.

No network in tests: a ``file://`` mirror laid out as ``{repo}/{commit}/{path}`` is built from
``../shared/data`` (decompressing the files stored gzip-compressed, as upstream holds them)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from joulebound.core.datafetch import fetch, git_blob_id, load_manifest


def _mirror(shared: Path, tmp: Path, rows) -> str:
    base = tmp / "mirror"
    for e in rows:
        if not e.fetchable:
            continue
        data = (shared / e.path).read_bytes()
        if e.gzipped:
            data = gzip.decompress(data)
        dest = base / e.source_repo / e.source_commit / e.source_path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return base.as_uri()


def test_the_shipped_manifest_lists_fetchable_and_maintainer_files():
    rows = load_manifest()
    assert len(rows) > 600
    assert sum(e.fetchable for e in rows) > 600
    nf = {e.path for e in rows if not e.fetchable}
    assert "README.md" in nf and "spaan2026/table1_forward.csv" in nf
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object


def test_fetch_from_a_mirror_checks_every_file_and_writes_nothing_wrong(shared_data, tmp_path):
    rows = load_manifest()
    pick = ([e for e in rows if e.gzipped][:2] + [e for e in rows if e.verbatim][:3]
            + [e for e in rows if not e.fetchable][:1])
    url = _mirror(shared_data, tmp_path, pick)
    out = tmp_path / "data"
    res = fetch(out, base_url=url, manifest=pick)
    assert res.ok and len(res.fetched) == 5 and len(res.not_fetchable) == 1
    for e in pick[:5]:
        got = (out / e.path).read_bytes()
        if e.gzipped:        # stored compressed, the content is upstream's
            assert git_blob_id(gzip.decompress(got)) == e.upstream_git_blob
        else:
            assert hashlib.sha256(got).hexdigest() == e.sha256
    # a second run keeps what is there and correct
    again = fetch(out, base_url=url, manifest=pick)
    assert again.ok and len(again.kept) == 5 and not again.fetched
    # a tampered upstream file fails its check and is not written
    e = pick[2]
    (out / e.path).unlink()
    bad = Path(url.removeprefix("file://")) / e.source_repo / e.source_commit / e.source_path
    bad.write_bytes(bad.read_bytes() + b"tampered")
    res = fetch(out, base_url=url, manifest=pick)
    assert not res.ok and e.path in res.failed and not (out / e.path).exists()


def test_cli_fetches_a_data_set_and_validate_can_read_it(shared_data, tmp_path, capsys):
    from joulebound.cli import main

    rows = load_manifest()
    sub = [e for e in rows if e.path.startswith("energaizer_device/")]
    url = _mirror(shared_data, tmp_path, sub)
    out = tmp_path / "data"
    assert main(["data", "fetch", "--to", str(out), "--only", "energaizer_device", "--from", url,
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["fetched"]) == len([e for e in sub if e.fetchable]) and not doc["failed"]
    assert (out / "MANIFEST.csv").exists()        # the folder is recognized as a data folder
    from research import energaizer

    assert energaizer.fit_board(out, "netsres117").mape < 5.0
    # unknown data set: a clear error, exit 2
    assert main(["data", "fetch", "--to", str(out), "--only", "nope", "--from", url]) == 2
    assert "unknown data set" in capsys.readouterr().err


def test_a_file_where_the_folder_should_be_is_refused(tmp_path):
    from joulebound.core.errors import InputError

    f = tmp_path / "x"
    f.write_text("")
    with pytest.raises(InputError, match="is a file"):
        fetch(f, base_url="file:///nonexistent", manifest=[])


def test_validate_on_a_folder_without_a_checks_file_says_what_to_do(tmp_path, capsys):
    pytest.importorskip("research")
    from joulebound.cli import main

    (tmp_path / "MANIFEST.csv").write_text("path\n")
    assert main(["validate", "--data", str(tmp_path), "--only", "spaan-table1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "table1_forward.csv" in err and "joulebound data fetch" in err and "--only" in err
