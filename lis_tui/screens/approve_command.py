"""Before a command runs: Run it, Edit it first, or Skip it (with a reason the model reads).

The command is shown with its control characters as visible escapes: Run unchanged runs the
model's command as it came; an edit runs exactly the text the person sees and leaves.
"""

from __future__ import annotations

from concurrent.futures import Future

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, TextArea

from lis_tui.events import Edit, Run, Skip
from lis_tui.screens.question import QuestionScreen
from tools.terminal_text import safe_terminal_text


class CommandApprovalScreen(QuestionScreen):
    """Keys: r Run (the text as it stands), e Edit (focus the command), s or Esc Skip."""

    CSS_PATH = "approve.tcss"
    BINDINGS = [Binding("r", "key('run')", "Run"), Binding("e", "key('edit')", "Edit"),
                Binding("s", "key('skip')", "Skip"), Binding("escape", "skip", "Skip", show=False)]

    def __init__(self, command: str, future: Future | None = None) -> None:
        super().__init__(future)
        self.command = command
        self.shown = safe_terminal_text(command)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("The model wants to run this command:", classes="title")
            yield TextArea(self.shown, id="command", soft_wrap=True, show_line_numbers=False)
            yield Input(placeholder="Reason to skip (optional; the model is told)", id="reason")
            with Horizontal(classes="buttons"):
                yield Button("Run (r)", id="run", variant="success")
                yield Button("Edit (e)", id="edit", variant="primary")
                yield Button("Skip (s)", id="skip", variant="error")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#run", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        getattr(self, f"action_{event.button.id}")()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_skip()

    def action_key(self, action: str) -> None:
        # Letters type into the command and the reason; they are shortcuts only elsewhere.
        if not isinstance(self.focused, (TextArea, Input)):
            getattr(self, f"action_{action}")()

    def action_run(self) -> None:
        text = self.query_one("#command", TextArea).text
        self.dismiss(Run() if text == self.shown else Edit(text))

    def action_edit(self) -> None:
        self.query_one("#command", TextArea).focus()

    def action_skip(self) -> None:
        self.dismiss(Skip(self.query_one("#reason", Input).value.strip()))
