"""A modal that asks on behalf of a waiting thread, and goes away if that thread stops waiting."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from textual.screen import ModalScreen


class QuestionScreen(ModalScreen[Any]):
    """Dismissed (with None) once `future` is done elsewhere: an interrupt, a timeout, a quit."""

    def __init__(self, future: Future | None = None) -> None:
        super().__init__()
        self.future = future

    def on_mount(self) -> None:
        if self.future is not None:
            self.set_interval(0.25, self._check_withdrawn)

    def _check_withdrawn(self) -> None:
        if self.future is not None and self.future.done() and self.is_current:
            self.dismiss(None)
