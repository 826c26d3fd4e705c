"""`run_task`: one task, start to finish, headless: config, sandbox, shell, model, agent, outputs.

    from lis_tui import run_task
    result = run_task("What is 12345 * 6789?", model="qwen3", base_url="http://localhost:8000/v1")
    result.answer, result.finish_reason, result.steps, result.usage, result.output_dir

Run failures (model server down, sandbox that will not start, a limit) come back in the result
and its trajectory; only unusable arguments raise (ConfigError, ValueError).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import queue
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from isolation import Sandbox, SandboxError, SandboxSpec
from lis_tui import __version__
from lis_tui.agent.loop import Agent, CommandApproval
from lis_tui.agent.allow_words import RUN as RUN_WORDS, allow_words
from lis_tui.config.settings import Config, configured_rootfs, load_config, network_credentials, sandbox_limits  # noqa: F401 (configured_rootfs: callers import it from here)
from lis_tui.agent.events import (LIMIT_REASONS, InstructionsRead, Listeners, ResumeNote, RunFinished, RunUsage,
                                  StepFinished, network_listener)
from lis_tui.agent.instructions import Instructions, read_instructions
from lis_tui.model.client import ModelClient
from lis_tui.prompts import Prompts, load_prompts
from lis_tui.prompts.environment import environment_note
from lis_tui.runs.resume import FollowUpAgent
from lis_tui.runs.autosave import WorkSaver
from lis_tui.runs.store import app_runs_dir, remember
from lis_tui.agent.trajectory import TrajectoryWriter
from lis_tui.config.workspace import observed_spec, workspace_options

EXIT_CODES = {"submitted": 0, "error": 1, "cancelled": 130, **{r: 3 for r in LIMIT_REASONS}}
NETWORK_NOTES = {
    "off": "The network is off: work with what is installed and what the task brings.",
    "ask": "Network access is approved host by host; a download may be refused, and the "
           "answer says why.",
    "on": "The network is on: you may download packages, data and documentation.",
}


@dataclass
class RunResult:
    """What a run produced; everything is also saved under `output_dir`."""

    answer: str
    """The answer file's text (stripped), or the reply in `llm` mode; "" when there is none."""
    finish_reason: str
    """submitted, max_steps, max_context, wall_time, no_action, error or cancelled."""
    steps: int
    usage: RunUsage
    output_dir: Path
    message: str = ""
    """Why the run stopped, in words (the error message for "error")."""
    answer_note: str = ""
    """Why there is no answer, when there is none."""
    files: list[str] = field(default_factory=list)
    """Files copied from /testbed/output into `output_dir/files`."""
    changes: Any = None
    """With a workspace: what was saved of its changes (runs/changes.py's SavedChanges), else None."""
    replied: bool = True
    """False when the model never answered (its first call failed): the run never began, so what
    it says of a missing answer or an unchanged workspace is no news."""

    @property
    def trajectory_path(self) -> Path:
        return self.output_dir / "trajectory.json"

    @property
    def exit_code(self) -> int:
        """The CLI's exit code: 0 submitted, 3 a limit, 1 an error, 130 cancelled."""
        return EXIT_CODES.get(self.finish_reason, 1)


