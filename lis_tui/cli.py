"""`lis-tui`: the command-line entry point."""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import sys

from . import __version__

# Subcommand modules, each with `add_parsers(subparsers)`, and the words each registers (a test
# holds them together); a missing module is skipped. `lis-tui WORD ...` imports WORD's module
# alone: a command never pays for another's imports (`exec` for the rootfs store's, `bench`'s).
COMMANDS = {"sandbox": ("exec", "shell", "doctor"), "rootfs": ("rootfs",), "run": ("run",), "runs": ("runs",),
            "apply": ("apply",), "config": ("config",), "trust": ("trust",), "sessions": ("sessions",),
            "bench": ("bench",), "tasks": ("tasks",), "rollout": ("rollout",), "env": ("env",), "mcp": ("mcp",),
            "fake_server": ("fake-server",), "tui": ("tui", "resume", "replay")}


class _Parser(argparse.ArgumentParser):
    """No abbreviations (`--max-step` is a typo, not `--max-steps`); its subparsers are the same."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `argv` whose first word is a command, that command's module's only."""
    owner = next((module for module, words in COMMANDS.items() if argv and argv[0] in words), None)
    parser = _Parser(
        prog="lis-tui",
        description="A language model at work inside a rootless sandbox (bubblewrap over a read-only root "
                    "filesystem: no daemon, no root). `lis-tui` alone opens the app; `lis-tui \"TASK\"` "
                    "starts on a task at once. Start with `lis-tui doctor`.",
    )
    parser.add_argument("--version", action="version", version=f"lis-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (owner,) if owner else COMMANDS:
        try:
            module = importlib.import_module(f"lis_tui.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lis_tui.commands.{name}":
                raise
            continue
        adder = getattr(module, "add_parsers", None) or getattr(module, "add_parser")
        adder(sub)
    parser.commands = set(sub.choices)
    parser.app_parser = sub.choices.get("tui")
    return parser


def _opens_app(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """`lis-tui` and `lis-tui "TASK"` (with the app's flags) open the app."""
    if "tui" not in parser.commands or argv[:1] in (["-h"], ["--help"], ["--version"]):
        return False
    first = next((a for a in argv if not a.startswith("-")), None)
    return first is None or first not in parser.commands


def _lone_word(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The task, when it is one word given bare: far likelier a mistyped command than a task.
    A task after `--` or `-t`, or one with a space, is meant."""
    takes_value = {option for action in parser.app_parser._actions if action.nargs != 0  # noqa: SLF001
                   for option in action.option_strings}
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            return None
        if token.startswith("-"):
            if token in takes_value:
                next(tokens, None)
            continue
        return token if len(token.split()) == 1 else None
    return None


def _unknown_command(parser: argparse.ArgumentParser, word: str) -> int:
    import difflib  # noqa: PLC0415 (only for a mistake)

    close = difflib.get_close_matches(word, sorted(parser.commands - {"tui"}), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    print(f"lis-tui: unknown command {word!r}{hint}. A task needs a space, or `--` or -t: "
          f"lis-tui -- {word}. Commands: lis-tui --help", file=sys.stderr)
    return 2


def _leaf(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)command's own parser, named by the words of `argv`: its usage and its flags."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        if not subs:
            break
        parser = subs[0].choices.get(token, parser)
    return parser


def _did_you_mean(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    import difflib  # noqa: PLC0415 (only for a mistake)

    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]  # noqa: SLF001
    hints = [close[0] for word in extras if word.startswith("--") and
             (close := difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6))]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def _unknown_app_flag(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first flag the app does not know, before any `--`: `lis-tui --netwrok on` is a typo,
    not the task "on"."""
    known = {o for a in parser._actions for o in a.option_strings}  # noqa: SLF001
    takes_value = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}  # noqa: SLF001
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            return None
        if token in takes_value:  # its value may look like a flag: --max-steps -1
            next(tokens, None)
        elif token.startswith("-") and token != "-" and token.split("=", 1)[0] not in known:
            return token
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # before the parser, which may import every command's module
        print(f"lis-tui {__version__}")
        return 0
    # At exit, after the other exit handlers, whatever is alive (the modules' code, classes and
    # tables) is frozen: the collections Python runs while it shuts down would walk it all, 5-10
    # ms of every command. What a collection would free then, the process's end frees.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    parser = build_parser(argv)
    if _opens_app(parser, argv):
        flag = _unknown_app_flag(parser.app_parser, argv)
        if flag is not None:
            parser.app_parser.error(f"unrecognized arguments: {flag}" + _did_you_mean(parser.app_parser, [flag]))
        word = _lone_word(parser, argv)
        if word is not None:
            from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

            return _unknown_command(parser, safe_terminal_text(word))
        argv = ["tui", *argv]
    args, extras = parser.parse_known_args(argv)
    # argparse fills an optional positional only from the words right after the one before it;
    # a command naming one as `late_positional` takes it after options too (bench paper:S -j 2 DATA)
    late = getattr(args, "late_positional", None)
    if late and getattr(args, late) is None and len(extras) == 1 and not extras[0].startswith("-"):
        setattr(args, late, extras.pop())
    if extras:
        leaf = _leaf(parser, argv)
        leaf.error(f"unrecognized arguments: {' '.join(extras)}" + _did_you_mean(leaf, extras))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from isolation import SandboxError  # noqa: PLC0415

    from .config.toml_text import ConfigError  # noqa: PLC0415 (settings' own, without settings)

    try:
        return args.func(args) or 0
    except SandboxError as exc:  # may name what a sandbox made: a path, a file name
        from tools.terminal_text import safe_terminal_text  # noqa: PLC0415 (only when it fails)

        print(safe_terminal_text(f"lis-tui: {exc}"), file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"lis-tui: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
