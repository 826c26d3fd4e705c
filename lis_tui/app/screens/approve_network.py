"""The sandbox asks for a host: Allow once / Allow for this session / Always allow / Deny; and,
when an allowed host resolves to a private or internal address, about that address.

The dialog opens while the person may be typing (a follow-up, a sentence elsewhere): no letter
answers it, no button has the focus at first (Enter answers only on a button Tab moved to), and
no key that comes in its first half second (question.GRACE_S) answers it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Static

from lis_tui.app.screens.question import QuestionScreen
from lis_tui.app.widgets.plain import plain

# Once and this session are for the host and port shown; always is for the host, every port
# (saved to the config's allow list). Ctrl keys that no text field edits with: Ctrl+A, Ctrl+D,
# Ctrl+E, Ctrl+K, Ctrl+U, Ctrl+W move and delete in the prompt, and a habit must not save a host.
CHOICES = (("allow_once", "Allow once ^O", "ctrl+o"), ("allow_session", "This session ^S", "ctrl+s"),
           ("allow_always", "Always ^T", "ctrl+t"), ("deny", "Deny Esc", "escape"))
ADDRESS_CHOICES = tuple(c for c in CHOICES if c[0] != "allow_always")
"""An address is allowed for this host and port, once or for the session; never saved."""


class NetworkApprovalScreen(QuestionScreen):
    """Answers with an isolation.net Answer: one of its ANSWERS and who gave it (Esc denies)."""

    CSS_PATH = "approve.tcss"
    AUTO_FOCUS = ""  # no button: an Enter that ends a sentence typed elsewhere must not press one
    BINDINGS = [*(Binding(key, f"answer('{answer}')", label.rsplit(" ", 1)[0])
                  for answer, label, key in CHOICES if key != "escape"),
                Binding("escape", "answer('deny', 'escape')", "Deny", show=False)]

    def __init__(self, request: Any, command: str = "", future: Future | None = None) -> None:
        super().__init__(future)
        self.request, self.command = request, command

    def compose(self) -> ComposeResult:
        r = self.request
        address = getattr(r, "address", "")
        with Vertical(id="dialog"):
            if address:
                yield Label("The host is at a private address", classes="title")
                # The sandbox chose the host; the DNS answer may be the model's too (rebinding).
                yield Static(plain(r.question))
            else:
                yield Label("The sandbox wants the network", classes="title")
                # The sandbox chose the host (and the method); the model wrote the command.
                yield Static(Text.assemble(("host  ", "bold"),
                                           plain(f"{r.host}:{r.port}  ({r.method})")))
            if self.command:
                yield Static(Text.assemble(("while running  ", "bold"),
                                           plain(_one_line(self.command))))
            yield Static(Text("once, this session: this host and port at this address only; "
                              "nothing is saved" if address else
                              "once, this session: this host and port; always: this host, any port, "
                              "saved to your config", style="dim"))
            with Horizontal(classes="buttons"):
                for answer, label, _key in ADDRESS_CHOICES if address else CHOICES:
                    yield Button(label, id=answer,
                                 variant="error" if answer == "deny" else "success")
            yield Static("", id="typed")

    def on_key(self, event: events.Key) -> None:
        # Every key reaches the screen before the bindings (the app checks them once it bubbled
        # up): text, or one stamped before the grace ended, goes no further (Enter on a button too)
        if event.is_printable:  # someone typing, or used to the old letter keys: say what answers
            self.query_one("#typed", Static).update(Text(
                f'"{event.character}" typed here answers nothing: the keys are on the buttons '
                "(or Tab to one, then Enter)", style="dim"))
        if event.is_printable or not self._answers_at(event.time):
            event.stop()
            event.prevent_default()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if self._answers_at(event.time):  # a click too: the one meant for what was there before
            self._answer(str(event.button.id), "user")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # An address is never saved: no "always" for it
        return not (parameters[:1] == ("allow_always",) and getattr(self.request, "address", ""))

    def action_answer(self, answer: str, by: str = "user") -> None:
        self._answer(answer, by)

    def _answer(self, answer: str, by: str) -> None:
        from isolation.net import Answer  # noqa: PLC0415 (loaded by now: the proxy asked)

        self.dismiss(Answer(answer, by))


def _one_line(command: str, width: int = 120) -> str:
    text = " ".join(command.split())
    return text if len(text) <= width else text[: width - 1] + "…"
