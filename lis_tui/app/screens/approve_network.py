"""The sandbox asks for a host: Allow once / Allow for this session / Always allow / Deny; and,
when an allowed host resolves to a private or internal address, about that address."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Static

from lis_tui.app.screens.question import QuestionScreen
from lis_tui.app.widgets.plain import plain

# Once and this session are for the host and port shown; always is for the host, every port
# (saved to the config's allow list).
CHOICES = (("allow_once", "Allow once (o)", "o"), ("allow_session", "This session (s)", "s"),
           ("allow_always", "Always (a)", "a"), ("deny", "Deny (d)", "d"))
ADDRESS_CHOICES = tuple(c for c in CHOICES if c[0] != "allow_always")
"""An address is allowed for this host and port, once or for the session; never saved."""


class NetworkApprovalScreen(QuestionScreen):
    """Answers with one of isolation.net.ANSWERS; Esc denies."""

    CSS_PATH = "approve.tcss"
    BINDINGS = [*(Binding(key, f"answer('{answer}')", label.split(" (")[0])
                  for answer, label, key in CHOICES),
                Binding("escape", "answer('deny')", "Deny", show=False)]

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

    def on_mount(self) -> None:  # QuestionScreen's on_mount runs too: Textual calls each class's
        self.query_one("#allow_once", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # An address is never saved: no "always" for it
        return not (parameters == ("allow_always",) and getattr(self.request, "address", ""))

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)


def _one_line(command: str, width: int = 120) -> str:
    text = " ".join(command.split())
    return text if len(text) <= width else text[: width - 1] + "…"
