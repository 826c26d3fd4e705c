"""Every key, in one place."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from lis_tui.app.widgets.plain import plain

KEYS = (
    ("Enter", "start the task typed in the prompt, or send a follow-up after submit; while the "
              "model works, queue it (typed ahead): it is sent when the task ends"),
    ("Ctrl+J", "a new line in the prompt (Shift+Enter too, where the terminal tells them "
               "apart); a paste is kept whole, every line"),
    ("Ctrl+U", "erase the prompt back to its start, every line (as in a shell)"),
    ("Esc", "interrupt the current step (stops the model call or sends the command SIGINT)"),
    ("Ctrl+C", "interrupt, as Esc; a second Ctrl+C at once, or one between tasks, quits as Ctrl+Q"),
    ("F2", "network mode: OFF → ASK → ON (live for the running sandbox)"),
    ("F3", "command approvals on/off: Run / Edit / Skip before each command"),
    ("F4", "the model (servers found on this machine, or a URL), and the recommended rootfs"),
    ("F5", "files panel: /testbed (output first, tool folders such as .git/ last) with a preview"),
    ("F6", "review the sandbox's changes: a diff per file; a Apply all / f the file to the host "
           "workspace · e Export the output folder · r reloads · Esc closes it (the changes are kept)"),
    ("F8", "compact the conversation before the next model call: its older steps become a summary "
           "(it happens by itself at the context limit; the record keeps every message)"),
    ("Ctrl+N", "after a rootfs was built while a session ran: a new session on it"),
    ("F1", "this help"),
    ("Tab", "move between the transcript and the prompt"),
    ("Ctrl+O", "expand every command's output, or clip it again (a click: one; e too in a "
               "replay); what is typed in the transcript goes to the prompt"),
    ("Ctrl+Q", "quit (asks first while a task runs, or with changes not applied; Ctrl+Q or Ctrl+C "
               "again quits)"),
    ("Command approval", "Ctrl+R Run · F2 Edit (cursor at the end) · Esc Skip, or type a "
                         "reason, Enter · r e s act only on a button; no key answers in its first half second"),
    ("Model setup", "ctrl+t Test the connection · ctrl+s Save · ctrl+b Build the rootfs · "
                           "ctrl+o a shell in a fresh sandbox (exit comes back) · Esc Later"),
    ("Network approval", "Ctrl+O Allow once · Ctrl+S this session · Ctrl+T Always (saved) · Esc Deny, "
                         "or Tab to a button, Enter; no letter answers, nor a key in its first half second"),
)


class HelpScreen(ModalScreen[None]):
    """The key list, and where this run and the log are; Esc, q or F1 closes it. The title and
    the closing hint stay in view (docked) while the list scrolls on a short terminal."""

    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,q,f1", "app.pop_screen", "Close")]

    def __init__(self, places: list[tuple[str, str]] | None = None) -> None:
        super().__init__()
        self.places = places or []
        """(what, path) pairs: this run's directory, the log."""

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True, max_width=16)
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        if self.places:
            table.add_row("", "")
        for what, path in self.places:
            table.add_row(what, plain(path))
        with VerticalScroll(id="help"):
            yield Label("lis-tui keys   (Esc closes this help; ↑↓ scroll)", classes="title")
            yield Static(table, id="help-keys")
            yield Label("Esc, q or F1 closes this help", classes="hint")
