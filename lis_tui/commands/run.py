"""`lis-tui run`: one task, headless; a line per step on stderr, the answer on stdout."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, TextIO

from lis_tui.commands.sandbox import add_agent_flags, add_sandbox_flags, agent_overrides, say_owners, spec_from_args
from tools.terminal_text import safe_terminal_text

_EPILOG = """\
exit codes: 0 submitted; 3 stopped by a limit (max steps, context, wall time, replies without a
tool call); 1 error (model server, sandbox); 2 usage or config error; 130 interrupted (Ctrl-C,
SIGTERM or SIGHUP, a closed terminal: the run stops after the current command, the trajectory and
the work are saved and the sandbox removed; a second Ctrl-C or SIGTERM stops at once).

The run's directory (--output-dir, default $XDG_DATA_HOME/lis-tui/runs/<UTC time>-<id>/) holds
answer.txt, files/ (a copy of the output folder) and trajectory.json; with --workspace, also
changes.patch (what the sandbox changed there, for `git apply` or `lis-tui apply RUN`). All but
answer.txt are saved after every step that ran a command or an edit, so a kill -9, an OOM kill or a
power cut loses at most the step in flight: `lis-tui apply RUN` applies what was saved."""


def add_parsers(sub) -> None:
    p = sub.add_parser("run", help="run one task headless and print the answer",
                       description="Give the model a task and a fresh sandbox, let it work until it "
                                   "submits, and print the answer (answer.txt in /testbed/output; with "
                                   "--workspace, in /agent/output).",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", help="the task text (or use --task-file)")
    p.add_argument("--task-file", metavar="FILE", help="read the task from FILE (- for stdin)")
    p.add_argument("--output-dir", metavar="DIR",
                   help="where answer.txt, files/ and trajectory.json go (must not hold a run)")
    add_sandbox_flags(p)
    add_agent_flags(p)
    p.add_argument("--apply", action="store_true",
                   help="with --workspace: apply the changes to it at the end, as `lis-tui apply RUN` would "
                        "(held-back ones stay in the run's changes.patch)")
    p.add_argument("--resume", metavar="ID",
                   help="continue a past run or app session (an id from `lis-tui runs`, or a kept --session's id): TASK is the follow-up, "
                        "the model gets the conversation so far, and the sandbox is its kept session, else a "
                        "fresh one with its workspace changes and output files put back inside; its sandbox "
                        "settings and limits hold unless given again. A new run folder records the chain")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-step log on stderr")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    task = _read_task(args)
    if task is None:
        return 2
    from lis_tui.api import configured_rootfs, run_task  # noqa: PLC0415 (keep --help fast)
    from lis_tui.config.settings import ConfigError, load_config  # noqa: PLC0415

    resumed = _resumed(args)
    if resumed is False:
        return 2
    overrides = {**agent_overrides(args), "network.mode": args.network, "sandbox.rootfs": args.rootfs}
    if resumed is not None:
        overrides = resumed.overrides(overrides, args.profile)
    try:
        config = load_config(args.profile, overrides)
        spec = None
        if config.agent.mode == "sandbox":
            args.rootfs = args.rootfs or configured_rootfs(config)
            args.network = args.network or config.network.mode
            spec = spec_from_args(args)
        if args.apply and (spec is None or spec.workspace is None):
            raise ValueError("--apply applies the changes to a workspace: give --workspace DIR too")
        say_owners(spec, "lis-tui run")
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _interrupt)
            signal.signal(signal.SIGHUP, _hung_up)
        log = None if args.quiet else StepLog(sys.stderr)
        try:
            result = run_task(task, config=config, spec=spec, output_dir=args.output_dir, listener=log,
                              resume=resumed)
        finally:
            if log is not None:
                log.live.close()  # however the run ended, its live line goes
    except (ConfigError, ValueError) as exc:
        print(safe_terminal_text(f"lis-tui run: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before or after the agent ran (starting the sandbox, exporting)
        print("lis-tui run: interrupted", file=sys.stderr)
        return 130
    _summary(result, sys.stderr)
    code = _changes(result, args.apply, spec)
    if result.answer:
        print_answer(result.answer, sys.stdout)
    return code or result.exit_code


def _resumed(args: argparse.Namespace) -> Any:
    """With --resume, the run to continue, its sandbox settings put into `args`; False (said why)
    when it cannot be continued; None without --resume."""
    if not args.resume:
        return None
    from lis_tui.runs.resume import load_resumable  # noqa: PLC0415

    try:
        resumed = load_resumable(args.resume)
        notes = resumed.fill_args(args)
    except ValueError as exc:
        print(safe_terminal_text(f"lis-tui run: --resume: {exc}"), file=sys.stderr)  # may name runs on disk
        return False
    for note in notes:
        print(safe_terminal_text(f"lis-tui run: resuming {resumed.name}: {note}"), file=sys.stderr)
    return resumed


def _changes(result: Any, apply: bool, spec: Any) -> int:
    """Say where the workspace's changes were saved; with --apply, apply them. A failed apply's code."""
    from pathlib import Path  # noqa: PLC0415

    from lis_tui.runs.changes import ApplyRefused, apply_run  # noqa: PLC0415

    saved = result.changes
    if saved is None or not (result.replied or saved.paths or saved.error):  # never began: nothing changed
        return 0
    if not apply or not saved.paths or saved.error:
        print(safe_terminal_text(saved.line()), file=sys.stderr)
        return 0
    try:
        done = apply_run(result.output_dir, None, spec.held_back, Path(spec.workspace))  # the project it ran on
    except ApplyRefused as exc:  # the saved patch and how to apply it, then why it was not
        print(safe_terminal_text(saved.line()), file=sys.stderr)
        print(safe_terminal_text(f"lis-tui run: --apply: {exc}"), file=sys.stderr)
        return 1
    print(safe_terminal_text(saved.line(done)), file=sys.stderr)
    if done.note:  # the commits hold the same change: leave them
        print(safe_terminal_text(done.note), file=sys.stderr)
    return 0


def print_answer(answer: str, out: TextIO) -> None:
    """On a terminal, the answer made safe to show; into a pipe or a file, exactly the bytes of
    answer.txt (`lis-tui run ... > answer.txt` must not change a byte)."""
    if out.isatty():
        print(safe_terminal_text(answer), file=out, flush=True)
        return
    buffer = getattr(out, "buffer", None)  # None: a text stream standing in for stdout
    if buffer is None:
        out.write(answer + "\n")
        return
    out.flush()
    buffer.write((answer + "\n").encode("utf-8"))  # as run_task writes answer.txt
    buffer.flush()


def _read_task(args: argparse.Namespace) -> str | None:
    if (args.task is None) == (args.task_file is None):
        print("lis-tui run: give the task as an argument or with --task-file FILE (not both)",
              file=sys.stderr)
        return None
    if args.task_file is None:
        return args.task
    try:
        if args.task_file == "-":
            return sys.stdin.read()
        with open(args.task_file, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"lis-tui run: cannot read the task file {args.task_file}: {exc}", file=sys.stderr)
        return None


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run the way Ctrl-C does


def _hung_up(signum: int, frame: Any) -> None:
    """The terminal is gone (closed, an ssh that dropped): the run ends as after Ctrl-C, its record
    finished and its work saved, writing what it says to /dev/null (a write to a hung-up terminal
    fails). Once: a shell that passes its SIGHUP on makes a second, which must not stop it hard."""
    from lis_tui.commands.live import detach_from_terminal  # noqa: PLC0415

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    detach_from_terminal()
    raise KeyboardInterrupt


def _summary(result: Any, out: TextIO) -> None:
    from lis_tui.agent.events import LIMIT_REASONS  # noqa: PLC0415

    u = result.usage
    if result.finish_reason == "error":
        print(safe_terminal_text(f"lis-tui run: {result.message}"), file=out)
    steps = f"{result.steps} step{'' if result.steps == 1 else 's'}"
    guess = "~" if u.estimated else ""  # the server reported no usage: counted here
    line = (f"{result.finish_reason} after {steps}; tokens: {guess}{u.prompt_tokens:,} prompt, "
            f"{guess}{u.completion_tokens:,} completion, ~{u.environment_tokens:,} from tools; "
            f"saved in {result.output_dir}")
    if result.finish_reason in LIMIT_REASONS and result.message:
        line = f"{result.message}. {line}"
    if result.answer_note and result.replied:  # a run that never began wrote nothing: no news
        line += f" ({result.answer_note})"
    print(safe_terminal_text(line), file=out)


class StepLog:
    """The live log: one line per step, and a line per retry of the model server; on a terminal,
    a line below them saying what the running step does and for how long."""

    def __init__(self, out: TextIO) -> None:
        from lis_tui.commands.live import LiveLine  # noqa: PLC0415

        self.out = out
        self.live = LiveLine(out)

    def on_event(self, event: Any) -> None:
        from lis_tui.agent import events  # noqa: PLC0415
        from lis_tui.commands.live import running_text  # noqa: PLC0415

        if isinstance(event, events.ModelRequest):
            self.live.show(f"step {event.step:>3}  waiting for the model")
        elif isinstance(event, events.ToolStarted):
            self.live.show(f"step {event.step:>3}  {running_text(event.call.name, event.arguments or {})}")
        elif isinstance(event, events.StepFinished):
            self.live.clear()
            self._line(step_line(event.record))
        elif isinstance(event, events.InstructionsRead):  # before the first step
            self._line(f"instructions: {event.text} (--no-project-instructions leaves them out)")
        elif isinstance(event, events.ResumeNote):  # before the first step of a resumed run
            self._line(f"resumed: {event.text}")
        elif isinstance(event, (events.CredentialAdded, events.NetworkRefused)):  # the proxy's thread
            self._line(f"      network: {event.text}")
        elif isinstance(event, events.ModelRetry):
            self._line(f"      model server: {event.reason}; retry {event.attempt} in "
                       f"{event.delay:.1f}s")
        elif isinstance(event, events.Compacted):
            self._line(f"      context: {event.text}")
        elif isinstance(event, events.ToolFormatChanged):
            self._line(f"      tool format: {event.old} -> {event.new} ({event.reason}; "
                       f"--tool-format {event.new} starts there)")

    def _line(self, text: str) -> None:
        # Commands, paths and the server's reasons are the model's (or its server's) words.
        self.live.print(safe_terminal_text(text))


def step_line(step: Any) -> str:
    """`step  3  execute_bash python3 x.py → 0 0.12s | model 0.80s tokens 1,204+56 env ~30`"""
    replied = step.text or step.usage is not None or step.finish_reason is not None
    tools = " | ".join(_tool_summary(t) for t in step.tool_calls) or (
        "(no tool call: reminded to use one)" if step.nudged
        else "(reply)" if replied else f"(no reply: {step.stopped})")
    usage = step.usage
    tokens = f"{'~' * usage.estimated}{usage.prompt_tokens:,}+{usage.completion_tokens:,}" if usage else "?"
    return (f"step {step.step:>3}  {tools}  | model {step.model_duration:.2f}s "
            f"tokens {tokens} env ~{step.environment_tokens:,}")


def _tool_summary(tool: Any) -> str:
    from lis_tui.agent.loop import decode_arguments  # noqa: PLC0415

    args = decode_arguments(tool.arguments) or {}
    if tool.name == "execute_bash":
        what = str(args.get("command", "?"))
    elif tool.name == "str_replace_editor":
        what = f"{args.get('command', '?')} {args.get('path', '?')}"
    else:
        what = "" if tool.name == "submit" else tool.arguments
    what = " ".join(what.split())
    what = what if len(what) <= 60 else what[:57] + "..."
    if tool.name == "submit" and not tool.error:
        return "submit"
    if tool.approval == "skipped":
        return f"{tool.name} {what} → skipped"
    code = "err" if tool.error else tool.exit_code if tool.exit_code is not None else "ok"
    return f"{tool.name} {what} → {code} {tool.duration:.2f}s".replace("  ", " ")
