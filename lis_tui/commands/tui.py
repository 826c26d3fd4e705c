"""`lis-tui tui [TASK]` opens the app (and starts TASK at once); `lis-tui replay RUN` shows one."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from lis_tui.commands.sandbox import add_agent_flags, add_sandbox_flags, agent_overrides, spec_from_args


def add_parsers(sub) -> None:
    p = sub.add_parser("tui", help="open the app: give tasks, watch the model work, approve",
                       description="Open the terminal app. With TASK it starts at once; "
                                   "otherwise type a task at the prompt. F1 lists the keys.")
    p.add_argument("task", nargs="?", help="a task to start at once (one word: after -- or with -t)")
    p.add_argument("-t", "--task", dest="task_option", metavar="TASK",
                   help="a task to start at once, even a single word")
    p.add_argument("-c", "--continue", dest="continue_last", action="store_true",
                   help="continue the last run or session started in this folder (or with it as --workspace): "
                        "its conversation, its sandbox's files; TASK, if given, is the follow-up")
    _app_flags(p)

    p = sub.add_parser("resume", help="continue a past run or session in the app",
                       description="Open the app on a past run or session (an id from `lis-tui runs`, a "
                                   "prefix naming one, or its folder): the transcript shows it, the model gets "
                                   "the conversation so far, and the sandbox is its kept session (--session), "
                                   "else a fresh one with its workspace changes (changes.patch) applied inside "
                                   "and its output files put back; the project on the host is not touched. Its "
                                   "rootfs, network, workspace and limits hold unless given again. Bench and "
                                   "paper-mode episodes are not continued. Headless: lis-tui run --resume ID TASK.")
    p.add_argument("run", metavar="ID", help="a run id from `lis-tui runs` (or a prefix), a run's folder, "
                   "or a kept --session's id (its newest run)")
    p.add_argument("task", nargs="?", help="a follow-up to start at once")
    p.set_defaults(task_option=None, continue_last=False)
    _app_flags(p)

    p = sub.add_parser("replay", help="show a finished run in the app",
                       description="Show a saved run in the same transcript view as a live one: "
                                   "its id from `lis-tui runs` (or a prefix naming one run), its "
                                   "directory, or its trajectory.json.")
    p.add_argument("trajectory", metavar="RUN", help="a run id from `lis-tui runs`, a run's directory "
                   "or its trajectory.json")
    p.set_defaults(func=cmd_replay)


def _app_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", metavar="DIR", help="where the session's trajectory.json, "
                   "answer.txt and files/ go (default $XDG_DATA_HOME/lis-tui/runs/<time>-<id>/)")
    add_sandbox_flags(p)
    group = add_agent_flags(p)  # every model flag of `run`
    group.add_argument("--approve", action="store_true",
                       help="ask before each command (Run / Edit / Skip); F3 toggles it")
    group.add_argument("--no-stream", action="store_true", help="do not stream model replies")
    p.set_defaults(func=cmd_tui)


def _resumed(args: argparse.Namespace) -> object:
    """The run `resume ID` or `--continue` names, its settings put into `args`; None for neither;
    False when it cannot be continued (said why, with the fix)."""
    ref, command = getattr(args, "run", None), "resume" if getattr(args, "run", None) else "--continue"
    if ref is None and not args.continue_last:
        return None
    from lis_tui.runs.resume import last_here, load_resumable  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    try:
        resumed = load_resumable(ref) if ref is not None else last_here()
        resumed.fill_args(args)
    except ValueError as exc:
        print(safe_terminal_text(f"lis-tui {command}: {exc}"), file=sys.stderr)  # may name runs on disk
        return False
    return resumed


def needs_terminal(command: str) -> int | None:
    """Exit code 2 and why, when stdin or stdout is not a terminal: the app would write escape
    codes into a file and wait forever for keys."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        return None
    print(f"lis-tui {command}: the app needs a terminal (stdin and stdout); without one, use "
          '`lis-tui run "TASK"`', file=sys.stderr)
    return 2


def cmd_tui(args: argparse.Namespace) -> int:
    from lis_tui.config.settings import ConfigError, configured_rootfs, load_config  # noqa: PLC0415

    resumed = _resumed(args)  # a wrong id is said before the terminal is needed
    if resumed is False:
        return 2
    if (refused := needs_terminal("tui")) is not None:
        return refused
    args.task = args.task_option or args.task

    overrides = {**agent_overrides(args), "network.mode": args.network, "sandbox.rootfs": args.rootfs}
    if resumed is not None:
        overrides = resumed.overrides(overrides, args.profile)
    try:
        config = load_config(args.profile, overrides)
        if config.agent.prompts:  # a bad --prompts file: said here, not after the app opened
            from lis_tui.prompts import load_prompts  # noqa: PLC0415

            load_prompts(config.agent.prompts)
    except ConfigError as exc:
        print(f"lis-tui tui: {exc}", file=sys.stderr)
        return 2
    spec = None
    if config.agent.mode == "sandbox":
        args.rootfs = args.rootfs or configured_rootfs(config)
        args.network = args.network or config.network.mode
        spec = spec_from_args(args)
    from lis_tui.app.tui import create_app  # noqa: PLC0415 (textual loads only for the app)

    app = create_app(config, spec, output_dir=args.output_dir, task=args.task,
                     command_approval=args.approve, stream=not args.no_stream,
                     log_path=log_to_file(), resumed=resumed)
    app.run()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from lis_tui.runs.replay import load_trajectory  # noqa: PLC0415
    from lis_tui.runs.store import find_run  # noqa: PLC0415

    try:
        doc = load_trajectory(find_run(args.trajectory))
    except ValueError as exc:  # a wrong path first: that answer needs no terminal
        from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

        print(safe_terminal_text(f"lis-tui replay: {exc}"), file=sys.stderr)  # may name runs on disk
        return 2
    if (refused := needs_terminal("replay")) is not None:
        return refused
    from lis_tui.app.tui import create_app  # noqa: PLC0415

    create_app(replay=doc, log_path=log_to_file()).run()
    return 0


def log_to_file() -> Path:
    """Details go to a log file, never onto the screen: $XDG_STATE_HOME/lis-tui/tui.log."""
    from isolation.records import state_dir  # noqa: PLC0415

    path = state_dir() / "tui.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=path, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return path
