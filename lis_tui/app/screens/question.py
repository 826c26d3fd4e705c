"""A modal that asks on behalf of a waiting thread, and goes away if that thread stops waiting.

It opens while the person may be typing (a follow-up typed ahead, a sentence elsewhere): no key
that comes in its first moments (GRACE_S) answers it."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

from textual.message import Message
from textual.screen import ModalScreen

log = logging.getLogger(__name__)
GRACE_S = 0.5
"""Keys that come this soon after the dialog is drawn (or is on top again) answer nothing: they
were typed before the person could read it, such as the Enter ending a sentence or an Esc meant
to stop the step."""


class QuestionScreen(ModalScreen[Any]):
    """Dismissed (with None) once `future` is done elsewhere: an interrupt, a timeout, a quit, a
    withdrawn question. Looked at when the future is done (from whichever thread did it) and
    whenever this screen is on top again (a dialog over it closed), not on a clock.

    Subclasses let a key or a click answer only when `_answers_at(event.time)`: past the grace."""

    class Done(Message):
        """The future is done: answered here, or withdrawn."""

    def __init__(self, future: Future | None = None) -> None:
        super().__init__()
        self.future = future
        self.drawn_at: float | None = None
        """When the dialog was last drawn on top (time.monotonic, as Textual stamps events)."""

    def on_mount(self) -> None:
        if self.future is not None:  # called at once if it is already done
            self.future.add_done_callback(lambda _future: self.post_message(self.Done()))

    def on_question_screen_done(self, _message: Done) -> None:
        self._close_if_withdrawn()

    def on_screen_resume(self) -> None:
        # The first time (pushed), and again when a dialog over this one closed: keys meant for
        # that one (a second Ctrl+O) must not answer this one
        self.drawn_at = None
        self.call_after_refresh(self._drawn)
        self._close_if_withdrawn()

    def _drawn(self) -> None:
        self.drawn_at = time.monotonic()

    @property
    def takes_answers(self) -> bool:
        """Its grace is over: a key pressed from now on may answer it."""
        return self._answers_at(time.monotonic())

    def _answers_at(self, when: float) -> bool:
        return self.drawn_at is not None and when >= self.drawn_at + GRACE_S

    def _close_if_withdrawn(self) -> None:
        if self.future is None or not self.future.done():
            return
        if self.is_active:  # on top (is_current is also true under a modal: pop_screen pops the top)
            self.dismiss(None)
        elif self in self.app.screen_stack:  # under another dialog: it goes when on top again (ScreenResume)
            log.debug("%s: its question ended under %s", type(self).__name__, self.app.screen)
