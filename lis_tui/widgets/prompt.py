"""The prompt: a task, or a follow-up once the model has submitted."""

from __future__ import annotations

from textual.widgets import Input

PLACEHOLDERS = {"task": "Type a task for the model and press Enter",
                "follow-up": "Type a follow-up (same sandbox, same conversation) and press Enter",
                "busy": "The model is working (Esc interrupts)",
                "replay": "Replay of a saved run (Ctrl+Q quits)"}


class PromptInput(Input):
    """An Input whose placeholder says what Enter will do. Coming back to it (Tab, a click)
    keeps the draft as it was, cursor at its end: nothing is selected for the next key to replace."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("select_on_focus", False)
        super().__init__(*args, **kwargs)

    def set_mode(self, mode: str) -> None:
        self.placeholder = PLACEHOLDERS[mode]
        self.disabled = mode in ("busy", "replay")
