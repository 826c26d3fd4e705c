"""Before a command runs: Run it, Edit it first, or Skip it (with a reason the model reads).

The command is shown with its control characters as visible escapes: Run unchanged runs the
model's command as it came; an edit runs exactly the text the person sees and leaves.

It opens while the person may be typing ahead in the prompt: what they type goes into the reason
(text), and no Enter, Esc or Ctrl+R in its first half second (question.GRACE_S) answers it.
"""

from __future__ import annotations

from concurrent.futures import Future

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, TextArea

from lis_tui.agent.events import Edit, Run, Skip
from lis_tui.app.screens.question import QuestionScreen
from tools.terminal_text import safe_terminal_text


ANSWER_KEYS = ("enter", "escape", "ctrl+r")
"""The keys that answer (Enter: in the reason, or on a button); F2 (Edit) answers nothing."""


class CommandApprovalScreen(QuestionScreen):
    """Ctrl+R Run (the text as it stands), F2 Edit (the cursor at the command's end), Esc Skip;
    Enter in the reason skips with it. The reason has the keys at first, so what a person types
    is text: the letters r, e, s act only while a button has the focus."""

    CSS_PATH = "approve.tcss"
    # Not a button: a letter typed as the dialog opens (or meant as a reason) must not act.
    # AUTO_FOCUS, not a focus() in on_mount: it is set before any key that came after the dialog
    # opened, and never takes the focus back from where F2 (Edit) put it.
    AUTO_FOCUS = "#reason"
    BINDINGS = [Binding("ctrl+r", "run", "Run"), Binding("f2", "edit", "Edit"),
                Binding("escape", "skip", "Skip"),
                Binding("r", "key('run')", show=False), Binding("e", "key('edit')", show=False),
                Binding("s", "key('skip')", show=False)]

    def __init__(self, command: str, future: Future | None = None) -> None:
        super().__init__(future)
        self.command = command
        self.shown = safe_terminal_text(command)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("The model wants to run this command:", classes="title")
            yield TextArea(self.shown, id="command", soft_wrap=True, show_line_numbers=False)
            yield Input(placeholder="Reason to skip (optional; the model is told); Enter skips",
                        id="reason")
            with Horizontal(classes="buttons"):
                yield Button("Run ^R", id="run", variant="success")
                yield Button("Edit F2", id="edit", variant="primary")
                yield Button("Skip Esc", id="skip", variant="error")

    def on_key(self, event: events.Key) -> None:
        # Every key reaches the screen before the bindings (the reason's Enter, Esc, Ctrl+R: the
        # app checks them once the key bubbled up); in the grace they go no further, nor does a
        # key on a button (r, e, s). Text is typed by the fields themselves, before this.
        answers = event.key in ANSWER_KEYS or isinstance(self.focused, Button)
        if answers and not self._answers_at(event.time):
            event.stop()
            event.prevent_default()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if self._answers_at(event.time):  # a click too: the one meant for what was there before
            getattr(self, f"action_{event.button.id}")()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_skip()

    def action_key(self, action: str) -> None:
        # Letters type into the command and the reason; they are shortcuts only on a button
        # (with no focus yet, a letter is text that came early: it does nothing).
        if isinstance(self.focused, Button):
            getattr(self, f"action_{action}")()

    def action_run(self) -> None:
        text = self.query_one("#command", TextArea).text
        self.dismiss(Run() if text == self.shown else Edit(text))

    def action_edit(self) -> None:
        # At the end: an edit most often adds to the command (a flag, `| head`), and a cursor
        # at its start made the first key typed go before it.
        command = self.query_one("#command", TextArea)
        command.focus()
        command.move_cursor(command.document.end)
        self.query_one(".title", Label).update("Edit the command; Ctrl+R runs it as it stands:")

    def action_skip(self) -> None:
        self.dismiss(Skip(self.query_one("#reason", Input).value.strip()))
