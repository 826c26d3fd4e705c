"""First run (and F4): where is the model? The model servers found on this machine, one Enter each;
or a base URL, model name and the variable holding the key, with a test that lists the server's
models; saved to the user's config file. Below, the offer to build the recommended rootfs. Meanwhile
the sandbox works: ctrl+o opens a plain shell in a fresh one (the app steps aside until it exits)."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from lis_tui.config.settings import ModelConfig, save_model_setup, save_settings
from lis_tui.model.tool_formats import FORMATS
from lis_tui.model.discover import KNOWN_PORTS, FoundServer, find_servers
from lis_tui.app.widgets.plain import notify_plain, plain
from lis_tui.app.widgets.rootfs_panel import RootfsPanel

log = logging.getLogger(__name__)
FIELDS = (("base_url", "Base URL", "OpenAI-compatible, e.g. http://localhost:8000/v1"),
          ("model", "Model name", "empty: the first one the server lists"),
          ("api_key_env", "Key variable", "the environment variable that holds the API key"))


class SetupScreen(ModalScreen[ModelConfig]):
    """Answers with the saved ModelConfig, or None when the person leaves it for later."""

    CSS_PATH = "setup.tcss"
    AUTO_FOCUS = "#base_url"  # typing goes somewhere while it looks (the list takes over if found)
    BINDINGS = [Binding("ctrl+t", "test", "Test connection"), Binding("ctrl+s", "save", "Save"),
                Binding("ctrl+b", "build", "Build rootfs"),
                Binding("ctrl+o", "shell", "Sandbox shell"), Binding("escape", "later", "Later")]

    def __init__(self, model: ModelConfig, spec: Any = None, *, rootfs_job: Any = None,
                 ports: tuple[tuple[str, int], ...] = KNOWN_PORTS, tool_format: str = "auto") -> None:
        super().__init__()
        self.tool_format = tool_format
        """agent.tool_format: as given, then as saved (docs/tool-formats.md)."""
        self.model = model
        self.spec = spec
        """The sandbox the shell is made like (None: no sandbox, mode llm)."""
        self.rootfs_job = rootfs_job
        """The app's build of the recommended rootfs (None: not offered, e.g. mode llm)."""
        self.ports = ports
        """Where to look for model servers: (kind, loopback port) pairs."""
        self.found: dict[str, tuple[FoundServer, str]] = {}
        """Each offered choice by its option id: the server and one of its models."""

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="setup"):
            yield Label("Where is the model?", classes="title")
            yield Static("Looking for model servers on this machine…", id="found-text")
            yield OptionList(id="found")
            for name, label, hint in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label)
                    yield Input(str(getattr(self.model, name) or ""), placeholder=hint, id=name,
                                compact=True)
            with Horizontal(classes="field"):
                yield Label("Tool calls")
                yield Select([(f, f) for f in FORMATS], value=self.tool_format, allow_blank=False,
                             id="tool_format", compact=True)
            yield Static("", id="result")
            with Horizontal(classes="buttons"):
                yield Button("Test (ctrl+t)", id="test", variant="primary", compact=True)
                yield Button("Save (ctrl+s)", id="save", variant="success", compact=True)
                if self.spec is not None:
                    yield Button("Shell (ctrl+o)", id="shell", compact=True)
                yield Button("Later (esc)", id="later", compact=True)
            if self.rootfs_job is not None and self.spec is not None and self.rootfs_job.wanted():
                yield RootfsPanel(self.rootfs_job, id="rootfs")

    def on_mount(self) -> None:
        self.query_one("#found", OptionList).display = False
        self.look_for_servers()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        getattr(self, f"action_{event.button.id}")()

    def _typed(self) -> bool:
        return any(self.query_one(f"#{name}", Input).value != str(getattr(self.model, name) or "")
                   for name, _, _ in FIELDS)

    def entered(self) -> ModelConfig:
        values = {name: self.query_one(f"#{name}", Input).value.strip() for name, _, _ in FIELDS}
        return replace(self.model, **values)

    # -- servers found on this machine ------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="discover")
    def look_for_servers(self) -> None:
        found = find_servers(self.ports)
        self.app.call_from_thread(self._show_found, found)

    def _show_found(self, servers: list[FoundServer]) -> None:
        listing = self.query_one("#found", OptionList)
        options = []
        for server in servers:
            for model in server.models or ("",):
                key = str(len(options))  # by position: a server may list a name twice
                self.found[key] = (server, model)
                options.append(Option(plain(f"{server.kind} · {model or '(its default model)'}"
                                            f"   {server.base_url}"), id=key))
        if not options:
            ports = ", ".join(f"{kind} {port}" for kind, port in self.ports)
            self.query_one("#found-text", Static).update(Text(
                f"No model server found on this machine's usual ports ({ports}): enter one below.",
                style="dim"))
            return
        self.query_one("#found-text", Static).update(Text.assemble(
            ("Found on this machine", "bold"), " (Enter uses one and saves it):"))
        listing.add_options(options)
        listing.display = True
        listing.highlighted = 0
        if not self._typed():  # the list takes the keys, unless someone began to type
            listing.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        server, model = self.found[str(event.option.id)]
        self.query_one("#base_url", Input).value = server.base_url
        self.query_one("#model", Input).value = model
        self.action_save()

    def action_test(self) -> None:
        self.query_one("#result", Static).update("Asking the server for its models…")
        self.list_models(self.entered())

    @work(thread=True, exclusive=True, exit_on_error=False)
    def list_models(self, model: ModelConfig) -> None:
        from lis_tui.model.client import ModelClient  # noqa: PLC0415

        try:
            with ModelClient(replace(model, max_retries=0, timeout=15.0)) as client:
                text = Text.assemble(("✔ connected; models: ", "bold green"),
                                     plain(", ".join(client.list_models()) or "(none listed)"))
        except Exception as exc:  # any failure is the answer to show
            log.info("connection test failed", exc_info=True)
            where = model.api_key_env or "?"
            state = "set" if os.environ.get(where) else "not set"
            text = Text.assemble(("✘ ", "bold red"), plain(f"{exc} (the key is read from "
                                                           f"${where}, which is {state})"))
        self.app.call_from_thread(self.query_one("#result", Static).update, text)

    def action_save(self) -> None:
        model = self.entered()
        try:
            path = save_model_setup(base_url=model.base_url, model=model.model,
                                    api_key_env=model.api_key_env)
            chosen = str(self.query_one("#tool_format", Select).value)
            if chosen != self.tool_format:
                self.tool_format = chosen
                save_settings({"agent.tool_format": chosen}, path)
        except Exception as exc:  # an unwritable config file: say so and stay
            self.query_one("#result", Static).update(plain(f"✘ could not save: {exc}"))
            return
        notify_plain(self, f"Saved to {path}")
        self.dismiss(model)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "build":
            return bool(self.query("#rootfs"))
        return action != "shell" or self.spec is not None

    def action_build(self) -> None:
        """Build the recommended rootfs; the app runs it, so closing this screen does not stop it."""
        if self.rootfs_job is not None:
            self.app.build_rootfs()

    def action_shell(self) -> None:
        """A bash in a fresh sandbox on the real terminal; the app comes back when it exits."""
        from lis_tui.commands.sandbox import interactive_shell  # noqa: PLC0415

        # Not the session's own sandbox: a throw-away one, so a running task is never touched.
        spec = replace(self.spec, session=None)
        try:
            with self.app.suspend():  # which resumes only if no exception leaves the block
                print("lis-tui: a shell in a fresh sandbox; `exit` removes it and goes back.",
                      flush=True)
                try:
                    text = Text(f"The sandbox shell exited ({interactive_shell(spec)}); "
                                "that sandbox is gone.")
                except (Exception, KeyboardInterrupt) as exc:  # no sandbox: say so on the setup
                    log.warning("the sandbox shell failed", exc_info=True)
                    text = plain(f"✘ the sandbox shell failed: {exc} (`lis-tui doctor` says "
                                 "what to fix)")
        except SuspendNotSupported:
            text = Text("✘ this terminal cannot hand over to a shell; run `lis-tui shell` "
                        "in another one.")
        self.query_one("#result", Static).update(text)

    def action_later(self) -> None:
        self.dismiss(None)


def needs_setup(sources: dict[str, Any]) -> bool:
    """Nothing says where the model is: no file, variable or flag set its URL or name."""
    keys = ("model.base_url", "model.model")
    return all(sources.get(key, "default") == "default" for key in keys)
