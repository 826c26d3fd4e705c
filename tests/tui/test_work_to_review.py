"""After a task that changed the workspace, the app says there are changes to review (F6), and
ctrl+q with changes not applied asks first, saying where they are kept (`lis-tui apply RUN`)."""

from __future__ import annotations

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from test_app import bash, run, texts, wait_for
from test_review import EDIT, app_for, open_review, workspace


@pytest.mark.sandbox
def test_changes_left_to_review_are_said_and_quitting_with_them_says_where_they_are_kept(tmp_path):
    ws = workspace(tmp_path)

    def said(app) -> list[str]:
        return [text for text in texts(app, "NoticeBlock") if "to review (F6)" in text]

    async def scenario():
        with FakeOpenAI([reply(tool_calls=[bash(EDIT)]), submit()]) as server:
            app = app_for(server, tmp_path, ws)
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: said(app))
                await pilot.press("ctrl+q")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
                asked = " ".join(" ".join(texts(app, "ConfirmScreen Label")).split())  # as one line, unwrapped
                await pilot.press("n")  # stay
                await open_review(pilot, app)
                await pilot.press("a")  # apply all: nothing is left
                await wait_for(pilot, lambda: "Applied" in texts(app, "#notice")[0])
                await pilot.press("escape")
                await pilot.press("ctrl+q")
                await wait_for(pilot, lambda: not app.is_running)
                return said(app)[0], asked

    notice, asked = run(scenario())
    out = tmp_path / "out"
    assert "2 changes to your project to review (F6)" in notice and f"{out}/changes.patch" in notice
    assert f"2 changes to {ws} are not applied" in asked and f"kept in {out}/changes.patch" in asked, asked
    assert "lis-tui apply out" in asked
    assert (ws / "a.txt").read_text() == "new\n"
