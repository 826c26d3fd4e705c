"""F8 compacts the conversation on demand: between tasks, the follow-up's first model call is sent
compacted, the transcript says so, and the replay of the saved run shows it again."""

from __future__ import annotations

import json

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from lis_tui.agent.compaction import START
from lis_tui.app.tui import create_app
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
from lis_tui.app.widgets.prompt import PromptInput
from lis_tui.runs.replay import load_trajectory
from test_app import SIZE, app_for, bash, run, texts, wait_for


@pytest.mark.sandbox
def test_f8_compacts_before_the_next_model_call_and_the_transcript_and_replay_say_so(tmp_path):
    script = [reply("Counting.", [bash("seq 1 3000")]), submit(), submit()]

    def compacted(app) -> list[str]:
        return [t for t in texts(app, NoticeBlock) if "Context: compacted the conversation (as asked" in t]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.click(PromptInput)
                await pilot.press(*"Count", "enter")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await pilot.press("f8")
                await pilot.press(*"And again", "enter")
                await wait_for(pilot, lambda: len(app.screen.query(AnswerBlock)) == 2)
                assert compacted(app)
                follow_up = server.chat_requests[2].messages
                assert START in follow_up[1]["content"] and "And again" in follow_up[-1]["content"]
                assert not any("2999" in (m.get("content") or "") for m in follow_up)

    run(scenario())
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert [c["reason"] for c in saved["compactions"]] == ["asked"]
    assert any("2999" in (m.get("content") or "") for m in saved["messages"])  # kept in the record

    async def replayed():
        app = create_app(replay=load_trajectory(tmp_path / "out"))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return compacted(app)

    assert run(replayed())
