"""The files panel: what is in /testbed (the output first, then the project's own files, then the
tooling folders, named but not walked), and a preview of the one selected. Names and contents are
the sandbox's: shown through `plain`, never as markup."""

from __future__ import annotations

import logging
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from isolation.spec import places_of
from lis_tui.app.widgets.plain import PathLine, plain

log = logging.getLogger(__name__)


class FilesScreen(ModalScreen[None]):
    """Up/Down choose a file, Enter previews it, Esc closes; the list is read off the UI thread."""

    CSS_PATH = "files.tcss"
    BINDINGS = [Binding("escape,f5", "app.pop_screen", "Close"), Binding("r", "reload", "Reload")]

    def __init__(self, conversation: Any) -> None:
        super().__init__()
        self.conversation = conversation

    def compose(self) -> ComposeResult:
        yield Label("Files in the sandbox  (Enter: preview · r: reload · Esc: close)",
                    classes="title")
        with Horizontal():
            yield OptionList(id="file-list")
            with VerticalScroll(id="preview-box"):
                yield Static("", id="preview")

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.load_list()

    @work(thread=True, exclusive=True, exit_on_error=False, group="files")
    def load_list(self) -> None:
        try:
            files = self.conversation.list_files()
        except Exception as exc:  # the sandbox went away: say so in the panel
            log.info("listing files failed", exc_info=True)
            self.app.call_from_thread(self._show_preview, f"Could not list the files: {exc}")
            return
        self.app.call_from_thread(self._show_list, files)

    def _show_list(self, files: list[str]) -> None:
        output = f"{places_of(self.conversation.spec).output}/"
        folders = [f for f in files if f.endswith("/")]  # tooling (Conversation.list_files): last
        files = [f for f in files if not f.endswith("/")]
        ordered = ([f for f in files if f.startswith(output)] + [f for f in files if not f.startswith(output)]
                   + folders)
        listing = self.query_one(OptionList)
        listing.clear_options()
        listing.add_options([Option(PathLine(path), id=path) for path in ordered])
        if ordered:
            listing.highlighted = 0
        else:
            self._show_preview(empty_text(self.conversation))
        listing.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        path = str(event.option.id)
        if path.endswith("/"):
            self._show_preview(f"A tool's folder (git, a virtual environment, packages, caches): not listed "
                               "here. The model's changes in it are in the review (F6).", path)
        else:
            self.load_preview(path)

    @work(thread=True, exclusive=True, exit_on_error=False, group="preview")
    def load_preview(self, path: str) -> None:
        try:
            text = self.conversation.read_text(path)
        except Exception as exc:  # gone, unreadable: the preview says so
            text = f"Could not read {path}: {exc}"
        self.app.call_from_thread(self._show_preview, text, path)

    def _show_preview(self, text: str, path: str = "") -> None:
        title = plain(f"{path}\n", style="bold") if path else Text()
        self.query_one("#preview", Static).update(title + plain(text))


def empty_text(conversation: Any) -> str:
    """Why the list is empty: no sandbox yet, none any more, or nothing written so far."""
    if conversation.spec is None:
        return "No sandbox: in mode llm the model only answers in words."
    if conversation.sandbox is not None:
        return "/testbed is empty so far: files the model writes show here (r reloads)."
    if getattr(conversation, "state", "idle") == "starting":
        return "The sandbox is starting: r reloads once it runs."
    if conversation.out is None:
        return "No files yet: the sandbox starts with the first task."
    return "The sandbox is not running (it failed to start, or was closed): no files to show."