def run_task(task: str, *, input_dir: str | Path | None = None, output_dir: str | Path | None = None,
             workspace: str | Path | None = None, rootfs: str | None = None,
             network: str | None = None, model: str | None = None, base_url: str | None = None,
             profile: str | None = None, max_steps: int | None = None, mode: str | None = None,
             config: Config | None = None, spec: SandboxSpec | None = None, listener: Any = None,
             command_approval: CommandApproval = False, stream: bool = False,
             resume: Any = None) -> RunResult:
    """Run one task; Ctrl-C in the main thread cancels it cleanly (a second one stops it hard).

    Settings come from `config` if given (else the config files and environment, with `profile`),
    with the keyword arguments that are not None on top; `spec` replaces the sandbox arguments.
    `resume` (a lis_tui.runs.resume.Resumable): `task` is a follow-up to that run's conversation, in a
    sandbox with its work put back.
    """
    overrides = {"model.model": model, "model.base_url": base_url, "agent.max_steps": max_steps,
                 "agent.mode": mode, "network.mode": network, "sandbox.rootfs": rootfs}
    if config is None:
        config = load_config(profile, overrides)
    else:
        config = copy.deepcopy(config)  # the caller's stays as it was
        for dotted, value in overrides.items():
            if value is not None:
                config.set(dotted, value, "run_task")
    if not task.strip():
        raise ValueError("the task is empty; give the task text or --task-file FILE")
    if config.agent.mode == "llm":
        spec = None  # the baseline has no computer
    elif spec is None:
        spec = SandboxSpec(rootfs=rootfs or configured_rootfs(config),
                           network=network or config.network.mode,
                           workspace=workspace, input_dir=input_dir, limits=sandbox_limits(config),
                           nested_userns=config.sandbox.nested_userns,
                           credentials=network_credentials(config), **workspace_options(config))
    spec = observed_spec(spec, config)  # paper mode: the project at /testbed only
    instructions = read_instructions(config, spec)
    prompts = run_prompts(config, spec, instructions)  # a bad prompts file: fail before starting
    out = prepare_output_dir(output_dir)
    header = trajectory_header(config, spec, out)
    if resume is not None:
        header.update(resume.header())
    writer = TrajectoryWriter(out / "trajectory.json", header)
    replies = _Replies()
    listeners = Listeners(writer, listener, replies)
    if instructions.summary() and resume is None:  # a resumed conversation keeps its system prompt
        listeners.on_event(InstructionsRead(instructions.summary()))
    try:
        finished, files = _run(task, config, spec, prompts, listeners, command_approval, stream,
                               out, resume)
    except KeyboardInterrupt:  # outside the agent's loop: starting the sandbox, copying files
        if writer.doc["finish_reason"] is None:
            writer.update(finish_reason="cancelled", message="interrupted (Ctrl-C)")
        raise
    (out / "answer.txt").write_text(finished.answer + "\n" if finished.answer else "",
                                    encoding="utf-8")
    writer.update(files=files.get("files", []), files_skipped=files.get("skipped", []))
    return RunResult(finished.answer, finished.reason, finished.steps, finished.usage, out,
                     finished.message, finished.answer_note, files.get("files", []), files.get("changes"),
                     replies.seen)


class _Replies:
    """Whether any step of the run got the model's reply."""

    seen = False

    def on_event(self, event: Any) -> None:
        record = getattr(event, "record", None)
        if isinstance(event, StepFinished) and (record.usage is not None or record.finish_reason is not None):
            self.seen = True


def _run(task: str, config: Config, spec: SandboxSpec | None, prompts: Prompts,
         listeners: Listeners, command_approval: CommandApproval, stream: bool,
         out: Path, resume: Any = None) -> tuple[RunFinished, dict]:
    with ModelClient(config.model) as client:
        def make_agent(tools: Any) -> Agent:
            kind, more = (FollowUpAgent, {"history": resume.messages, "missed": resume.missed}) \
                if resume is not None else (Agent, {})
            return kind(client, tools, config.agent, prompts=prompts, listener=listeners,
                        prompt_values=prompt_values(spec), command_approval=command_approval,
                        stream=stream, reply_reserve=config.model.max_tokens or 0, **more)

        if spec is None:
            return _drive(make_agent(None), task, None), {}
        finished, files = _run_in_sandbox(spec, config, make_agent, task, out, listeners, resume)
    return (_failed(finished, listeners) if isinstance(finished, str) else finished), files


def _run_in_sandbox(spec: SandboxSpec, config: Config, make_agent: Any, task: str,
                    out: Path, listeners: Listeners, resume: Any = None) -> tuple[RunFinished | str, dict]:
    """The agent's result, or the error that kept it from starting, and the exported files."""
    from isolation.net import NetworkPolicy  # noqa: PLC0415
    from tools import Toolbox  # noqa: PLC0415 (keeps `import lis_tui.api` light for llm mode)
    from tools.network_notes import NetworkNotes  # noqa: PLC0415
    from tools.shell import Shell, ShellError  # noqa: PLC0415

    paper = config.agent.observation == "paper"
    words = allow_words(RUN_WORDS)
    notes = None if paper else NetworkNotes(words)  # paper mode's results stay the harness's
    to_log = network_listener(listeners)

    def noted(note: Any) -> None:  # the log and the trajectory, and the command's result
        to_log(note)
        if notes is not None:
            notes.refused(note)

    try:
        policy = NetworkPolicy(spec.network, spec.allow_hosts, spec.deny_hosts, on_note=noted, words=words)
        with Sandbox(spec, network=policy) as sandbox:
            toolbox = Toolbox(sandbox, shell=Shell(sandbox, timeout=config.sandbox.timeout,
                                                   separate_stderr=paper), network_notes=notes)
            saver = WorkSaver(sandbox, out)  # the work is saved after each step, and once more at the end
            listeners.listeners.append(saver)
            try:
                if resume is not None:  # the resumed run's work goes back in before the first step
                    listeners.on_event(ResumeNote(resume.restore(sandbox)))
                finished = _drive(make_agent(toolbox), task, sandbox)
            finally:
                saver.close()
                toolbox.close()
            return finished, saver.save()
    except (SandboxError, ShellError) as exc:
        return f"the sandbox failed: {exc}", {}


