"""`lis-tui mcp`: serve a sandbox to an MCP client (desktop assistants, IDE agents, other CLIs)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parsers(sub) -> None:
    from lis_tui.commands.sandbox import add_sandbox_flags  # noqa: PLC0415

    p = sub.add_parser("mcp", help="serve a sandbox to an MCP client over stdio",
                       description="An MCP server over stdin/stdout: the client gets execute_bash and "
                                   "str_replace_editor in a rootless sandbox (made on the first call, removed "
                                   "when the client goes), with lis-tui's limits, network policy and review "
                                   "tools. Register it in a client as the command `lis-tui mcp [flags]`.")
    add_sandbox_flags(p)
    p.add_argument("--allow-apply", action="store_true",
                   help="let the client write the sandbox's changes to --workspace (apply_changes)")
    p.add_argument("--export-dir", metavar="DIR",
                   help="let the client copy /testbed/output into DIR/NAME (export_output)")
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from lis_tui.commands.sandbox import spec_from_args  # noqa: PLC0415
    from lis_tui.mcp_server import SandboxTools, serve_stdio  # noqa: PLC0415

    if args.allow_apply and not args.workspace:
        raise SystemExit("lis-tui mcp: --allow-apply needs --workspace DIR, the host directory to apply to")
    export_dir = str(Path(args.export_dir).expanduser().resolve()) if args.export_dir else None
    serve_stdio(SandboxTools(spec_from_args(args), allow_apply=args.allow_apply, export_dir=export_dir))
    return 0
