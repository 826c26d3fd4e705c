"""`lis-tui config`: the effective settings and where each one came from."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parsers(sub) -> None:
    p = sub.add_parser("config", help="show the effective settings and their sources",
                       description="Print every setting, its value (the API key masked) and where "
                                   "it came from: a config file, the environment, a profile, or the "
                                   "default. Files are read in the order listed at the end; "
                                   "./lis-tui.toml only once trusted (lis-tui trust --help).")
    p.add_argument("--profile", metavar="P", help="apply the [models.P] profile first")
    p.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    from lis_tui.config.settings import ConfigError, load_config  # noqa: PLC0415
    from lis_tui.config.trust import parent_note  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    try:
        config = load_config(args.profile)
    except ConfigError as exc:
        print(f"lis-tui config: {exc}", file=sys.stderr)
        return 2
    print(config.explain_text())
    print("\nconfig files, later ones win:")
    for path, state in config.files.items():  # a path or a reason may be a sandbox's making
        print(safe_terminal_text(f"  {path}  ({state})"))
    note = parent_note(Path.cwd())
    if note:
        print(safe_terminal_text(f"  note: {note}"))
    if config.profiles:
        print(f"profiles: {', '.join(sorted(config.profiles))}")
    return 0
