"""`--port` of the commands that listen (`env serve`, `mcp --http`, `fake-server`): a number
checked when it is read, and a port that cannot be had said in one line with the fix."""
from __future__ import annotations

import argparse
import errno
from pathlib import Path

ANY_FREE = "--port 0 for any free one"


def port_number(text: str) -> int:
    """argparse type: 0 to 65535 (the socket call raises OverflowError past it)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; {ANY_FREE}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1 to 65535); {ANY_FREE}")
    return port


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    """Why listening on host:port failed, and what to do: one line."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: the port is in use (another program, or another "
                f"lis-tui, listens there); choose another --port, or {ANY_FREE}")
    if exc.errno == errno.EACCES:
        return (f"cannot listen on {where}: ports below {_first_unprivileged()} need privileges "
                f"here; choose a port from {_first_unprivileged()} up, or {ANY_FREE}")
    return (f"cannot listen on {where}: {exc.strerror or exc}; check --host and --port "
            f"({ANY_FREE})")


def _first_unprivileged() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        return 1024
