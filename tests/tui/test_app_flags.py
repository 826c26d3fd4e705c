"""The app takes `run`'s model flags (`lis-tui --tool-format hermes --max-tokens 64 ...`), in a
real terminal: what reaches the scripted model server is what the flags asked for."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from fakes.openai_server import FakeOpenAI, reply
from test_tmux import Tmux, lis_tui_command

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_the_app_takes_the_tool_format_max_tokens_and_temperature_of_run(tmp_path, size):
    term = Tmux(f"lis-flags-{os.getpid()}-{size[0]}")
    with FakeOpenAI([reply(SUBMIT)]) as server:
        try:
            term.start(lis_tui_command(tmp_path, "--base-url", server.base_url, "--model", "m",
                                       "--rootfs", "host", "--tool-format", "hermes",
                                       "--max-tokens", "64", "--temperature", "0.2", "-t", "say hi"),
                       width=size[0], height=size[1])
            server.wait_for_requests(1, timeout=60)
            term.quit_after_run()
        finally:
            term.kill()
        (request,) = server.chat_requests
    assert (request.body["max_tokens"], request.body["temperature"]) == (64, 0.2)
    assert "tools" not in request.body and "<tools>" in request.messages[0]["content"]  # hermes
    trajectory = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert trajectory["tool_format"] == "hermes" and trajectory["model"]["max_tokens"] == 64


def test_the_transcript_says_when_auto_switched_and_the_first_text_call_ran(tmp_path):
    from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
    from lis_tui.app.widgets.tool_block import ToolBlock
    from test_app import app_for, run, texts, wait_for

    script = [reply('<tool_call>\n{"name": "execute_bash", "arguments": {"command": '
                    '"echo 42 > /testbed/output/answer.txt"}}\n</tool_call>'), reply(SUBMIT)]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="What is 6*7?")
            async with app.run_test(size=(100, 40)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                notices = texts(app, NoticeBlock)
                assert any("Tool format: native -> hermes (the model wrote a tool call as hermes text; "
                           "it runs" in n for n in notices), notices
                assert app.screen.query(ToolBlock)  # the first call ran, shown as any command
                assert "42" in texts(app, AnswerBlock)[0]
    run(scenario())
