"""The prompt: a task, or a follow-up once the model has submitted; one line or many."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static, TextArea

from lis_tui.app.widgets.plain import plain

PLACEHOLDERS = {"task": "Type a task for the model and press Enter",
                "follow-up": "Type a follow-up (same sandbox, same conversation) and press Enter",
                "busy": "The model is working: type ahead, Enter queues it · Esc or Ctrl+C interrupts",
                "replay": "Replay of a saved run (Ctrl+Q quits)"}
NEW_LINE_KEYS = ("ctrl+j", "shift+enter")
"""Keys that add a line. Most terminals send Shift+Enter as Enter; Ctrl+J is a line feed in all."""


class PromptInput(TextArea, inherit_bindings=False):
    """Enter sends the text as it stands; Shift+Enter or Ctrl+J adds a line; a paste is kept
    whole. Past a third of the screen it scrolls (folded), and its border says how many lines
    it holds. Coming back to it (Tab, a click) keeps the draft and the cursor where they were."""

    # Its lines, up to a third of the screen: a long paste scrolls (folded) and leaves the
    # transcript in view. Here, not in main.tcss: Textual loads no CSS_PATH for an app's
    # default screen, so main.tcss is not applied today.
    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        max-height: 33%;
    }
    """
    # TextArea's own keys but F6 (select the line), which would shadow the main screen's F6
    # (review): ScrollView's, which TextArea's replace, page sideways (nothing here, it wraps).
    # Ctrl+U erases back to the start of the prompt, as a shell's does (the whole task when the
    # cursor is at its end, a paste's every line), not only the line the cursor is on.
    BINDINGS = [*(binding for binding in TextArea.BINDINGS
                  if binding.key not in ("f6", "ctrl+u,super+backspace")),
                Binding("ctrl+u", "delete_to_start", "Delete to start", show=False),
                Binding("super+backspace", "delete_to_start_of_line", "Delete to line start", show=False)]

    class Submitted(Message):
        """Enter was pressed: `text` is exactly what the prompt held."""

        def __init__(self, prompt: PromptInput, text: str) -> None:
            super().__init__()
            self.prompt, self.text = prompt, text

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, tab_behavior="focus", show_line_numbers=False,
                         highlight_cursor_line=False, **kwargs)

    def set_mode(self, mode: str) -> None:
        """What the placeholder says; a replay takes no text, a busy run takes it ahead."""
        self.placeholder = PLACEHOLDERS[mode]
        self.disabled = mode == "replay"
        self._fold_note()

    def action_delete_to_start(self) -> None:
        self.delete((0, 0), self.cursor_location, maintain_selection_offset=False)

    async def _on_key(self, event: events.Key) -> None:
        # prevent_default: TextArea's own handler (a newline for Enter) does not run after this
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
        elif event.key in NEW_LINE_KEYS:
            event.stop()
            event.prevent_default()
            self.replace("\n", *self.selection, maintain_selection_offset=False)

    async def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()
        self.take(event.text)

    def take(self, text: str) -> None:
        """Put typed or pasted text in at the cursor (over a selection). Terminals send a pasted
        line break as CR (tmux, xterm): it is the text's own newline."""
        if not self.read_only and not self.disabled:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            self.replace(text, *self.selection, maintain_selection_offset=False)

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self._fold_note()
        self.refresh(layout=True)  # its height follows its lines (up to a third of the screen)

    def _fold_note(self) -> None:
        lines = self.document.line_count
        self.border_subtitle = (f"{lines} lines · Enter sends" if lines > 1 and not self.disabled
                                else "")


class QueuedNote(Static):
    """A follow-up typed ahead and queued with Enter while a task runs, on one line over the
    prompt until the task ends; then taken: sent, or put back into the prompt."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = ""
        """What was queued ("" for nothing); a second Enter adds a line to it."""

    def add(self, text: str) -> None:
        self.text = f"{self.text}\n{text}" if self.text else text
        lines = self.text.splitlines() or [""]
        more = f" (+{len(lines) - 1} more line{'s' * (len(lines) > 2)})" if len(lines) > 1 else ""
        self.update(Text.assemble(("⏎ Queued: ", "bold"), plain(lines[0]), more,
                                  ("  sent when this task ends (an interrupt puts it back here)", "dim"),
                                  no_wrap=True, overflow="ellipsis"))
        self.display = True

    def take(self) -> str:
        """What was queued, now no longer."""
        text, self.text = self.text, ""
        self.display = False
        return text
