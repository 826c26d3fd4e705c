"""`lis-tui`: the command-line entry point."""
from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__

# Subcommand modules, each with `add_parsers(subparsers)`; a missing one is skipped.
COMMANDS = ("sandbox", "rootfs", "run", "config", "sessions", "bench", "tasks", "rollout", "mcp", "tui")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lis-tui",
        description="A language model at work inside a rootless sandbox (bubblewrap over a read-only root "
                    "filesystem: no daemon, no root). `lis-tui` alone opens the app; `lis-tui \"TASK\"` "
                    "starts on a task at once. Start with `lis-tui doctor`.",
    )
    parser.add_argument("--version", action="version", version=f"lis-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"lis_tui.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lis_tui.commands.{name}":
                raise
            continue
        adder = getattr(module, "add_parsers", None) or getattr(module, "add_parser")
        adder(sub)
    parser.commands = set(sub.choices)
    return parser


def _opens_app(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """`lis-tui` and `lis-tui "TASK"` (with the app's flags) open the app."""
    if "tui" not in parser.commands or argv[:1] in (["-h"], ["--help"], ["--version"]):
        return False
    first = next((a for a in argv if not a.startswith("-")), None)
    return first is None or first not in parser.commands


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if _opens_app(parser, argv):
        argv = ["tui", *argv]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from isolation import SandboxError  # noqa: PLC0415

    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    from .config import ConfigError  # noqa: PLC0415

    try:
        return args.func(args) or 0
    except SandboxError as exc:  # may name what a sandbox made: a path, a file name
        print(safe_terminal_text(f"lis-tui: {exc}"), file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"lis-tui: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