def _drive(agent: Agent, task: str, sandbox: Sandbox | None) -> RunFinished:
    """Run the agent; in the main thread, in a worker, so Ctrl-C becomes agent.cancel()."""
    if threading.current_thread() is not threading.main_thread():
        return agent.run(task)
    # A queue, not Thread.join: a join interrupted by Ctrl-C can leave is_alive() wrong (CPython
    # gh-90882), and the result would be lost.
    results: queue.SimpleQueue = queue.SimpleQueue()
    worker = threading.Thread(target=_run_into, args=(agent, task, results), name="lis-agent",
                              daemon=True)
    worker.start()
    interrupts = 0
    while True:
        try:
            outcome = results.get(timeout=0.5)
            break
        except queue.Empty:
            continue
        except KeyboardInterrupt:
            interrupts += 1
            agent.cancel()
            if interrupts > 1 and sandbox is not None:
                sandbox.close()  # a second Ctrl-C: whatever runs in there ends now
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _run_into(agent: Agent, task: str, results: queue.SimpleQueue) -> None:
    try:
        results.put(agent.run(task))
    except BaseException as exc:  # handed to the waiting thread
        results.put(exc)


def _failed(message: str, listeners: Listeners) -> RunFinished:
    """A run that never started (the sandbox failed), recorded like any other."""
    finished = RunFinished("error", "", 0, RunUsage(), 0.0, message)
    listeners.on_event(finished)
    return finished


# -- pieces -------------------------------------------------------------------------------------

def new_run_dir(parent: Path | str) -> Path:
    """A fresh run directory's name under `parent`: <UTC time>-<id>."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(parent) / f"{stamp}-{os.urandom(3).hex()}"


def prepare_output_dir(path: str | Path | None) -> Path:
    """The run's directory: `path`, or $XDG_DATA_HOME/lis-tui/runs/<UTC time>-<id>/ (never a folder in the
    project); refuses one in use. One elsewhere is noted in the runs index, so `lis-tui runs` lists it."""
    if path is None:
        path = new_run_dir(app_runs_dir())
    out = Path(path).expanduser().absolute()
    if (out / "trajectory.json").exists() or (out / "files").exists():
        raise ValueError(f"{out} already holds a run; choose another --output-dir or remove it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, a read-only or full disk
        raise ValueError(f"cannot make the run's directory {out}: {exc.strerror}; choose another "
                         "--output-dir") from None
    try:
        remember(out)
    except OSError:  # an unwritable data folder: the run goes on, only the listing misses it
        pass
    return out


def prompt_values(spec: SandboxSpec | None) -> dict[str, str]:
    """What the prompts say about this sandbox's folders (spec.places), its input and its network."""
    if spec is None:
        return {}
    places = spec.places
    note = f"see `ls {places.input}`" if spec.input_dir is not None else "it is empty: this task came with no files"
    if getattr(spec, "documents_dir", None) is not None:
        note += f"; the task's documents are in {places.documents}"
    return {"working_dir": places.working, "scratch_dir": places.scratch, "input_dir": places.input,
            "output_dir": places.output, "input_note": note, "network_note": NETWORK_NOTES.get(spec.network, ""),
            "environment_note": environment_note(spec.rootfs)}


def run_prompts(config: Config, spec: SandboxSpec | None,
                instructions: Instructions | None = None) -> Prompts:
    """The prompts of a run (`run` and the app): beside a workspace, the templates that say
    where the person's project is (its own path, or /testbed) and where the model's own folders are
    (Prompts.for_workspace); with the AGENTS.md files (read here unless given) in the system prompt."""
    prompts = load_prompts(config.agent.prompts or None)
    prompts = prompts.for_workspace() if spec is not None and spec.workspace is not None else prompts
    if instructions is None:
        instructions = read_instructions(config, spec)
    return replace(prompts, instructions=instructions.section())


def trajectory_header(config: Config, spec: SandboxSpec | None, out: Path) -> dict[str, Any]:
    """The trajectory's fixed fields: id, version, output dir, model settings (no key), sandbox."""
    # Host folders as absolute paths: "." would name whichever folder a resume is typed in
    sandbox = json.loads(json.dumps(asdict(spec.resolved()), default=str)) if spec else None
    return {"id": out.name, "lis_tui_version": __version__,
            "output_dir": str(out), "started_in": _cwd(), "model": config.model.public_dict(),
            "agent": asdict(config.agent), "sandbox": sandbox}


def _cwd() -> str:
    """Where the run was started (`lis-tui --continue` looks for it); "" when that folder is gone."""
    try:
        return os.getcwd()
    except OSError:
        return ""


# The names lis_tui/conversation.py imported before these were public.
_prompt_values, _header = prompt_values, trajectory_header
