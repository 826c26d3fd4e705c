"""The main screen: status line, transcript, prompt, footer; the agent runs in a thread worker."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from pathlib import Path
from dataclasses import replace
from typing import Any, Iterable

from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker

from lis_tui.agent import events as ev
from lis_tui.commands.live import running_text
from lis_tui.runs.store import app_runs_dir
from lis_tui.app.screens.setup import SetupScreen
from lis_tui.app.widgets.blocks import NoticeBlock
from lis_tui.app.widgets.messages import AgentEvent, RunCrashed, ServerChecked
from lis_tui.app.widgets.plain import notify_plain
from lis_tui.app.widgets.prompt import PromptInput, QueuedNote
from lis_tui.app.widgets.status import Status, StatusBar
from lis_tui.app.widgets.transcript import Transcript
from lis_tui.app.widgets.welcome import Welcome

log = logging.getLogger(__name__)
NETWORK_CYCLE = {"off": "ask", "ask": "on", "on": "off"}


class ScreenListener:
    """The agent's listener: each event goes to the screen as a message (thread-safe)."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen

    def on_event(self, event: Any) -> None:
        if self.screen.is_attached:  # after quitting, the run's last events have no one to see them
            self.screen.post_message(AgentEvent(event))


class MainScreen(Screen):
    """A live run, or a replay when `replay` holds a finished run's events."""

    # Its layout is screens/main.tcss, which the app loads (LisApp.CSS_PATH says why)
    # Short labels: the footer holds them all at 80 columns (F1 lists them in full).
    BINDINGS = [
        Binding("escape", "interrupt", "Stop"),
        Binding("f2", "network", "Net"),
        Binding("f3", "approvals", "Approve"),
        Binding("f4", "setup", "Model"),
        Binding("f5", "files", "Files"),
        Binding("f6", "review", "Review"),
        Binding("f8", "compact", "Compact", show=False),  # F1 lists it (F7 is the prompt's select-all)
        Binding("ctrl+n", "new_session", "New"),  # only after a rootfs was built (F1 says more)
        Binding("ctrl+o", "expand", "Expand output", show=False),  # from the prompt too
    ]

    def __init__(self, conversation: Any, status: Status, task: str | None = None,
                 replay: Iterable[Any] | None = None, setup: bool = False) -> None:
        super().__init__()
        self.setup_first = setup
        self.conversation, self.first_status = conversation, status
        self.first_task, self.replayed = task, replay
        self.busy = False
        """A task runs: from start() until its worker thread is back (not only its last event)."""
        self.quit_when_stopped = False
        """Ctrl+C twice: the step is being interrupted, and the app quits (as Ctrl+Q) once it stopped."""
        self.ctrl_c_at: float | None = None
        """When Ctrl+C interrupted this task (time.monotonic): another one soon after quits."""
        self._finish = ""
        """How the last task ended (RunFinished.reason; "error" for a crash)."""
        self._tokens = (0, 0)
        self.new_rootfs = ""
        """A rootfs built while this session's sandbox ran: ctrl+n starts a session on it."""

    def compose(self) -> ComposeResult:
        yield StatusBar(self.first_status, id="status")
        yield Transcript(id="transcript")
        yield QueuedNote(id="queued")
        yield PromptInput(id="prompt")
        yield Footer(show_command_palette=False)  # ctrl+p still opens it; the room goes to keys

    def on_mount(self) -> None:
        prompt = self.query_one(PromptInput)
        if self.replayed is not None:
            prompt.set_mode("replay")
            for event in self.replayed:
                self._show(event)
            self.query_one(Transcript).focus()
            return
        prompt.set_mode("task")
        prompt.focus()
        if getattr(self.conversation, "resumed", None) is not None:
            self._show_resumed(self.conversation.resumed)
        elif not self.first_task:
            self.query_one(Transcript).mount(Welcome(self.conversation, str(app_runs_dir()),
                                                     self.app.rootfs_job))
            if not self.setup_first:  # else once the setup said where the server is
                self.call_after_refresh(self.check_server)  # its thread loads openai: after the frame
        if self.setup_first:  # the task, if one was given, starts once the model is known
            self.action_setup(then=self.first_task)
        elif self.first_task:
            self.start(self.first_task)

    def _show_resumed(self, resumed: Any) -> None:
        """A resumed run: its conversation as it went (every run of its chain), then what holds now."""
        transcript = self.query_one(Transcript)
        for event in resumed.earlier_events():
            transcript.show(event)
        notes = "".join(f"\n· {note}" for note in resumed.notes)
        transcript.mount(NoticeBlock(f"Continuing {resumed.name}: the model gets this conversation; type "
                                     f"a follow-up.{notes}"))
        transcript.scroll_end(animate=False)
        self.query_one(PromptInput).set_mode("follow-up")

    def _on_ResumeNote(self, e: ev.ResumeNote) -> None:
        self.query_one(Transcript).mount(NoticeBlock(f"Resumed: {e.text}"))

    def check_server(self) -> None:
        """Ask the configured server for its models off the UI thread (the first frame does not
        wait): the welcome says whether it answers, the status line which model it serves."""
        model = self.conversation.config.model

        def ask() -> None:
            from lis_tui.model.discover import ServerCheck, check_server  # noqa: PLC0415

            try:
                found = check_server(model)
            except Exception as exc:  # a bug: said on the welcome, not a silent thread
                log.exception("the server check failed")
                found = ServerCheck(error=f"{type(exc).__name__}: {exc}")
            try:  # thread-safe; a closed screen drops it, a closed event loop raises
                self.post_message(ServerChecked(model, found))
            except RuntimeError:
                log.debug("the app closed before the server answered")

        # Not a Textual worker: those run in asyncio's default executor, which quitting waits for,
        # so a server that never answers would hold up Ctrl+Q for the whole timeout.
        threading.Thread(target=ask, name="lis-server-check", daemon=True).start()

    def on_server_checked(self, message: ServerChecked) -> None:
        if self.conversation is None or message.model is not self.conversation.config.model:
            return  # F4 changed the model meanwhile: that one's check is on its way
        if not message.model.model and message.check.models:  # what a run will use: the first
            self._status(model=message.check.models[0])
        for welcome in self.query(Welcome):
            welcome.check = message.check
            welcome.redraw()

    # -- starting a task --------------------------------------------------------------------
    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        # The task is the text as typed or pasted, every line of it (nothing stripped)
        if message.text.strip() and self.conversation is not None:
            message.prompt.clear()
            if self.busy:  # typed ahead: it waits for this task's end
                self.query_one(QueuedNote).add(message.text)
            else:
                self.start(message.text)

    def start(self, task: str) -> None:
        """Run `task` (or a follow-up) in the worker; the UI stays live, and the prompt takes
        what is typed meanwhile (the focus stays where it is)."""
        self.busy = True
        self._finish, self.ctrl_c_at = "", None
        self.refresh_bindings()  # Esc (stop) shows in the footer while a task runs
        self.query(Welcome).remove()
        self.query_one(PromptInput).set_mode("busy")
        self.query_one(StatusBar).start_clock()
        if self.conversation.sandbox is None and self.conversation.spec is not None:
            self._status(doing="starting the sandbox")
        self.query_one(Transcript).follow()  # scrolled up to read the last run or not: the new one shows
        self.run_task(task)

    def _send_queued(self) -> None:
        """The task ended: the queued follow-up goes now; after an interrupt or a failure it goes
        back into the prompt instead (before what is typed there), to send or change."""
        text = self.query_one(QueuedNote).take()
        if self._finish not in ("cancelled", "error"):
            self.start(text)
            return
        prompt = self.query_one(PromptInput)
        prompt.text = text + (f"\n{prompt.text}" if prompt.text.strip() else "")
        prompt.move_cursor(prompt.document.end)
        why = "you interrupted the task" if self._finish == "cancelled" else "the task failed"
        self.query_one(Transcript).mount(NoticeBlock(
            f"The follow-up you queued was not sent ({why}): it is back in the prompt, Enter sends it."))
        self.query_one(Transcript).anchor()

    @work(thread=True, exit_on_error=False, group="agent")
    def run_task(self, task: str) -> None:
        try:
            self.conversation.ask(task, ScreenListener(self))
        except Exception as exc:  # a bad setting or a bug: a notice, never a traceback
            log.exception("the run failed")
            self.post_message(RunCrashed(f"{type(exc).__name__}: {exc}"))

    # -- what the agent says ----------------------------------------------------------------
    def on_agent_event(self, message: AgentEvent) -> None:
        try:
            self._show(message.event)
        except Exception:  # a drawing bug must not take the run (or the app) down with it
            log.exception("could not show %s", type(message.event).__name__)
            self.notify(f"Could not show a {type(message.event).__name__} event; "
                        f"details are in {self.app.log_path or 'the log'}.", severity="warning")

    def _show(self, event: Any) -> None:
        self.query_one(Transcript).show(event)
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        if handler is not None:
            handler(event)

    def _on_RunStarted(self, e: ev.RunStarted) -> None:
        out = getattr(self.conversation, "out", None)
        self._status(sandbox=self._state(), session=self._session(), doing="",
                     run_dir=str(out) if out else "")

    def _on_StepStarted(self, e: ev.StepStarted) -> None:
        self._status(step=e.step, sandbox=self._state())

    def _on_ModelRequest(self, e: ev.ModelRequest) -> None:
        self._live(f"step {e.step} · waiting for the model")

    def _on_ToolStarted(self, e: ev.ToolStarted) -> None:
        self._live(f"step {e.step} · {running_text(e.call.name, e.arguments or {})}")

    def _on_ToolFinished(self, e: ev.ToolFinished) -> None:
        self._live("")

    def _on_ModelReply(self, e: ev.ModelReply) -> None:
        self._live("")
        if self.replayed is None and self.conversation.model_name:  # the server's pick, once known
            self._status(model=self.conversation.model_name)
        if e.usage is not None:
            self._tokens = (self._tokens[0] + e.usage.prompt_tokens,
                            self._tokens[1] + e.usage.completion_tokens)
            estimated = e.usage.estimated or self.query_one(StatusBar).status.tokens_estimated
            self._status(tokens_in=self._tokens[0], tokens_out=self._tokens[1],
                         tokens_estimated=estimated)

    def _live(self, doing: str) -> None:
        """The status line's second line: what the running step does (not in a replay)."""
        if self.replayed is None and not self.query_one(StatusBar).status.doing.startswith("interrupting…"):
            self._status(doing=doing)

    def _on_ApprovalNeeded(self, e: ev.ApprovalNeeded) -> None:
        block = self.query_one(Transcript).last_tool
        if block is not None:
            block.waiting("⏸ waiting for your approval")

        def answered(answer: ev.Approval | None) -> None:
            if block is not None:
                block.resume()
            _resolve(e.future, answer if answer is not None else ev.Skip())

        from lis_tui.app.screens.approve_command import CommandApprovalScreen  # noqa: PLC0415 (not on the first screen)

        self.app.push_screen(CommandApprovalScreen(e.command, e.future), answered)

    def _on_WorkSaved(self, e: ev.WorkSaved) -> None:
        if e.changes and self.replayed is None:
            count = f"{e.changes} change{'' if e.changes == 1 else 's'}"
            self.query_one(Transcript).mount(NoticeBlock(
                f"{count} to your project to review (F6): nothing is applied until you say so. Kept in "
                f"{e.run_dir}/changes.patch meanwhile (`lis-tui apply {Path(e.run_dir).name}`)."))
            self.query_one(Transcript).anchor()

    def _on_RunFinished(self, e: ev.RunFinished) -> None:
        self._finish = e.reason  # the task is idle once its thread is back (on_worker_state_changed)
        if e.reason == "error":  # no toast for an answer: the Answer box says it, under a toast
            notify_plain(self, e.message, title="The run failed", severity="error", timeout=10)

    def on_run_crashed(self, message: RunCrashed) -> None:
        """A run that failed before it began (no sandbox, an unwritable run directory): said in the
        transcript, where it stays, not only in a toast that goes."""
        where = self.app.log_path or "the log"
        self.query_one(Transcript).mount(NoticeBlock(
            f"✘ The run failed before it started: {message.text}\nThe traceback is in {where}; "
            "`lis-tui doctor` checks the sandbox, F4 the model.", "error"))
        self.query_one(Transcript).scroll_end(animate=False)
        self._finish = "error"
        notify_plain(self, f"{message.text}\nDetails are in {where}.", title="lis-tui failed",
                     severity="error", timeout=15)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The task's thread is back (after its last event, its work saved): the session is idle,
        and what waited for that goes (a quit after Ctrl+C twice, a follow-up typed ahead)."""
        if event.worker.group != "agent" or not event.worker.is_finished or not self.is_attached:
            return
        self._idle(failed=self._finish == "error")
        if self.quit_when_stopped:
            self.quit_when_stopped = False
            self.app.call_later(self.app.action_quit, "ctrl+c")
        elif self.query_one(QueuedNote).text:
            self._send_queued()

    def _idle(self, failed: bool = False) -> None:
        self.busy = False
        self.refresh_bindings()
        self.query_one(StatusBar).stop_clock()
        self._status(sandbox="failed" if failed else self._state(), doing="")
        if self.replayed is None:
            prompt = self.query_one(PromptInput)
            prompt.set_mode("follow-up" if self.conversation.messages else "task")
            if self.focused is None:  # else it stays: on the prompt, or where Tab moved it to read
                prompt.focus()

    # -- keys -------------------------------------------------------------------------------
    def on_key(self, event: events.Key) -> None:
        """What is typed in the transcript is meant for the prompt: it goes there (e included:
        while the prompt takes text, Ctrl+O expands the outputs)."""
        prompt = self._prompt_for_transcript()
        if prompt is not None and event.is_printable and event.character:
            event.stop()
            event.prevent_default()  # before the transcript's own binding (e)
            prompt.focus()
            prompt.take(event.character)

    def on_paste(self, event: events.Paste) -> None:
        prompt = self._prompt_for_transcript()
        if prompt is not None:
            event.stop()
            prompt.focus()
            prompt.take(event.text)

    def _prompt_for_transcript(self) -> PromptInput | None:
        """The prompt, when the transcript has the keys and the prompt takes text; or when the
        prompt has them already: the focus moves after the key that sent it there, and keys typed
        on meanwhile, dispatched to the transcript, reach us once it has (the prompt takes its own
        keys and pastes, so what reaches us with it focused is theirs). The CI lost "w?" of a fast
        "and now?" so."""
        prompt = self.query_one(PromptInput)
        if isinstance(self.focused, (Transcript, PromptInput)) and not prompt.disabled:
            return prompt
        return None

    def action_expand(self) -> None:
        self.query_one(Transcript).action_expand()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """A replay has nothing to interrupt or configure: hide those keys."""
        live = ("interrupt", "network", "approvals", "setup", "files", "review", "compact")
        if action == "interrupt" and not self.busy:
            return False
        if action == "new_session" and (not self.new_rootfs or self.busy):
            return False
        return not (self.replayed is not None and action in live)

    def action_interrupt(self) -> None:
        self.interrupt()

    def interrupt(self, note: str = "") -> None:
        """Stop the step in progress (Esc, Ctrl+C); `note` follows "interrupting…" in the status
        line, where it stays until the run has stopped (not a toast that stays)."""
        if self.busy:
            self._status(doing=f"interrupting… ({note})" if note else "interrupting…")
            self.conversation.cancel()

    def action_compact(self) -> None:
        if self.conversation is not None:
            self.notify(self.conversation.compact())

    def action_network(self) -> None:
        if self.conversation is None or self.conversation.spec is None:
            self.notify("No sandbox network here (replay, or mode llm).", severity="warning")
            return
        mode = NETWORK_CYCLE.get(self.conversation.network, "off")
        self.conversation.set_network(mode)
        self._status(network=mode)
        self.notify(f"Network mode: {mode.upper()}")

    def action_approvals(self) -> None:
        if self.conversation is None:
            return
        on = not self.conversation.command_approval
        self.conversation.set_command_approval(on)
        self._status(approvals=on)
        self.notify(f"Command approvals {'on' if on else 'off'}")

    def action_setup(self, then: str | None = None) -> None:
        """Where the model is: the setup screen; `then` is a task to start afterwards."""
        if self.busy or self.conversation is None:
            self.notify("The model can be changed between tasks.", severity="warning")
            return

        def chosen(model: Any) -> None:
            if model is not None:
                self.conversation.set_model(model)
                agent = self.conversation.config.agent
                self.conversation.config.agent = replace(agent, tool_format=screen.tool_format)
                self._status(model=model.model or "(server default)")
            if then:
                self.start(then)
            elif model is not None:
                self.check_server()

        screen = SetupScreen(self.conversation.config.model, self.conversation.spec,
                             rootfs_job=self.app.rootfs_job, ports=self.app.server_ports,
                             tool_format=self.conversation.config.agent.tool_format)
        self.app.push_screen(screen, chosen)

    def use_rootfs(self, name: str) -> None:
        """A rootfs was built: the session uses it if its sandbox has not started yet; else it
        says that it stays where it is, and ctrl+n starts a new session on the new rootfs."""
        spec = getattr(self.conversation, "spec", None)
        if spec is None:
            return
        if self.conversation.sandbox is None and not self.busy:
            self.conversation.spec = replace(spec, rootfs=name)
            self._status(rootfs=name)
            return
        self.new_rootfs = name
        self.refresh_bindings()
        self.query_one(Transcript).mount(NoticeBlock(
            f"The rootfs {name} is built. This session stays on {spec.rootfs}: its sandbox is "
            f"running. Ctrl+N starts a new session on {name} (this one is closed, its run kept)."))
        self.query_one(Transcript).scroll_end(animate=False)

    def action_new_session(self) -> None:
        """A new session (a fresh sandbox at the next task) on the rootfs built meanwhile."""
        from lis_tui.conversation import Conversation  # noqa: PLC0415

        old, name = self.conversation, self.new_rootfs
        if self.busy or not name or old is None or old.spec is None:
            return
        new = Conversation(old.config, replace(old.spec, rootfs=name, network=old.network),
                           command_approval=old.command_approval, stream=old.stream,
                           approver=old.approver)
        new.host_services = list(old.host_services)
        self.conversation = self.app.conversation = new
        self.new_rootfs = ""
        self.refresh_bindings()
        self.run_worker(old.close, thread=True, group="close")  # exports its output, then stops
        kept = f"; its run is in {old.out}" if old.out else ""
        self.query_one(Transcript).mount(NoticeBlock(
            f"A new session on {name}: its sandbox starts with the next task. The one before "
            f"is closed{kept}."))
        self._tokens = (0, 0)
        self._status(rootfs=name, sandbox="idle", step=0, tokens_in=0, tokens_out=0,
                     session="-", run_dir="")
        self.query_one(PromptInput).set_mode("task")
        self.query_one(PromptInput).focus()

    def action_files(self) -> None:
        if self.conversation is not None:
            from lis_tui.app.screens.files import FilesScreen  # noqa: PLC0415 (not on the first screen)

            self.app.push_screen(FilesScreen(self.conversation))

    def action_review(self) -> None:
        if self.conversation is not None:
            from lis_tui.app.screens.review import ReviewScreen  # noqa: PLC0415 (rich.syntax: not on the first screen)

            self.app.push_screen(ReviewScreen(self.conversation))

    def _status(self, **fields: Any) -> None:
        """Change the status line (and the welcome, which shows some of the same)."""
        self.query_one(StatusBar).change(**fields)
        for welcome in self.query(Welcome):
            welcome.redraw()

    def _state(self) -> str:
        return getattr(self.conversation, "state", "replay")

    def _session(self) -> str:
        return getattr(self.conversation, "session_id", self.first_status.session)


def _resolve(future: Future, answer: Any) -> None:
    """Answer the agent unless it gave up waiting (an interrupt cancels the future)."""
    if not future.done():
        try:
            future.set_result(answer)
        except Exception:  # cancelled between the check and the answer
            log.debug("approval answered too late", exc_info=True)
