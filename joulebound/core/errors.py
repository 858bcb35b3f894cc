"""User-facing errors.

Every problem caused by the user's input (a bad file, an unknown name, an impossible shape) raises
:class:`JouleboundError` with a message that says what is wrong and how to fix it. The CLI prints
the message (no traceback) and exits with status 2.
"""

from __future__ import annotations


class JouleboundError(Exception):
    """An error in the user's input or environment, with a message meant for the user."""


class SchemaError(JouleboundError):
    """A file does not match the expected schema (names the file and the field)."""

    def __init__(self, path: object, field: str, problem: str) -> None:
        self.path = str(path)
        self.field = field
        self.problem = problem
        super().__init__(f"{self.path}: field '{field}': {problem}")


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """A short suffix listing the valid choices, closest first."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{hint} Choices: {', '.join(sorted(choices))}."
