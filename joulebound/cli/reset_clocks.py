"""``joulebound reset-clocks`` and ``joulebound clock-helper``: clock administration."""

from __future__ import annotations

from typing import Annotated

import typer

RESET_HELP = """Reset locked GPU core and memory clocks to the defaults (after a hard kill).

Calls nvmlDeviceResetGpuLockedClocks and nvmlDeviceResetMemoryLockedClocks on each GPU. Needs
root or CAP_SYS_ADMIN. --json keys: reset (list of GPU indices)."""

HELPER_HELP = """Start the privileged clock helper (run with sudo / CAP_SYS_ADMIN).

It owns clock control and listens on a Unix socket; users who can open the socket (file mode
--mode, group --group) may ask for clock switches with `joulebound run --actuator helper
--socket PATH`. Every request is checked against the GPU's supported clocks, rate-limited
(--burst switches, then one per --min-interval s), and a client's GPUs are reset to the default
clocks when it disconnects or dies. SIGTERM/SIGINT reset every GPU it touched and stop it."""


def reset_clocks_command(
    gpus: Annotated[str, typer.Option(help="GPU indices, e.g. 0,1 (default: all).")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    from ..dvfs.control.actuators import reset_all_clocks
    from ..errors import JouleboundError
    from ._common import console, print_json

    sel = None
    if gpus != "all":
        try:
            sel = [int(x) for x in gpus.split(",") if x.strip()]
        except ValueError as exc:
            raise JouleboundError(f"--gpus {gpus!r}: use 'all' or indices like 0,1") from exc
    done = reset_all_clocks(gpus=sel)
    if as_json:
        print_json({"reset": done})
    else:
        console.print(f"reset core and memory clocks of GPU(s) {', '.join(map(str, done))}")


def clock_helper_command(
    socket: Annotated[str, typer.Option(help="Unix socket path.")] = "/run/joulebound/clocks.sock",
    group: Annotated[str | None, typer.Option(help="Group allowed to connect.")] = None,
    mode: Annotated[str, typer.Option(help="Socket permissions (octal).")] = "660",
    burst: Annotated[int, typer.Option(help="Switches allowed in a burst.", min=1)] = 50,
    min_interval: Annotated[float, typer.Option(
        help="Then one switch per this many s.", min=0.0)] = 0.005,
) -> None:
    from ..dvfs.control.helper import ClockHelper
    from ._common import console

    helper = ClockHelper(socket, mode=int(mode, 8), group=group, burst=burst,
                         min_interval_s=min_interval)
    console.print(f"clock helper listening on {socket} ({helper.n_gpus} GPU(s)); Ctrl-C stops "
                  "it and resets the clocks")
    helper.serve_forever()


def register(app: typer.Typer) -> None:
    app.command("reset-clocks", help=RESET_HELP)(reset_clocks_command)
    app.command("clock-helper", help=HELPER_HELP)(clock_helper_command)
