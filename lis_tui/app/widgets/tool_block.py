"""One tool call in the transcript: what was asked, a spinner and the last lines printed so far
while it runs, then the output, the exit code and the duration. The call and its output are the
model's and the sandbox's: shown through `plain` / `safe_terminal_text`, never as markup."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from lis_tui.app.widgets.plain import as_printed, plain
from tools.terminal_text import safe_terminal_text

CLIP_LINES = 12
LINE_SHOWN = 1000  # characters of one line of a running command's output kept for the view
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class OutputView(Static):
    """Tool output, clipped to its last lines; a click (or `e` in the transcript) shows all of
    it. Not a Tab stop: Tab goes between the prompt and the transcript, however long the run."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.output, self.expanded = text, False

    def on_mount(self) -> None:
        self._draw()

    def action_toggle(self) -> None:
        self.show_all(not self.expanded)

    def show_all(self, expanded: bool) -> None:
        self.expanded = expanded
        self._draw()

    def on_click(self) -> None:
        self.action_toggle()

    @property
    def clipped(self) -> bool:
        return not self.expanded and len(self.output.splitlines()) > CLIP_LINES

    def _draw(self) -> None:
        lines = self.output.splitlines()
        if self.expanded or len(lines) <= CLIP_LINES:
            self.update(as_printed(self.output))
            return
        hidden = len(lines) - CLIP_LINES
        self.update(Text.assemble((f"… {hidden} more lines (a click or e expands)\n", "italic"),
                                  as_printed("\n".join(lines[-CLIP_LINES:]))))


class ToolBlock(Vertical):
    """A tool call: its header (the command or the edit), then its result once it finishes."""

    def __init__(self, name: str, arguments: dict | None, raw: str) -> None:
        super().__init__(classes="tool")
        self.tool_name, self.arguments, self.raw = name, arguments or {}, raw
        self.record: Any = None
        self._started = time.monotonic()
        self._frame = 0
        self._paused: str | None = None
        self._ready = False
        self._tail: list[str] = []
        """The last CLIP_LINES lines a running command printed (only these are kept)."""
        self._lines = 0
        """How many lines it printed so far."""

    def compose(self):
        yield Static(call_header(self.tool_name, self.arguments, self.raw), classes="tool-header")
        yield Static("", classes="tool-live")
        yield Static("", classes="tool-status")

    def on_mount(self) -> None:
        self._ready = True
        self._timer = self.set_interval(0.1, self._draw)
        self._draw_live()
        self._draw()

    def waiting(self, text: str) -> None:
        """Shown instead of the spinner while the command waits for a person's approval."""
        self._paused = text
        self._draw()

    def add_output(self, text: str, seconds: float, skipped: int = 0) -> None:
        """More output of the running command (complete lines, cleaned as the final output is),
        `skipped` lines before it left out."""
        lines = text.splitlines()
        self._lines += len(lines) + skipped
        self._tail = [line[:LINE_SHOWN] for line in (self._tail + lines[-CLIP_LINES:])[-CLIP_LINES:]]
        self._started = time.monotonic() - seconds  # the shell's clock: approval waits excluded
        self._draw_live()

    def _draw_live(self) -> None:
        if self._ready and self.record is None:
            live = self.query_one(".tool-live", Static)
            live.display = bool(self._tail)
            live.update(live_text(self._tail, self._lines))

    def resume(self) -> None:
        self._started, self._paused = time.monotonic(), None
        self._draw()

    def finish(self, record: Any) -> None:
        """Show the ToolRecord: output (not for submit), exit code, duration, approval."""
        self.record = record
        if self._ready:
            self._show_record()

    def _draw(self) -> None:
        if not self._ready:
            return  # on_mount draws
        if self.record is not None:
            self._show_record()
            return
        self._frame += 1
        elapsed = time.monotonic() - self._started
        self.query_one(".tool-status", Static).update(
            self._paused or f"{SPINNER[self._frame % len(SPINNER)]} running {elapsed:.0f}s")

    def _show_record(self) -> None:
        self._timer.stop()
        record, status = self.record, self.query_one(".tool-status", Static)
        if status.has_class("done"):
            return
        status.add_class("done")
        self.query(".tool-live").remove()
        status.update(result_line(record))
        self.set_class(bool(record.error or record.exit_code not in (None, 0)), "failed")
        if record.approval == "edited":
            self.mount(Static(plain(f"edited by you: {record.arguments}"), classes="tool-note"),
                       before=status)
        if record.output and (record.name != "submit" or record.error):
            self.mount(OutputView(record.output), before=status)


def live_text(tail: list[str], lines: int) -> Text:
    """A running command's last lines, with how many came before them."""
    hidden = lines - len(tail)
    note = [(f"… {hidden:,} earlier lines (all of it shows when it ends)\n", "italic")] if hidden else []
    return Text.assemble(*note, as_printed("\n".join(tail)))


def call_header(name: str, args: dict, raw: str) -> Any:
    """The command highlighted as bash, an edit as a diff or a file, or the raw arguments."""
    from rich.syntax import Syntax  # noqa: PLC0415 (pygments: the first screen has no command)

    if name == "execute_bash" and isinstance(args.get("command"), str):
        return Group(Text("$ execute_bash", style="bold"),
                     Syntax(safe_terminal_text(args["command"]), "bash", theme="ansi_dark",
                            word_wrap=True))
    if name == "str_replace_editor":
        return editor_header(args)
    if name == "submit":
        return Text("✔ submit", style="bold")
    return Text.assemble(plain(f"{name} ", "bold"), plain(raw))


def editor_header(args: dict) -> Any:
    title = plain(f"✎ {args.get('command', '?')} {args.get('path', '?')}", style="bold")
    if args.get("command") == "create" and isinstance(args.get("file_text"), str):
        return Group(title, plain(_clip(args["file_text"])))
    if args.get("command") in ("str_replace", "insert"):
        old = [f"-{line}" for line in str(args.get("old_str") or "").splitlines()]
        new = [f"+{line}" for line in str(args.get("new_str") or "").splitlines()]
        from rich.syntax import Syntax  # noqa: PLC0415 (as in call_header)

        return Group(title, Syntax(safe_terminal_text(_clip("\n".join(old + new))), "diff",
                                   theme="ansi_dark"))
    return title


def result_line(record: Any) -> Text:
    """`exit 0 · 0.12s`, `skipped by you`, `error · 0.01s`, `timed out`."""
    if record.approval == "skipped":
        return Text("⏭ skipped by you", style="italic")
    if record.name == "submit" and not record.error:
        return Text("submitted")
    code = "error" if record.error and record.exit_code is None else f"exit {record.exit_code}" \
        if record.exit_code is not None else "done"
    extra = " · timed out" if record.timed_out else ""
    extra += " · output clipped for the model" if record.truncated else ""
    style = "bold red" if record.error or record.exit_code not in (None, 0) else "green"
    return Text.assemble((code, style), f" · {record.duration:.2f}s{extra}")


def _clip(text: str, lines: int = 30) -> str:
    rows = text.splitlines()
    if len(rows) <= lines:
        return text
    return "\n".join(rows[:lines]) + f"\n… {len(rows) - lines} more lines"
