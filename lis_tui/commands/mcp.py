"""`lis-tui mcp`: serve a sandbox to an MCP client (desktop assistants, IDE agents, other CLIs)."""
from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path

from lis_tui.commands.ports import cannot_listen, port_number
from tools.terminal_text import safe_terminal_text


def add_parsers(sub) -> None:
    from lis_tui.commands.sandbox import add_sandbox_flags  # noqa: PLC0415

    p = sub.add_parser("mcp", help="serve a sandbox to MCP clients (stdio, or HTTP on loopback)",
                       description="An MCP server over stdin/stdout: the client gets execute_bash and "
                                   "str_replace_editor in a rootless sandbox (made on the first call, removed "
                                   "when the client goes), with lis-tui's limits, network policy and review "
                                   "tools. Register it in a client as the command `lis-tui mcp [flags]`, or run "
                                   "it with --http and give clients the URL and token it prints: each client "
                                   "session gets a sandbox of its own.")
    add_sandbox_flags(p)
    p.add_argument("--allow-apply", action="store_true",
                   help="let the client write the sandbox's changes to --workspace (apply_changes)")
    p.add_argument("--export-dir", metavar="DIR",
                   help="let the client copy /testbed/output into DIR/NAME (export_output)")
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP instead of stdio; clients send the token as a bearer token")
    p.add_argument("--host", default="127.0.0.1", help="with --http: the address to listen on (default loopback)")
    p.add_argument("--port", type=port_number, default=0,
                   help="with --http: the port (default: any free one, printed)")
    p.add_argument("--idle-timeout", type=float, default=1800, metavar="SECONDS",
                   help="with --http: remove a client's sandbox once its session was idle this long, for "
                        "clients that vanish without ending it (default 1800; 0: never)")
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from lis_tui.commands.sandbox import spec_from_args  # noqa: PLC0415
    from lis_tui.servers.mcp import SandboxTools, serve_http, serve_stdio  # noqa: PLC0415

    if args.allow_apply and not args.workspace:
        raise SystemExit("lis-tui mcp: --allow-apply needs --workspace DIR, the host directory to apply to")
    export_dir = str(Path(args.export_dir).expanduser().resolve()) if args.export_dir else None
    spec = spec_from_args(args)
    make = lambda: SandboxTools(spec, allow_apply=args.allow_apply, export_dir=export_dir)  # noqa: E731
    if not args.http:
        serve_stdio(make())
        return 0
    token = os.environ.get("LIS_MCP_TOKEN") or secrets.token_urlsafe(24)
    try:
        sock = socket.create_server((args.host, args.port))
    except OSError as exc:
        print(safe_terminal_text(f"lis-tui mcp: {cannot_listen(args.host, args.port, exc)}"), file=sys.stderr)
        return 1
    host, port = sock.getsockname()[:2]
    print(f"lis-tui mcp: serving http://{host}:{port}/mcp (send Authorization: Bearer <token>)", file=sys.stderr)
    if not os.environ.get("LIS_MCP_TOKEN"):
        print(f"lis-tui mcp: token {token} (set LIS_MCP_TOKEN to choose it)", file=sys.stderr)
    sys.stderr.flush()
    serve_http(make, sock, token, idle_timeout=args.idle_timeout or None)
    return 0
