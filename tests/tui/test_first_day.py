"""What a new user met on the first day (issue 27): the model's words shown as written, the
rootfs offer telling the truth, keys and focus. Pilot against the scripted model server, a real
sandbox and a real rootfs store."""

from __future__ import annotations

import threading

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from isolation.rootfs import RootfsStore
from lis_tui.app.tui import create_app
from lis_tui.runs.replay import load_trajectory
from lis_tui.app.rootfs_offer import RootfsOffer
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
from lis_tui.app.widgets.status import StatusBar
from lis_tui.app.widgets.welcome import Welcome

from test_app import app_for, bash, run, texts, wait_for
from test_first_hour import live_app, quick_offer, tiny_tarball
from test_hostile import on_screen

WRITTEN = "a &lt; b, <b>bold?</b> and \\(x^2\\) with **strong** words"


PRINTED = "printf '\\033[1;31mred\\033]0;title\\007\\033[0m done\\n' | tee /testbed/output/answer.txt"
"""Colours and a window title, printed and written to the answer file alike."""


@pytest.mark.sandbox
def test_the_model_s_words_are_shown_as_written_and_its_output_and_answer_alike(tmp_path):
    """The model's words as written; what a command printed and what it wrote to answer.txt (the
    same bytes) read the same in the output box and the Answer box, live and in replay."""
    script = [reply(WRITTEN, [bash(PRINTED)]), submit()]

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
        output, answer = shown.split("✔ Answer")
        assert "red done" in output and "red done" in answer and "\\x1b" not in shown, shown
        assert "answer.txt holds terminal escapes" in answer
    assert "\x1b[1;31mred" in (tmp_path / "out" / "answer.txt").read_text()


# -- the rootfs offer (item 9) ------------------------------------------------------------------

def welcome_and_offer(tmp_path, offer):
    """The welcome's rootfs row, and what F4 offers (the panel's text, or None)."""
    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path, rootfs_offer=offer)
            async with app.run_test(size=(120, 35)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(Welcome))
                welcome = texts(app, Welcome)[0]
                await pilot.press("f4")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen")
                await pilot.pause(0.2)
                panel = texts(app, "#rootfs-text")
                return welcome, panel[0] if panel else None

    return run(scenario())


def test_a_minimal_ubuntu_does_not_hide_the_offer_of_the_recommended_one(tmp_path, monkeypatch):
    # `lis-tui rootfs build ubuntu` (the README's first) makes a minimal rootfs named ubuntu; the
    # welcome still promised "F4 builds the recommended Ubuntu rootfs", and F4 offered nothing.
    monkeypatch.setenv("LIS_DATA_HOME", str(tmp_path / "data"))
    tiny_tarball(tmp_path / "tiny.tar")
    RootfsStore().import_tar("ubuntu", tmp_path / "tiny.tar")
    welcome, panel = welcome_and_offer(tmp_path, RootfsOffer())
    assert "F4 builds the recommended Ubuntu rootfs" in welcome
    assert panel is not None and "lis-tui rootfs build ubuntu-paper --preset paper" in panel
    assert "about 900 MB" in panel


def test_the_welcome_promises_no_build_that_f4_does_not_offer(tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_DATA_HOME", str(tmp_path / "data"))
    tiny_tarball(tmp_path / "tiny.tar")
    RootfsStore().import_tar("ubuntu", tmp_path / "tiny.tar")
    welcome, panel = welcome_and_offer(tmp_path, RootfsOffer(exists=lambda: True))
    assert panel is None and "F4 builds" not in welcome
    assert "stored: ubuntu" in welcome and "--rootfs NAME" in welcome


@pytest.mark.sandbox
def test_a_rootfs_built_while_the_sandbox_runs_is_said_and_ctrl_n_starts_a_session_on_it(tmp_path):
    gate = threading.Event()
    script = [reply(tool_calls=[bash("echo 1 > /testbed/output/answer.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = live_app(server, tmp_path, rootfs_offer=quick_offer(tmp_path, gate),
                           task="Start.")
            async with app.run_test(size=(120, 35)) as pilot:
                # F4 waits for the task's end: the Answer box shows a moment before the run is idle
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock) and not app.main.busy)
                old = app.conversation
                await pilot.press("f4")
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                await pilot.press("ctrl+b")
                await pilot.press("escape")
                gate.set()
                await wait_for(pilot, lambda: any("Ctrl+N" in n for n in texts(app, NoticeBlock)))
                said = [n for n in texts(app, NoticeBlock) if "Ctrl+N" in n][0]
                before = app.main.query_one(StatusBar).status.rootfs, old.spec.rootfs
                await pilot.press("ctrl+n")
                await wait_for(pilot, lambda: old.state == "closed")
                new = app.conversation
                return said, before, (new is not old, new.spec.rootfs, new.sandbox,
                                      app.main.query_one(StatusBar).status.rootfs)

    said, before, after = run(scenario())
    assert "This session stays on host" in " ".join(said.split())
    assert before == ("host", "host")
    assert after == (True, "tiny", None, "tiny")
    assert (tmp_path / "out" / "files" / "answer.txt").read_text() == "1\n"  # the old run kept
