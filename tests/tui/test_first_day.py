"""What a new user met on the first day (issue 27): the model's words shown as written, the
rootfs offer telling the truth, keys and focus. Pilot against the scripted model server, a real
sandbox and a real rootfs store."""

from __future__ import annotations

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from lis_tui.app import create_app
from lis_tui.replay import load_trajectory
from lis_tui.widgets.blocks import AnswerBlock

from test_app import app_for, bash, run, wait_for
from test_hostile import on_screen

WRITTEN = "a &lt; b, <b>bold?</b> and \\(x^2\\) with **strong** words"


@pytest.mark.sandbox
def test_the_model_s_words_are_shown_as_written_live_and_in_replay(tmp_path):
    script = [reply(WRITTEN, [bash("true")]), submit()]

    async def live():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="Say it.")
            async with app.run_test(size=(120, 40)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock)
                               and app.screen.query(".model-markdown"))
                await pilot.pause(0.3)
                return on_screen(app)

    async def replayed():
        app = create_app(replay=load_trajectory(tmp_path / "out"))
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.screen.query(".model-markdown"))
            await pilot.pause(0.3)
            return on_screen(app)

    for shown in (run(live()), run(replayed())):
        assert "a &lt; b, <b>bold?</b> and \\(x^2\\) with strong words" in shown, shown
        assert "**" not in shown  # Markdown itself still works
