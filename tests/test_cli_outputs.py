"""Output files in folders that do not exist yet: made, and said so (issue 28 item 11:
`characterize -o` created missing folders silently)."""

from __future__ import annotations


def test_characterize_says_which_folders_it_created(tmp_path, capsys, monkeypatch):
    from joulebound.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "new" / "sub" / "char.npz"
    assert main(["characterize", "gpt2-small", "--device", "rtx3080ti", "--batch", "1",
                 "-o", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert out.exists() and f"created folder {tmp_path / 'new'}" in err
    assert main(["characterize", "gpt2-small", "--device", "rtx3080ti", "--batch", "1",
                 "-o", str(out), "--json"]) == 0
    assert "created folder" not in capsys.readouterr().err      # it exists now
