"""A yes-or-no question: quit while a task runs, apply a link that leaves the workspace."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from lis_tui.app.widgets.plain import plain


class ConfirmScreen(ModalScreen[bool]):
    """Ctrl+Y answers yes, n or Esc no (the default button). No letter says yes: one typed as
    text (a "y" in "yes, and...") must not quit or write anything."""

    CSS_PATH = "approve.tcss"
    BINDINGS = [Binding("ctrl+y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str, no: str) -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(plain(self.question), classes="title")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} ^Y", id="yes", variant="error")
                yield Button(f"{self.no} (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
