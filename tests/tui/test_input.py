"""What a person types in a real terminal (tmux) goes where they meant it: a reason stays text in
the command approval (issue 34 item 6), a pasted or multi-line task stays whole (issue 36 item 1)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from test_tmux import Tmux, lis_tui_command, wait_gone

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
REASON = "rather not, skip edit, no deleting please"  # r Run, e Edit, s Skip: every letter
DIALOG = "The model wants to run this command"


def bash(command: str):
    return call("execute_bash", {"command": command})


def approving(tmp_path, server: FakeOpenAI) -> str:
    return lis_tui_command(tmp_path, "tui", "--base-url", server.base_url, "--model", "m",
                           "--approve")


def quit_app(term: Tmux) -> None:
    term.wait_for("Answer")  # the task has ended: ctrl+q quits without asking
    term.keys("C-q")
    wait_gone(term)


def test_a_reason_with_every_action_letter_is_text_and_skips(tmp_path):
    script = [reply(tool_calls=[bash("echo ran > /testbed/output/ran.txt")]), submit()]
    term = Tmux(f"lis-reason-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(approving(tmp_path, server), width=80, height=24)
            term.wait_for("Type a task")
            term.keys("Make a file.", "Enter")
            term.wait_for(DIALOG)
            term.keys("-l", REASON)  # typed as the dialog opens: no letter may act
            term.wait_for(REASON)
            assert DIALOG in term.screen()  # nothing ran, nothing closed the dialog
            term.keys("Enter")  # in the reason: skip, with it
            quit_app(term)
        finally:
            term.kill()
        told = server.chat_requests[1].tool_outputs[0]
    assert "chose not to run" in told and REASON in told
    out = tmp_path / "out"
    assert json.loads((out / "trajectory.json").read_text())["finish_reason"] == "submitted"
    assert not (out / "files" / "ran.txt").exists()


def test_edit_puts_the_cursor_at_the_end_of_the_command(tmp_path):
    script = [reply(tool_calls=[bash("echo model-wrote")]), submit()]
    term = Tmux(f"lis-edit-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(approving(tmp_path, server), width=80, height=24)
            term.wait_for("Type a task")
            term.keys("Say it.", "Enter")
            term.wait_for(DIALOG)
            term.keys("F2")
            term.keys("-l", " person-added")  # goes after the command, where the cursor is
            term.wait_for("echo model-wrote person-added")
            term.keys("C-r")
            quit_app(term)
        finally:
            term.kill()
        ran = server.chat_requests[1].tool_outputs[0]
    assert "model-wrote person-added" in ran
