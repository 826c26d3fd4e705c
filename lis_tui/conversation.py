"""One sandbox session the TUI keeps open across tasks: a first task, then follow-ups in the same
sandbox and the same conversation, with the network proxy under a live policy.

`api.run_task` is one task start to finish; this is its long-lived sibling. It never imports
textual: the TUI passes a listener (agent events) and an approver (network questions).
"""

from __future__ import annotations

import logging
import shlex
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from isolation import SandboxError, SandboxSpec
from isolation.spec import places_of
from lis_tui.agent.loop import Agent
from lis_tui.agent.allow_words import APP as APP_WORDS, allow_words
from lis_tui.config.settings import Config, save_network_allow
from lis_tui.config.workspace import observed_spec
from lis_tui.agent.events import (Compacted, Listeners, ResumeNote, RunFinished, RunStarted, RunUsage, ToolFinished,
                                  ToolOutput, ToolStarted, WorkSaved, network_listener)
from lis_tui.agent.instructions import read_instructions
from lis_tui.model.client import ModelClient
from lis_tui.prompts import Prompts
from lis_tui.runs.resume import FOLLOW_UP, FollowUpAgent, Resumable  # noqa: F401 (FOLLOW_UP: imported from here before)
from lis_tui.runs.store import app_runs_dir
from lis_tui.agent.trajectory import TrajectoryWriter
from lis_tui.runs.autosave import WorkSaver

if TYPE_CHECKING:  # the sandbox, the shell, api and runs/changes.py load with the first task (or
    from isolation import Sandbox  # the close that saves changes): the app's first frame needs none


log = logging.getLogger(__name__)
TOOLING_DIRS = (".*", "node_modules", "__pycache__", "venv", "site-packages")
"""Folders the files panel names but does not walk (find -name patterns): dot-folders (.git,
.venv, caches, editors'), packages, bytecode."""


