"""The Textual app: `create_app(...)` builds it (tests hand it fakes), `lis-tui tui` runs it."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from textual.app import App
from textual.binding import Binding
from textual.notifications import Notification, Notify
from textual.screen import Screen

from lis_tui.config.settings import Config
from lis_tui.conversation import Conversation
from lis_tui.model.discover import KNOWN_PORTS
from lis_tui.runs.resume import chain_events
from lis_tui.app.rootfs_offer import RootfsJob, RootfsOffer
from lis_tui.runs.store import app_runs_dir
from lis_tui.app.screens.approve_network import NetworkApprovalScreen
from lis_tui.app.screens.confirm import ConfirmScreen
from lis_tui.app.screens.help import HelpScreen
from lis_tui.app.screens.main import MainScreen
from lis_tui.app.screens.question import QuestionScreen
from lis_tui.app.screens.setup import needs_setup
from lis_tui.app.widgets.messages import NetworkQuestion, RootfsProgress
from lis_tui.app.widgets.plain import notify_plain
from lis_tui.app.widgets.status import Status, StatusBar

log = logging.getLogger(__name__)
QUIT_AGAIN_S = 2.0
"""A second Ctrl+C this soon after the one that interrupted quits."""
DIALOGS = (QuestionScreen, ConfirmScreen)
"""Screens that ask: toasts wait while one is on top (at the top right they covered its corner)."""


class LisApp(App):
    """lis-tui: one conversation with a model in a sandbox, or the replay of a finished run."""

    # The main screen's sheet is listed here: Textual reads a screen's own CSS_PATH only for a
    # screen pushed or switched to, never for the one get_default_screen() returns.
    CSS_PATH = ["app.tcss", "screens/main.tcss"]
    TITLE = "lis-tui"
    # Ctrl+C is ours wherever the focus is (a text field's copy, Textual's "press ctrl+q" toast)
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True),
                Binding("ctrl+c", "interrupt_or_quit", "Interrupt", show=False, priority=True),
                Binding("f1", "help", "Help")]

    def __init__(self, conversation: Conversation | None, status: Status, *,
                 task: str | None = None, replay: Iterable[Any] | None = None,
                 log_path: Path | None = None, setup: bool = False,
                 rootfs_offer: RootfsOffer | None = None,
                 server_ports: tuple[tuple[str, int], ...] = KNOWN_PORTS) -> None:
        super().__init__()
        self.rootfs_job = RootfsJob(rootfs_offer or RootfsOffer())
        """The build of the recommended rootfs the setup screen offers (the app's, so it goes
        on when that screen closes)."""
        self.server_ports = server_ports
        """Where the setup screen looks for model servers."""
        self.setup_first = setup
        self.log_path = log_path
        """Where details of errors go (notices name it)."""
        self.conversation, self.first_status = conversation, status
        self.first_task, self.replayed = task, replay
        self._quitting: ConfirmScreen | None = None
        """The question quitting asks, while it is open: a second ctrl+q answers it."""
        self._questions = 0
        """Network approvals waiting for the person (the status badge shows any)."""
        self._held_toasts: list[Notification] = []
        """Toasts that wait for the dialog on top to close."""

    def on_mount(self) -> None:
        self.screen_change_signal.subscribe(self, self._toasts_for, immediate=True)
        if not self.is_headless:  # a closed terminal, a kill or a logout ends the session as ctrl+q does
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._signalled, signum)
        # The stderr line about an ignored ./lis-tui.toml is hidden once the app has the screen.
        files = self.conversation.config.files if self.conversation is not None else {}
        for path, state in files.items():
            if state.startswith("ignored: "):
                notify_plain(self, f"{path}: {state.removeprefix('ignored: ')}",
                             title="Project config ignored", severity="warning", timeout=30)

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.conversation, self.first_status, self.first_task, self.replayed,
                          setup=self.setup_first)

    @property
    def main(self) -> MainScreen:
        return self.screen_stack[0]  # type: ignore[return-value]

    async def action_interrupt_or_quit(self) -> None:
        """Ctrl+C: interrupt what runs (the command, or the model call), as Esc does; a second one
        within QUIT_AGAIN_S, or one while nothing runs, quits as Ctrl+Q does (once the step has
        stopped, so that quitting asks about changes not applied, as it does between tasks)."""
        main, now = self.main, time.monotonic()
        if self.screen is self._quitting or not main.busy or main.quit_when_stopped:
            await self.action_quit("ctrl+c")
        elif main.ctrl_c_at is not None and now - main.ctrl_c_at < QUIT_AGAIN_S:
            main.quit_when_stopped = True
            main.interrupt("quitting once the step has stopped")
        else:
            main.ctrl_c_at = now
            main.interrupt("ctrl+c again quits")

    async def action_quit(self, key: str = "ctrl+q") -> None:
        if self.main.busy:
            question = "A task is running. Quit? It is stopped and its trajectory kept."
        elif self.rootfs_job.state == "building":
            question = ("The rootfs is still building. Quit? The build stops and keeps nothing half-made; F4 "
                        "starts it again.")
        else:
            question = await self._unapplied()
        if not question:
            self.exit()
        elif self.screen is self._quitting:  # ctrl+q again: the answer
            self._quitting.dismiss(True)
        elif not isinstance(self.screen, ConfirmScreen):
            self._quitting = ConfirmScreen(question + f" ({key} again quits)", "Quit", "Stay")
            self.push_screen(self._quitting, lambda yes: self._stop_and_exit() if yes else None)

    async def _unapplied(self) -> str:
        """The question to ask before quitting when the workspace has not taken all of the sandbox's
        changes (saved first: they are kept in the run folder), else ""."""
        conversation = self.conversation
        saved = await asyncio.to_thread(conversation.save_work) if conversation is not None else None
        if saved is None or not saved.paths:
            return ""
        count = f"{len(saved.paths)} change{'' if len(saved.paths) == 1 else 's'}"
        return (f"{count} to {conversation.spec.workspace} {'is' if len(saved.paths) == 1 else 'are'} not applied. "
                f"Quit? They are kept in {saved.run_dir}/changes.patch: `lis-tui apply "
                f"{saved.run_dir.name}` applies them later (F6 reviews them now).")

    def _signalled(self, signum: int) -> None:
        """SIGHUP, SIGTERM or SIGINT: quit without asking; closing stops the run (its trajectory
        finished) and saves its work in the run folder (lis-tui apply RUN), as after ctrl+q."""
        log.info("quitting on signal %d", signum)
        if signum == signal.SIGHUP:
            from lis_tui.commands.live import detach_from_terminal  # noqa: PLC0415

            detach_from_terminal()
        self._stop_and_exit()

    def _stop_and_exit(self) -> None:
        self.rootfs_job.stop.set()  # the worker's thread ends with the build's process
        self.exit()

    def on_notify(self, event: Notify) -> None:
        """Every toast passes here (Textual shows it after): while a dialog is on top, it waits."""
        if isinstance(self.screen, DIALOGS):
            event.prevent_default()  # App._on_notify, which would show it now, is not called
            self._held_toasts.append(event.notification)

    def _toasts_for(self, screen: Screen) -> None:
        """A screen came on top: toasts on show wait if it is a dialog; held ones show if it is not
        (each for its whole time again)."""
        if isinstance(screen, DIALOGS):
            # Textual keeps the toasts on show there; it has no public list of them
            self._held_toasts += [n for n in self._notifications if not n.has_expired]
            self.clear_notifications()
        elif self._held_toasts:
            held, self._held_toasts = self._held_toasts, []
            for notification in held:
                self.post_message(Notify(replace(notification, raised_at=time.time())))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.places()))

    def places(self) -> list[tuple[str, str]]:
        """Where things are kept: this run (or where runs go, before the first), the log."""
        found: list[tuple[str, str]] = []
        if self.conversation is not None:
            out = self.conversation.out
            found.append(("This run", str(out)) if out else ("Runs go to", str(app_runs_dir())))
        if self.log_path is not None:
            found.append(("Log", str(self.log_path)))
        return found

    def build_rootfs(self) -> None:
        """Start building the recommended rootfs in a worker, unless it is already building."""
        if self.rootfs_job.claim():
            self.post_message(RootfsProgress())
            self.run_worker(self._build_rootfs, thread=True, group="rootfs", exit_on_error=False)

    def _build_rootfs(self) -> None:
        try:  # post_message is thread-safe: each line redraws the panel on the UI thread
            self.rootfs_job.run(lambda: self.post_message(RootfsProgress()))
        finally:
            self.post_message(RootfsProgress(done=True))

    def on_rootfs_progress(self, message: RootfsProgress) -> None:
        for screen in self.screen_stack:
            for shown in screen.query("RootfsPanel, Welcome"):
                shown.redraw()
        job = self.rootfs_job
        if message.done and job.state == "built":
            self.main.use_rootfs(job.built)
            notify_plain(self, f"The rootfs {job.built} is built and is now the default.",
                         title="Rootfs ready")
        elif message.done and job.state == "failed":
            notify_plain(self, f"{job.error[-300:]}\nF4 shows it; ctrl+b there tries again.",
                         title="The rootfs build failed", severity="error", timeout=15)

    def ask_network(self, request: Any) -> Future:
        """The network policy's approver: called off the UI thread, answered by the modal (an
        isolation.net Answer: the answer and who gave it)."""
        future: Future = Future()
        self.post_message(NetworkQuestion(request, future))
        return future

    def on_network_question(self, message: NetworkQuestion) -> None:
        def answered(answer: Any) -> None:  # an isolation.net Answer, or None: closed unanswered
            self._asking(-1)
            if answer is None:
                from isolation.net import Answer  # noqa: PLC0415 (loaded by now: the proxy asked)

                answer = Answer("deny", "dismissed")
            try:  # withdrawn (its request ended) a moment ago: the answer counts for nothing
                message.future.set_result(answer)
            except InvalidStateError:
                pass

        self._asking(+1)
        command = self.conversation.command if self.conversation is not None else ""
        screen = NetworkApprovalScreen(message.request, command, message.future)
        self.push_screen(screen, answered)

    def _asking(self, delta: int) -> None:
        self._questions = max(0, self._questions + delta)
        self.main.query_one(StatusBar).change(asking=self._questions > 0)

    def on_unmount(self) -> None:
        if self.conversation is not None:
            self.conversation.close()


def create_app(config: Config | None = None, spec: Any = None, *,
               output_dir: str | Path | None = None, task: str | None = None,
               replay: dict | None = None, command_approval: bool = False,
               stream: bool = True, log_path: Path | None = None,
               rootfs_offer: RootfsOffer | None = None,
               server_ports: tuple[tuple[str, int], ...] = KNOWN_PORTS, resumed: Any = None) -> LisApp:
    """The app for a live conversation (`config`, `spec`), or the replay of a trajectory.
    `rootfs_offer` and `server_ports` are what the setup screen offers and where it looks;
    `resumed` (lis_tui.runs.resume.Resumable) a past run the conversation continues."""
    if replay is not None:
        # a resumed run is shown with the runs it continued: the whole conversation
        return LisApp(None, _replay_status(replay), replay=list(chain_events(replay)),
                      log_path=log_path)
    if config is None:
        from lis_tui.config.settings import load_config  # noqa: PLC0415

        config = load_config()
    conversation = Conversation(config, spec, output_dir, command_approval=command_approval,
                                stream=stream, resumed=resumed)
    app = LisApp(conversation, _status(config, spec, command_approval), task=task,
                 log_path=log_path, setup=needs_setup(config.sources), rootfs_offer=rootfs_offer,
                 server_ports=server_ports)
    conversation.approver = app.ask_network
    return app


def _status(config: Config, spec: Any, command_approval: bool) -> Status:
    return Status(model=config.model.model or "(server default)",
                  rootfs=spec.rootfs if spec else "no sandbox",
                  network=spec.network if spec else "off", approvals=command_approval,
                  max_steps=config.agent.max_steps)


def _replay_status(doc: dict) -> Status:
    sandbox = doc.get("sandbox") or {}
    steps = [s for s in doc.get("steps") or [] if isinstance(s, dict)]
    return Status(model=str((doc.get("model") or {}).get("model") or "(server default)"),
                  elapsed=sum(float(s.get("duration") or 0) for s in steps),
                  rootfs=str(sandbox.get("rootfs", "no sandbox")), sandbox="replay",
                  network=str(sandbox.get("network", "off")),
                  max_steps=int((doc.get("agent") or {}).get("max_steps") or 0),
                  session=str(doc.get("id", "-")))
