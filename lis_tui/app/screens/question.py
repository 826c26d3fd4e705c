"""A modal that asks on behalf of a waiting thread, and goes away if that thread stops waiting."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

from textual.message import Message
from textual.screen import ModalScreen

log = logging.getLogger(__name__)


class QuestionScreen(ModalScreen[Any]):
    """Dismissed (with None) once `future` is done elsewhere: an interrupt, a timeout, a quit, a
    withdrawn question. Looked at when the future is done (from whichever thread did it) and
    whenever this screen is on top again (a dialog over it closed), not on a clock."""

    class Done(Message):
        """The future is done: answered here, or withdrawn."""

    def __init__(self, future: Future | None = None) -> None:
        super().__init__()
        self.future = future

    def on_mount(self) -> None:
        if self.future is not None:  # called at once if it is already done
            self.future.add_done_callback(lambda _future: self.post_message(self.Done()))

    def on_question_screen_done(self, _message: Done) -> None:
        self._close_if_withdrawn()

    def on_screen_resume(self) -> None:
        self._close_if_withdrawn()

    def _close_if_withdrawn(self) -> None:
        if self.future is None or not self.future.done():
            return
        if self.is_active:  # on top (is_current is also true under a modal: pop_screen pops the top)
            self.dismiss(None)
        elif self in self.app.screen_stack:  # under another dialog: it goes when on top again (ScreenResume)
            log.debug("%s: its question ended under %s", type(self).__name__, self.app.screen)