class Conversation:
    """A sandbox, a shell, a model client and the conversation so far; `ask` runs one task."""

    def __init__(self, config: Config, spec: SandboxSpec | None = None,
                 output_dir: str | Path | None = None, *, command_approval: bool = False,
                 stream: bool = True, approver: Callable[[Any], Any] | None = None,
                 resumed: Resumable | None = None) -> None:
        self.config, self.spec, self.output_dir = config, observed_spec(spec, config), output_dir
        self.resumed = resumed
        """The past run this session continues (`lis-tui resume`, `--continue`), or None."""
        self._put_back = resumed is not None
        """Its work is still to be put into the sandbox once it starts."""
        self.command_approval, self.stream, self.approver = command_approval, stream, approver
        self.network = spec.network if spec else "off"
        self.host_services: list[str] = []
        """Exact host:port services on this machine the sandbox may ask for (the mode decides)."""
        self.messages: list[dict] = list(resumed.messages) if resumed is not None else []
        self.command = ""
        """The shell command running now, or the last one (network questions name it)."""
        self._running: tuple[int, int] | None = None
        """(step, index) of the tool call running now: its shell output goes to its block."""
        self.out: Path | None = None
        self.state = "idle"
        """idle (no sandbox yet), starting, ready, working, closed."""
        self._sandbox: Sandbox | None = None
        self._toolbox: Any = None
        self._saver: WorkSaver | None = None
        """Saves the work in the run folder after each step (and at close), once the sandbox runs."""
        self._client: ModelClient | None = None
        self._prompts: Prompts | None = None
        self._writer: TrajectoryWriter | None = None
        self._agent: Agent | None = None
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._closing = False
        self._compact_next = False
        """F8 asked for a compaction between tasks: the next task's agent compacts first."""
        self._auto_chose = ""
        """The tool format `auto` settled on in an earlier task (a text format, or native once the
        server took `tools`); follow-ups start in it. "" until then."""
        self.instructions = read_instructions(config, spec)
        """The AGENTS.md files every task's system prompt holds: read once, so that the welcome
        names what the model gets."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The running sandbox, or None before the first task or after closing."""
        return self._sandbox if self._sandbox is not None and self._sandbox.running else None

    @property
    def model_name(self) -> str:
        """The model's name: as configured, else the one the server chose once it was asked."""
        client = self._client
        return (client.model_name if client is not None else "") or self.config.model.model or ""

    @property
    def session_id(self) -> str:
        return self.out.name if self.out else "-"

    def ask(self, task: str, listener: Any = None) -> RunFinished:
        """Run `task` (the first one, or a follow-up) to the end; call from a worker thread."""
        self._idle.clear()  # close() waits for this, sandbox start included
        try:
            return self._ask(task, Listeners(SessionRecord(self._open_writer()), self, listener))
        finally:
            self._idle.set()

    def _ask(self, task: str, listeners: Listeners) -> RunFinished:
        try:
            self._open()
        except (SandboxError, _shell_error(), OSError) as exc:  # evaluated only on a failure
            self._close_parts()
            return _failed(f"the sandbox failed to start: {exc}", listeners)
        if self._saver is not None:  # after the trajectory's own save: the run folder is whole after each step
            listeners.listeners.append(self._saver)
        missed: list[str] = []
        if self._put_back and self._sandbox is not None:
            self._put_back = False
            listeners.on_event(ResumeNote(self.resumed.restore(self._sandbox)))
            missed = self.resumed.missed  # the model is told with this first follow-up
        with self._lock:
            if self._closing:
                return _failed("lis-tui was closing", listeners)
            agent = self._agent = self._make_agent(listeners, missed)
            self._listeners = listeners  # the proxy's notes go to the task at work
            self.state = "working"
        try:
            finished = agent.run(task)
        finally:
            with self._lock:
                self._agent = None
                self.state = "closed" if self._closing else "ready"
            handle = getattr(self._sandbox, "network", None)
            if handle is not None:  # a question a background job left open closes with its task
                handle.withdraw_questions()
        self.messages = agent.messages
        saved = _quietly(self.save_work)  # the task's end: what is not applied, said (and kept)
        if saved is not None and not saved.error:
            listeners.on_event(WorkSaved(len(saved.paths), str(self.out)))
        if agent.format.name != "native" or getattr(agent.format, "accepted", False):
            # auto's choice holds for the follow-ups too: a text format it switched to, or native
            # once the server took `tools` (a later 400 is then about something else)
            self._auto_chose = agent.format.name
        self._save_answer(finished)
        return finished

    def save_work(self) -> Any:
        """Save the run's work now (files/, and changes.patch: what the workspace has not taken yet);
        the workspace's lis_tui.runs.changes.SavedChanges, or None without a workspace or a sandbox."""
        saver, sandbox = self._saver, self._sandbox
        if saver is None or sandbox is None or not sandbox.running or sandbox.spec.workspace is None:
            return None
        saver.wait()  # a step's save still under way
        return saver.save(final=False).get("changes")

    def list_files(self, root: str | None = None, depth: int = 4, cap: int = 500) -> list[str]:
        """Files under `root` (None: where the model works, by the name it was told) and the output
        folder inside the sandbox (none before it starts), at most `cap`; then the tooling folders in
        them (TOOLING_DIRS, ending in "/"), not walked: a project's .git/ and .venv/ hold thousands of
        files, sorted before its own and filling the cap."""
        if self._sandbox is None or not self._sandbox.running:
            return []
        root = root or places_of(self.spec).working
        output = places_of(self.spec).output
        roots = [root] + ([output] if not output.startswith(f"{root}/") else [])
        names = [arg for name in TOOLING_DIRS for arg in ("-o", "-name", name)][1:]
        found = self._sandbox.exec(["find", *roots, "-mindepth", "1", "-maxdepth", str(depth),
                                    "(", "-type", "d", "(", *names, ")", "-prune", "-printf", "%p/\\n", ")",
                                    "-o", "-type", "f", "-print"], timeout=10, cwd="/")
        listed = found.stdout.splitlines()
        return (sorted(p for p in listed if not p.endswith("/"))[:cap]
                + sorted(p for p in listed if p.endswith("/")))

    def read_text(self, path: str, limit: int = 64 << 10) -> str:
        """A sandbox file's text for a preview: the first `limit` bytes; binary files described."""
        if self._sandbox is None or not self._sandbox.running:
            return "(the sandbox is not running)"
        data, rest, _ = self._sandbox.read_file_ends(path, limit, 0)  # bounded, whatever its length
        if b"\0" in data[:8192]:
            return f"(binary file, {len(data) + rest:,} bytes)"
        more = f"\n… {rest:,} more bytes" if rest else ""
        return data.decode("utf-8", "replace") + more

    def on_event(self, event: Any) -> None:
        """Keeps `messages` and `command` current, in the agent's thread, before the UI hears."""
        if isinstance(event, (RunStarted, Compacted)):  # the live list, so the UI sees it before run() returns
            self.messages = event.messages
        elif isinstance(event, ToolStarted) and event.call.name == "execute_bash":
            self.command = str((event.arguments or {}).get("command", ""))
            self._running = (event.step, event.index)
        elif isinstance(event, ToolFinished):
            self._running = None

    def _shell_output(self, text: str, seconds: float, skipped: int) -> None:
        """The shell's live output (in the agent's thread): to the UI as ToolOutput events."""
        running, listeners = self._running, getattr(self, "_listeners", None)
        if running is not None and listeners is not None:  # not our own `export` between tasks
            listeners.on_event(ToolOutput(*running, text, seconds, skipped))

    def cancel(self) -> None:
        """Interrupt the step in progress (the model call or the command); the session stays."""
        with self._lock:
            agent = self._agent
        if agent is not None:
            agent.cancel()

    def compact(self) -> str:
        """Compact the conversation before the next model call (F8); what will happen, in words."""
        if self.config.agent.observation == "paper" or self.config.agent.compact == "off":
            return "Compaction is off here (paper mode, or agent.compact = \"off\")."
        with self._lock:
            agent = self._agent
            self._compact_next = agent is None or not agent.compact_soon()
        return "The conversation is compacted before the next model call; the transcript says how."

    def set_model(self, model: Any) -> None:
        """Use this ModelConfig from the next task on (the setup screen's answer)."""
        self.config.model = model
        client, self._client = self._client, None
        if client is not None:
            _quietly(client.close)

    def set_command_approval(self, on: bool) -> None:
        self.command_approval = on
        with self._lock:
            if self._agent is not None:
                self._agent.command_approval = on

    def set_network(self, mode: str) -> None:
        """Change the network mode now (and for the sandbox when it starts)."""
        self.network = mode
        sandbox = self._sandbox
        if sandbox is None or not sandbox.running:
            return
        had_proxy = sandbox.network is not None
        sandbox.set_network(mode)
        if not had_proxy and sandbox.network is not None:
            # The shell may be busy with a command: tell it once it is free, off this thread.
            threading.Thread(target=self._export_proxy, daemon=True, name="lis-export").start()

    def close(self, wait: float = 5.0) -> None:
        """Stop the run (waiting up to `wait` s for it to end), export /testbed/output, then stop
        the shell, the proxy and the sandbox; safe to call twice."""
        with self._lock:
            self._closing = True
        self.cancel()
        self._idle.wait(wait)
        self.state = "closed"
        if self._saver is not None:
            self._saver.close()
            if self._sandbox is not None and self._sandbox.running:  # what was not applied stays: lis-tui apply RUN
                files = _quietly(self._saver.save) or {}
                if self._writer is not None and "files" in files:
                    self._writer.update(files=files["files"])
        self._close_parts()

    def _close_parts(self) -> None:
        for part in (self._toolbox, self._sandbox, self._client):
            if part is not None:
                _quietly(part.close)
        self._sandbox = self._toolbox = self._client = self._saver = None
        self.state = "closed" if self._closing else "idle"

    # -- pieces -----------------------------------------------------------------------------
    def _open_writer(self) -> TrajectoryWriter:
        from lis_tui import api  # noqa: PLC0415 (see the top: with the first task)

        if self._writer is None:
            # The app's runs live in the state directory, not wherever it was started (--output-dir wins).
            self.out = api.prepare_output_dir(self.output_dir or api.new_run_dir(app_runs_dir()))
            header = api.trajectory_header(self.config, self.spec, self.out)
            if self.resumed is not None:
                header.update(self.resumed.header())
            self._writer = TrajectoryWriter(self.out / "trajectory.json", header)
        return self._writer

    def _open(self) -> None:
        from isolation.sandbox import Sandbox  # noqa: PLC0415 (see the top)
        from lis_tui import api  # noqa: PLC0415

        if self._prompts is None:  # a bad prompts file fails here, before a sandbox starts
            self._prompts = api.run_prompts(self.config, self.spec, self.instructions)
        if self._client is None:
            self._client = ModelClient(self.config.model)
        if self.spec is None or self._sandbox is not None:
            self.state = "ready"
            return
        from tools import Toolbox  # noqa: PLC0415
        from tools.network_notes import NetworkNotes  # noqa: PLC0415
        from tools.shell import Shell  # noqa: PLC0415

        self.state = "starting"
        paper = self.config.agent.observation == "paper"
        self._notes = None if paper else NetworkNotes(allow_words(APP_WORDS))
        self._sandbox = Sandbox(self.spec, network=self._policy()).start()
        self._saver = WorkSaver(self._sandbox, self.out) if self.out is not None else None
        self._toolbox = Toolbox(self._sandbox, shell=Shell(
            self._sandbox, timeout=self.config.sandbox.timeout,
            separate_stderr=paper, on_output=self._shell_output), network_notes=self._notes)
        self.state = "ready"

    def _policy(self) -> Any:
        """The sandbox's network policy: the lists from config and flags, the person as approver."""
        from isolation.net import NetworkPolicy  # noqa: PLC0415

        net, spec = self.config.network, self.spec
        return NetworkPolicy(self.network, allow=[*net.allow, *spec.allow_hosts],
                             deny=[*net.deny, *spec.deny_hosts], decide=self.approver,
                             on_allow_always=save_network_allow, host_services=self.host_services,
                             on_note=self._network_note, words=allow_words(APP_WORDS))

    def _network_note(self, note: Any) -> None:
        """A refusal (or a credential use): to the transcript, and to the model in its command's result."""
        network_listener(getattr(self, "_listeners", None))(note)
        notes = getattr(self, "_notes", None)
        if notes is not None:
            notes.refused(note)

    def _export_proxy(self) -> None:
        """The network was turned on after the shell started: the shell learns the proxy."""
        handle = getattr(self._sandbox, "network", None)
        if handle is None or self._toolbox is None:
            return
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in handle.env.items())
        _quietly(self._toolbox.shell.run, f"export {exports}")

    def _make_agent(self, listeners: Listeners, missed: list[str] | None = None) -> Agent:
        from lis_tui import api  # noqa: PLC0415 (see the top)

        agent = self.config.agent
        if agent.tool_format == "auto" and self._auto_chose:
            agent = replace(agent, tool_format=self._auto_chose)
        made = FollowUpAgent(self._client, self._toolbox, agent, listener=listeners,
                             prompts=self._prompts, prompt_values=api.prompt_values(self.spec),
                             command_approval=self.command_approval, stream=self.stream,
                             reply_reserve=self.config.model.max_tokens or 0,
                             history=self.messages, missed=missed)
        if self._compact_next:
            self._compact_next = not made.compact_soon()
        return made

    def _save_answer(self, finished: RunFinished) -> None:
        if self.out is not None:
            text = finished.answer + "\n" if finished.answer else ""
            _quietly((self.out / "answer.txt").write_text, text, encoding="utf-8")


class SessionRecord:
    """The trajectory of a whole session: the first task stays `task`; later ones are listed
    in `follow_ups` (each task's steps count from 1 again, which is how a replay tells them)."""

    def __init__(self, writer: TrajectoryWriter) -> None:
        self.writer = writer

    def on_event(self, event: Any) -> None:
        doc = self.writer.doc
        if isinstance(event, RunStarted) and doc.get("task") is not None:
            doc.setdefault("follow_ups", []).append(event.task)
            self.writer.follow(event.messages)  # the conversation so far, then the follow-up
            self.writer.save()
            return
        self.writer.on_event(event)


def _failed(message: str, listeners: Listeners) -> RunFinished:
    finished = RunFinished("error", "", 0, RunUsage(), 0.0, message)
    listeners.on_event(finished)
    return finished


def _quietly(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except Exception:  # closing must go on past a part that fails
        log.exception("%s failed", getattr(func, "__qualname__", func))
        return None


def _shell_error() -> type:
    from tools.shell import ShellError  # noqa: PLC0415 (see the top)

    return ShellError
