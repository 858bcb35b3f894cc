"""``joulebound reset-clocks`` and ``joulebound clock-helper``: clock administration."""

from __future__ import annotations

from typing import Annotated

import typer

RESET_HELP = """Reset locked GPU core and memory clocks to the defaults (after a hard kill).

Calls nvmlDeviceResetGpuLockedClocks and nvmlDeviceResetMemoryLockedClocks on each GPU: by
default every GPU NVML sees (CUDA_VISIBLE_DEVICES is ignored then); --gpus takes CUDA-visible
indices or UUIDs. Every GPU is tried, also after one fails; each failure is reported and the exit
code is 1 when any GPU could not be reset. Needs root or CAP_SYS_ADMIN. --json keys: reset (list
of {gpu, uuid, name, ok, errors, note})."""

HELPER_HELP = """Start the privileged clock helper (run with sudo / CAP_SYS_ADMIN).

It owns clock control and listens on a Unix socket; users who can open the socket (file mode
--mode, group --group) may ask for clock switches with `joulebound run --actuator helper
--socket PATH`. Every request is checked against the GPU's supported clocks and rate-limited per
GPU (--burst switches, then one per --min-interval s; a throttled switch is deferred by the
client, never fatal; resets are never throttled). A client owns the GPUs it set until it
disconnects; they are reset to the defaults when it disconnects or dies. A second helper on a live
socket refuses to start; a world-writable --mode needs --insecure. The socket's folder must belong
to the helper's user (or root) and be writable by nobody else (e.g. `sudo mkdir -p /run/joulebound`);
per-GPU locks live in /run/joulebound/locks (0700). See docs/runtime.md, Threat model.

A connection that owns no GPU and sends nothing for --idle-timeout s is closed (an owner's never
is; clients reconnect by themselves); each connection is answered at most --request-rate requests
per s (more wait); resets of a GPU already at its defaults make no NVML call. --max-clients is
lowered to fit the process's file-descriptor limit, so clients never starve NVML of descriptors.
A `joulebound run` whose helper restarts trains on at the default clocks and reconnects.

SIGTERM always stops it (also when inherited as ignored); SIGINT, SIGHUP and SIGQUIT too, unless
inherited as ignored (nohup): it closes every client, then resets every GPU it touched. The
start line says which signals stop it."""


def reset_clocks_command(
    gpus: Annotated[str, typer.Option(
        help="GPUs: 'all' (every GPU NVML sees), or CUDA-visible indices / UUIDs, e.g. 0,1.")
    ] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    from joulebound.cli._common import console, print_json
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.actuators import reset_all_clocks

    sel: list[int | str] | None = None
    if gpus.strip() != "all":
        items = [x.strip() for x in gpus.split(",")]
        if not any(items) or any(not x for x in items):
            raise JouleboundError(f"--gpus {gpus!r}: give 'all' or a comma-separated list of GPU "
                                  "indices or UUIDs, e.g. --gpus 0,1")
        sel = [int(x) if x.isdigit() else x for x in items]
    reports = reset_all_clocks(gpus=sel)
    failed = [r for r in reports if not r.ok]
    if as_json:
        print_json({"reset": [{"gpu": r.gpu, "uuid": r.uuid, "name": r.name, "ok": r.ok,
                               "errors": r.errors, "note": r.note or None} for r in reports]})
    else:
        for r in reports:
            who = f"GPU {r.gpu}" + (f" ({r.name}, {r.uuid})" if r.uuid else "")
            if r.ok:
                console.print(f"{who}: core and memory clocks reset to the defaults",
                              highlight=False)
            else:
                console.print(f"[red]{who}: NOT reset[/]: {'; '.join(r.errors)}", highlight=False)
            if r.note:
                console.print(f"  note: {r.note}", highlight=False)
    if failed:
        raise SystemExit(1)


def clock_helper_command(
    socket: Annotated[str, typer.Option(help="Unix socket path.")] = "/run/joulebound/clocks.sock",
    group: Annotated[str | None, typer.Option(
        help="Group (name or gid) allowed to connect.")] = None,
    mode: Annotated[str, typer.Option(help="Socket permissions (octal, e.g. 660).")] = "660",
    burst: Annotated[int, typer.Option(help="Switches allowed in a burst, per GPU.", min=1)] = 50,
    min_interval: Annotated[float, typer.Option(
        help="Then one switch per this many s, per GPU.", min=0.0)] = 0.005,
    max_clients: Annotated[int, typer.Option(
        help="Connections served at once (lowered to fit the fd limit).", min=1)] = 256,
    insecure: Annotated[bool, typer.Option(
        help="Allow a world-writable --mode (every local user may change clocks).")] = False,
    idle_timeout: Annotated[float, typer.Option(
        help="Close a connection that owns no GPU after this many s without a request.",
        min=0.001)] = 60.0,
    request_rate: Annotated[float, typer.Option(
        help="Requests answered per s on one connection (after a burst of 200); more wait.",
        min=0.001)] = 500.0,
) -> None:
    from joulebound.cli._common import console
    from joulebound.runtime.helper import ClockHelper

    helper = ClockHelper(socket, mode=mode, group=group, burst=burst, min_interval_s=min_interval,
                         max_clients=max_clients, insecure=insecure, idle_timeout_s=idle_timeout,
                         request_rate=request_rate)

    def ready(h: ClockHelper) -> None:
        console.print(f"clock helper listening on {socket} ({h.n_gpus} GPU(s), at most "
                      f"{h.max_clients} clients); {h.stop_help()}; stopping resets the clocks",
                      highlight=False, soft_wrap=True)

    helper.serve_forever(on_ready=ready)


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("reset-clocks", help=reflow(RESET_HELP))(reset_clocks_command)
    app.command("clock-helper", help=reflow(HELPER_HELP))(clock_helper_command)
