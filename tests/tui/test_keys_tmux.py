"""Ctrl+C and type-ahead in a real terminal (issue 53, item 2): tmux runs the app against the
scripted model server. Ctrl+C interrupts the command as Esc does and twice quits; a follow-up
typed while a command runs is queued, answers no dialog, and is sent once the task ends."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from test_tmux import Tmux, lis_tui_command, wait_gone

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
DIALOG = "The model wants to run this command"


def bash(command: str):
    return call("execute_bash", {"command": command})


def test_ctrl_c_interrupts_a_command_and_twice_quits(tmp_path):
    script = [reply(tool_calls=[bash("sleep 30")]), reply(tool_calls=[bash("sleep 31")])]
    term = Tmux(f"lis-ctrlc-{os.getpid()}")
    with FakeOpenAI(script, default=submit()) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url, "--model", "m"),
                       width=100, height=30)
            term.wait_for("Type a task")
            term.keys("Wait.", "Enter")
            term.wait_for("execute_bash sleep 30", line=1)  # the status line's second: it runs
            term.keys("C-c")
            term.wait_for(" · ready ", line=0)  # stopped, and the app goes on
            assert "you interrupted the run" in term.screen()
            term.keys("Wait again.", "Enter")
            term.wait_for("execute_bash sleep 31", line=1)
            term.keys("C-c", "C-c")
            wait_gone(term)  # long before the command would have ended
        finally:
            term.kill()
        requests = len(server.chat_requests)
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert saved["finish_reason"] == "cancelled" and requests == 2


def test_a_follow_up_typed_during_a_command_is_queued_answers_no_dialog_and_goes_after(tmp_path):
    script = [reply(tool_calls=[bash("sleep 5; echo one")]), reply(tool_calls=[bash("echo two")]),
              submit(), submit()]
    term = Tmux(f"lis-ahead-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url, "--model", "m",
                                       "--approve"), width=100, height=30)
            term.wait_for("Type a task")
            term.keys("Go.", "Enter")
            term.wait_for(DIALOG, "sleep 5; echo one")
            term.answer("C-r", "running")
            term.keys("-l", "now what")  # while the command runs: typed ahead, then queued
            term.keys("Enter")
            term.wait_for("Queued: now what")
            shown = term.wait_for(DIALOG, "echo two")  # the next command asks: Enter answered nothing
            assert "Queued: now what" in shown
            term.answer("C-r", "Follow-up")  # it runs, the model submits: the queued text goes
            term.wait_for(" · ready ", line=0)
            term.keys("C-c")  # between tasks: quits (nothing to ask about)
            wait_gone(term)
        finally:
            term.kill()
        requests = server.chat_requests
    assert "two" in requests[2].tool_outputs[-1]  # run, not skipped with "now what" as the reason
    assert len(requests) == 4 and "now what" in requests[3].messages[-1]["content"]
