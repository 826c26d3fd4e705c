"""What a person types in a real terminal (tmux) goes where they meant it: a reason stays text in
the command approval (issue 34 item 6), a pasted or multi-line task stays whole (issue 36 item 1),
keys typed in the transcript go to the prompt, and what follows is in view (issue 36 item 6)."""

from __future__ import annotations

import json
import os
import shutil
import time

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
            term.answer("Enter", " · ready ")  # in the reason, past the grace: skip, with it
            term.quit_after_run()
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
            term.wait_for("Edit the command")  # keys sent before that went to the reason
            term.keys("-l", " person-added")  # goes after the command, where the cursor is
            term.wait_for("echo model-wrote person-added")
            term.answer("C-r", " · ready ")
            term.quit_after_run()
        finally:
            term.kill()
        ran = server.chat_requests[1].tool_outputs[0]
    assert "model-wrote person-added" in ran


# -- multi-line input (issue 36 item 1) ---------------------------------------------------------

SHIFT_ENTER = "1b 5b 31 33 3b 32 75".split()
"""Shift+Enter as a terminal with the kitty keyboard protocol sends it (ESC [13;2u: kitty, foot,
WezTerm, Ghostty); tmux 3.3 has no name for the key, so the bytes go in as they are."""


def paste(term: Tmux, text: str) -> None:
    """A bracketed paste (-p), as a terminal pastes; tmux sends its line breaks as CR, as they do."""
    term.tmux("set-buffer", "-b", "paste", text)
    term.tmux("paste-buffer", "-p", "-d", "-b", "paste", "-t", "t")


def run_task(tmp_path, size, name: str, type_task, after=None) -> dict:
    """Type a task with `type_task(term)` (it presses Enter), let the scripted model submit, look
    with `after(term)`, quit: trajectory.json."""
    term = Tmux(f"lis-{name}-{os.getpid()}-{size[0]}")
    with FakeOpenAI([reply(tool_calls=[bash("echo done-$((6*7))")]), submit()]) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "m"), width=size[0], height=size[1])
            term.wait_for("Type a task")
            type_task(term)
            # The task has ended (ctrl+q quits without asking) and the prompt is back: keys sent
            # on the word Answer alone could reach the app before it was idle, and the CI's once
            # left the transcript at its end after Tab, Home.
            term.wait_for("Answer", "Type a follow-up")
            if after is not None:
                after(term)
            term.keys("C-q")
            wait_gone(term)
        finally:
            term.kill()
    return json.loads((tmp_path / "out" / "trajectory.json").read_text())


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_a_pasted_task_ctrl_j_and_shift_enter_keep_every_line(tmp_path, size):
    def type_task(term: Tmux) -> None:
        paste(term, "echo first\necho second")
        term.keys("C-j")  # a line of one's own under the paste
        term.keys("-l", "  and a third, indented")
        term.keys("-H", *SHIFT_ENTER)
        term.keys("-l", "fourth")
        shown = term.wait_for("echo second", "and a third", "fourth")
        assert "4 lines" in shown  # the prompt's border counts them
        term.keys("Enter")

    saved = run_task(tmp_path, size, "paste", type_task)
    assert saved["task"] == "echo first\necho second\n  and a third, indented\nfourth"


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_a_long_paste_is_kept_whole_and_shown_folded(tmp_path, size):
    log = "\n".join(f"line {n:02d} of the log" for n in range(1, 61))

    def type_task(term: Tmux) -> None:
        paste(term, log)
        shown = term.wait_for("60 lines")
        lines = shown.splitlines()
        assert "step" in lines[0] or "NET" in lines[0], shown  # the status line is still there
        assert "line 60 of the log" in shown  # the cursor's end of the paste is in view
        assert sum("of the log" in line for line in lines) < size[1] // 2  # folded
        term.keys("Enter")

    def transcript_top(term: Tmux) -> None:
        term.keys("Tab", "Home")  # to the transcript, and its top: the task, folded
        shown = term.wait_for("line 01 of the log", "more lines, sent whole")
        assert "line 60 of the log" not in shown

    saved = run_task(tmp_path, size, "long", type_task, transcript_top)
    assert saved["task"] == log


# -- the transcript follows (issue 36 item 6) ---------------------------------------------------

WIDE = "the-first-answer-runs-right-up-to-the-box-s-right-edge-" * 2


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_toasts_spare_the_answer_and_a_follow_up_typed_while_scrolled_up_is_seen(tmp_path, size):
    wide = WIDE[: size[0] - 8]  # one line in the Answer box
    script = [reply(tool_calls=[bash(f"seq 1 60; echo {wide} > /testbed/output/answer.txt")]),
              submit(),
              reply(tool_calls=[bash("echo second-run-$((6*7))")]), submit()]
    term = Tmux(f"lis-follow-{os.getpid()}-{size[0]}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "m"), width=size[0], height=size[1])
            term.wait_for("Type a task")
            term.keys("-l", "Count, then answer.")
            term.keys("Enter")
            term.wait_for("Answer", wide, "Type a follow-up")  # idle: the prompt takes keys again
            term.keys("F2")  # a toast ("Network mode: ASK") while the answer is on screen
            shown = term.wait_for("Network mode")
            assert wide in shown  # not a character of it covered
            term.keys("Tab")  # to the transcript, then up, away from the answer
            scroll_up_until(term, lambda shown: "Answer" not in shown)
            term.keys("-l", "and now?")  # typed in the transcript: it goes to the prompt
            term.wait_for("and now?")
            term.keys("Enter")
            term.wait_for("second-run-42", "exit 0")  # the new step, in view
            term.quit_after_run()  # "Answer" could be the first run's box, still in view
        finally:
            term.kill()
    assert "and now?" in server.chat_requests[2].messages[-1]["content"]


def scroll_up_until(term: Tmux, scrolled, tries: int = 50) -> None:
    """PageUp until the screen shows it scrolled: a key sent before the focus moved (Tab) went
    to the prompt, where PageUp does nothing to see."""
    for _ in range(tries):
        term.keys("PPage")
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            if scrolled(term.screen()):
                return
            time.sleep(0.1)
    raise AssertionError(f"the transcript never scrolled:\n{term.screen()}")
