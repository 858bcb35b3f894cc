"""The top-level ``joulebound --help``: every command in a named panel, one-sentence summaries."""

from __future__ import annotations

from joulebound.cli import PANELS, _first_sentence, app


def test_every_command_sits_in_a_named_panel_with_a_one_line_summary() -> None:
    infos = list(app.registered_commands) + list(app.registered_groups)
    names = {i.name for i in infos}
    listed = {n for group in PANELS.values() for n in group}
    assert names == listed, f"commands without a panel: {names - listed}; stale: {listed - names}"
    for info in infos:
        target = info.typer_instance.info if getattr(info, "typer_instance", None) else info
        summary = target.short_help if isinstance(target.short_help, str) else info.short_help
        assert summary and "\n" not in summary and summary.endswith("."), info.name


def test_first_sentence_keeps_parentheses_whole() -> None:
    text = "Write a Trace (kernels with durations; FLOPs from shapes. Modeled). More.\n\nNext."
    assert _first_sentence(text) == "Write a Trace (kernels with durations; FLOPs from shapes. Modeled)."
    assert _first_sentence("Check four sets (all held-out):") == "Check four sets (all held-out)."


def test_a_flag_shows_no_value_in_help_and_options_still_show_their_type(capsys,
                                                                        monkeypatch) -> None:
    """``--version <bool>`` / ``--json <bool>`` read as options that take a true/false value
    (issue 28 item 11); a flag takes none. Options with a value keep ``<int>``, ``<str>``."""
    from joulebound.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "--version" in top and "<bool>" not in top
    assert main(["predict", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--json" in out and "<bool>" not in out
    assert "<int>" in out and "--layers" in out


def _commands():
    from joulebound.cli import _click_command

    def walk(cmd, pre):
        yield pre
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*pre, name])
    return list(walk(_click_command(), []))


def test_no_help_text_breaks_its_lines_where_the_source_did_at_80_columns(capsys, monkeypatch):
    """Help texts kept their source line breaks, so at 80 columns a line wrapped and then broke
    again after a word or two ('hook;' / 'every' / 'optimizer.step() ...'; issue 28 item 11:
    help cut at 80 columns): a line followed by more of its paragraph whose first word would
    have fit on it."""
    from joulebound.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    ragged = {}
    for path in _commands():
        main([*path, "--help"])
        desc = []
        for line in capsys.readouterr().out.split("\n"):
            if line.startswith("╭"):
                break
            desc.append(line.strip())
        # broken where the source was: the next line's first word would have fit on this one
        bad = [(a, b) for a, b in zip(desc, desc[1:], strict=False)
               if a and b and len(a) + 1 + len(b.split()[0]) <= 70
               and not a.startswith("Usage") and not b.startswith(("-", "•"))]
        if bad:
            ragged[" ".join(path)] = bad[0]
    assert not ragged, ragged
