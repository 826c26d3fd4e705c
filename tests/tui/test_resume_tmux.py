"""`lis-tui --continue` in a real terminal (80x24, 120x35): the last run started in this folder comes back
with its exchange on screen, and a follow-up goes on with its conversation and its output files."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from past_runs import past_run
from test_tmux import Tmux, lis_tui_command, wait_gone

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_continue_shows_the_last_run_here_and_takes_a_follow_up(tmp_path, monkeypatch, size):
    first = [reply("Computing it.", [call("execute_bash", {"command": "echo 42 > /testbed/output/answer.txt"})]),
             submit()]
    run1 = past_run(tmp_path, monkeypatch, first, "What is 6*7?")  # as `lis-tui run` here would
    before = json.loads((run1 / "trajectory.json").read_text())["messages"]

    seen = {}

    def doubled(request):
        seen["messages"] = request.messages
        return reply("Doubling it.", [call("execute_bash", {
            "command": "echo $(( $(cat /testbed/output/answer.txt) * 2 )) > /testbed/output/answer.txt"})])

    term = Tmux(f"lis-continue-{os.getpid()}-{size[0]}")
    with FakeOpenAI([doubled, submit()]) as server:
        try:
            term.start(lis_tui_command(tmp_path, "--continue", "--base-url", server.base_url, "--model", "m"),
                       width=size[0], height=size[1])
            shown = term.wait_for(f"Continuing {run1.name}", "Type a follow-up")
            assert "42" in shown and "Answer" in shown  # the earlier exchange, down to its answer
            term.keys("Now double it.", "Enter")
            term.wait_for("│ 84 ", "Type a follow-up")  # the new answer, and the prompt is back
            term.keys("C-q")
            wait_gone(term)
        finally:
            term.kill()
    assert seen["messages"][:len(before)] == before
    assert seen["messages"][len(before)]["content"].startswith("Now double it.")
    doc = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert doc["resumed_from"] == run1.name and doc["task"] == "Now double it."
    assert doc["resumed_sandbox"] == f"put back from {run1.name}: 1 output file in /testbed/output"
    assert (tmp_path / "out" / "answer.txt").read_text() == "84\n"  # 42 was put back, then doubled
