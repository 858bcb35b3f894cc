"""User-facing errors.

Every problem a user can fix raises :class:`JouleboundError` (or one of its kinds below) with a
message that says what is wrong and how to fix it. The CLI prints the message (no traceback) and
exits with status 2. Catch ``JouleboundError`` for all of them, or a kind to tell them apart:

- :class:`InputError`: the user's input is wrong (a bad file, an unknown name, an impossible
  shape); :class:`SchemaError` is the kind for a file that does not match its schema;
- :class:`SetupError`: the environment lacks something (a package, the NVML library or driver,
  the data folder);
- :class:`UnsupportedGPU`: the GPU or its driver cannot do what was asked (memory-clock locks
  before Ampere, a clock pair outside its table, no energy counter);
- :class:`NoPermission`: the process lacks the privileges (clock locks need root or
  ``CAP_SYS_ADMIN``, or the clock helper);
- :class:`GpuBusy`: another owner holds the GPU (its clocks are someone else's to set now).
"""

from __future__ import annotations


class JouleboundError(Exception):
    """An error in the user's input or environment, with a message meant for the user."""


class InputError(JouleboundError):
    """The user's input is wrong: a bad value, file, name or shape."""


class SetupError(JouleboundError):
    """The environment lacks something the command needs (a package, NVML, the data folder)."""


class UnsupportedGPU(JouleboundError):
    """The GPU or its driver cannot do what was asked."""


class NoPermission(JouleboundError):
    """This process lacks the privileges for the call (e.g. locking GPU clocks)."""


class GpuBusy(JouleboundError):
    """Another owner holds the GPU."""


class SchemaError(InputError):
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
