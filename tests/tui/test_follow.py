"""The transcript follows new output (issue 36 item 6): a person who scrolled up a moment ago
keeps their place, and once that moment has passed, or when a block grew outside an event (a
command waiting for approval, Markdown drawn late), the newest output is in view. The real
Transcript in a Pilot-driven app; the clock is the hold's length, set to 0 for "it has passed"."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.widgets import Static

from lis_tui.agent import events as ev
from lis_tui.app.widgets import transcript as transcript_module
from lis_tui.app.widgets.transcript import Transcript


class TranscriptOnly(App):
    def compose(self) -> ComposeResult:
        yield Transcript()


def test_held_while_scrolled_up_a_moment_ago_then_follows_also_what_grew_outside_events(
        monkeypatch):
    async def scenario():
        app = TranscriptOnly()
        async with app.run_test(size=(80, 24)) as pilot:
            transcript = app.query_one(Transcript)
            transcript.focus()
            for step in range(1, 30):
                transcript.show(ev.StepStarted(step))
            await pilot.pause()
            at_end = transcript.is_vertical_scroll_end

            await pilot.press("pageup")  # the person scrolls up to read
            await pilot.pause()
            place = transcript.scroll_y
            transcript.show(ev.StepStarted(30))
            await pilot.pause()
            kept = transcript.scroll_y == place and not transcript.is_vertical_scroll_end

            monkeypatch.setattr(transcript_module, "HOLD_SECONDS", 0.0, raising=False)  # passed
            transcript.show(ev.StepStarted(31))
            await pilot.pause()
            followed = transcript.is_vertical_scroll_end

            transcript.query(Static).last().update("grown\n" * 10)  # no event: a block grew
            await pilot.pause()
            return at_end, kept, followed, transcript.is_vertical_scroll_end

    assert asyncio.run(scenario()) == (True, True, True, True)
