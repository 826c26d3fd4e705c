"""`lis-tui sessions list|rm|gc`: kept sandboxes."""
from __future__ import annotations

import argparse
import re
import sys
import time

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def add_parsers(sub) -> None:
    p = sub.add_parser("sessions", help="list, remove or clean up kept sandbox sessions",
                       description="A sandbox started with --session ID keeps its files under "
                                   "$XDG_STATE_HOME/lis-tui/sessions/ID; the same --session ID resumes it.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="the kept sessions").set_defaults(func=cmd_list)
    rm = actions.add_parser("rm", help="remove sessions")
    rm.add_argument("ids", nargs="+", metavar="ID")
    rm.set_defaults(func=cmd_rm)
    gc = actions.add_parser("gc", help="remove old sessions and anything a crash left behind")
    gc.add_argument("--older-than", default="7d", metavar="AGE",
                    help="remove sessions unused for this long: 30m, 12h, 7d, 2w (default 7d)")
    gc.set_defaults(func=cmd_gc)


def parse_age(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw]?)", text.strip())
    if not match:
        raise SystemExit(f"lis-tui sessions gc: --older-than wants a number and a unit (30m, 12h, 7d), not {text!r}")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_list(args: argparse.Namespace) -> int:
    from isolation import sessions  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    found = sessions.list_sessions()
    if not found:
        print("no kept sessions (start one with: lis-tui shell --session NAME)")
        return 0
    print(f"{'ID':<28} {'ROOTFS':<12} {'SIZE':>9}  {'LAST USED':<17} WORKSPACE")
    for s in found:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.last_used))
        mark = " (in use)" if s.in_use else ""
        # Names read back from the disk (a directory, spec.json), not necessarily ones we wrote.
        name, rootfs, workspace = map(safe_terminal_text, (s.id, s.rootfs, s.workspace or "-"))
        print(f"{name:<28} {rootfs:<12} {_size(s.size):>9}  {used:<17} {workspace}{mark}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from isolation import SandboxError, sessions  # noqa: PLC0415

    code = 0
    for session in args.ids:
        try:
            sessions.remove(session)
            print(f"removed {session}")
        except SandboxError as exc:
            print(f"lis-tui sessions rm: {exc}", file=sys.stderr)
            code = 1
    return code


def cmd_gc(args: argparse.Namespace) -> int:
    from isolation import sessions  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    removed, swept = sessions.gc(parse_age(args.older_than))
    for session in removed:  # directory names, whatever made them
        print(safe_terminal_text(f"removed {session}"))
    print(f"{len(removed)} old session(s) removed, {swept} crashed sandbox(es) swept")
    return 0
