"""The network approval dialog: a second question for an allowed host at a private address, a
dialog that closes when its request ends, and one that text typed into it never answers. Pilot
(and tmux, a real terminal) against the scripted model and a real sandbox."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from lis_tui.app.screens.question import GRACE_S
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
from lis_tui.app.widgets.status import StatusBar
from test_app import SIZE, app_for, bash, modal_ready, run, texts, wait_for, web  # noqa: F401 (web: a fixture)
from test_tmux import Tmux, lis_tui_command

pytestmark = pytest.mark.sandbox


def test_an_allowed_host_at_a_private_address_is_asked_about_again(tmp_path, monkeypatch, web):
    """The server is on 127.0.0.2, an internal address: "Allow once" used to end in a silent 403;
    now a second dialog asks about the address (no "Always": an address is never saved)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    script = [reply(tool_calls=[bash(f"curl -sS -m 30 {web.url}/hello.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task="fetch hello.txt")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                first = app.screen
                await pilot.press("ctrl+o")
                await wait_for(pilot, lambda: app.screen is not first
                               and modal_ready(app, "NetworkApprovalScreen"))
                shown = " ".join(texts(app, "Static"))
                buttons = [b.id for b in app.screen.query("Button")]
                await pilot.press("ctrl+t")  # Always: not offered here, does nothing
                assert modal_ready(app, "NetworkApprovalScreen")
                await pilot.press("ctrl+o")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return shown, buttons, server.chat_requests[1].tool_outputs[0]

    shown, buttons, output = run(scenario())
    assert f"{web.hostport} resolves to 127.0.0.2, a private or internal address" in shown, shown
    assert "allow this address for this host?" in shown and buttons == ["allow_once", "allow_session", "deny"]
    assert "hello from the host" in output
    assert not (tmp_path / "xdg" / "lis-tui" / "config.toml").exists()


def test_a_dialog_closes_when_its_request_ends_and_saves_nothing(tmp_path, monkeypatch, web):
    """curl gives up (is killed) while the person is asked: the dialog goes, the transcript says why, the
    status leaves NET ASK ?, and nothing is saved."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    # curl waits for the answer until the test, once the dialog is up, makes it give up
    gives_up = (f"curl -sS -m 60 {web.url}/hello.txt & pid=$!; until [ -e /tmp/give-up ]; do sleep 0.1; "
                "done; kill $pid; wait $pid; echo rc=$?")
    script = [reply(tool_calls=[bash(gives_up)]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task="fetch hello.txt")
            app.conversation.host_services.append(web.hostport)  # a question about the host alone
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                asking = app.main.query_one(StatusBar).status.asking
                app.conversation._sandbox.write_file("/tmp/give-up", b"")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return asking, app.main.query_one(StatusBar).status.asking, texts(app, NoticeBlock), \
                    server.chat_requests[1].tool_outputs[0]

    asked, asking, notices, output = run(scenario())
    assert asked and not asking
    said = [t.strip() for t in notices if "ended before an answer" in t]
    assert said == [f"Network: the request to {web.hostport} ended before an answer; the question was "
                    "withdrawn and nothing was saved"], notices
    assert "rc=143" in output and "hello" not in output
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert [(r["host"], r["by"]) for r in saved["network_refusals"]] == [("127.0.0.2", "gone")]
    assert not (tmp_path / "xdg" / "lis-tui" / "config.toml").exists()


def test_a_question_withdrawn_under_another_dialog_goes_when_that_one_is_answered(tmp_path, monkeypatch, web):
    """Two hosts asked about at once: the first request gives up while the second dialog is on top.
    The first dialog cannot go from under it; it goes, by itself, as soon as the second is answered."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    other = f"{web.hostport.split(':')[0]}:9"  # a second port: a question of its own (nothing listens)
    both = (f"curl -sS -m 60 {web.url}/hello.txt & first=$!; until [ -e /tmp/second ]; do sleep 0.1; done; "
            f"curl -sS -m 60 http://{other}/ & second=$!; until [ -e /tmp/give-up ]; do sleep 0.1; done; "
            "kill $first; wait $second; echo second=$?")
    script = [reply(tool_calls=[bash(both)]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task="fetch two")
            app.conversation.host_services.append(web.hostport)  # a question about the host alone
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                first = app.screen
                app.conversation._sandbox.write_file("/tmp/second", b"")
                await wait_for(pilot, lambda: app.screen is not first and modal_ready(app, "NetworkApprovalScreen"))
                second = app.screen
                app.conversation._sandbox.write_file("/tmp/give-up", b"")
                await wait_for(pilot, lambda: first.future.done())
                await pilot.pause(0.5)  # the withdrawal's message has come: the first stays under the second
                under = first in app.screen_stack and app.screen is second
                await pilot.press("escape")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return under, app.main.query_one(StatusBar).status.asking, server.chat_requests[1].tool_outputs[0]

    under, asking, output = run(scenario())
    assert under and not asking
    assert "second=" in output and "hello" not in output
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert sorted(r["by"] for r in saved["network_refusals"]) == ["gone", "user"], saved["network_refusals"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.parametrize("width,height", [(80, 24), (120, 35)])
def test_in_a_real_terminal_the_dialog_closes_when_curl_gives_up(tmp_path, web, width, height):
    """What a person sees: the dialog is up with NET ASK ?, curl gives up (-m 10), and the
    dialog goes by itself, the transcript says why, and the badge is NET ASK again."""
    fetch = f"curl -sS -m 10 {web.url}/hello.txt; echo rc=$?"
    script = [reply(tool_calls=[bash(fetch)]), submit()]
    term = Tmux(f"lis-net-{os.getpid()}-{width}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url, "--model", "m",
                                       "--rootfs", "host", "--network", "ask", "-t", "fetch it"),
                       width, height)
            asked = term.wait_for("The sandbox wants the network", "NET ASK ?", timeout=60)
            # the run went on to its submit (the Answer block below it may be scrolled out of 24 rows)
            done = term.wait_for("submitted", "ended before", timeout=60)
            # the dialog sees its question withdrawn on its next check (0.25 s), maybe after the run's end
            deadline = time.monotonic() + 10
            while "The sandbox wants the network" in done and time.monotonic() < deadline:
                time.sleep(0.2)
                done = term.screen()
            term.keys("C-t")  # "Always" to no dialog: nothing to save
            term.quit_after_run()
        finally:
            term.kill()
    assert web.hostport in asked
    assert "The sandbox wants the network" not in done and "NET ASK ?" not in done and "NET ASK" in done
    assert not (tmp_path / "xdg" / "lis-tui" / "config.toml").exists()


def test_a_question_a_background_job_left_open_closes_when_the_task_ends(tmp_path, monkeypatch, web):
    """The model started curl in the background and submitted: the task is over, so is its question."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    background = (f"(curl -sS -m 120 {web.url}/hello.txt > /tmp/got 2>&1 &); "
                  "until [ -e /tmp/asked ]; do sleep 0.1; done")
    script = [reply(tool_calls=[bash(background)]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task="fetch hello.txt")
            app.conversation.host_services.append(web.hostport)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                app.conversation._sandbox.write_file("/tmp/asked", b"")  # the step ends; the task submits
                await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await wait_for(pilot, lambda: "refused" in app.conversation._sandbox.exec("cat /tmp/got").stdout)
                # the transcript hears of the withdrawal from the proxy's thread, a moment after curl
                noticed = lambda: any("ended before an answer" in t for t in texts(app, NoticeBlock))  # noqa: E731
                with contextlib.suppress(AssertionError):
                    await wait_for(pilot, noticed, timeout=10)
                return texts(app, NoticeBlock), app.conversation._sandbox.exec("cat /tmp/got").stdout

    notices, got = run(scenario())
    assert any("ended before an answer" in t for t in notices), notices
    assert "the task it was asked for ended before the user answered" in got


TYPED = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
"""Everything a sentence is made of (o, s, a and d answered once, and saved a host for good)."""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_in_a_real_terminal_text_typed_into_the_dialog_answers_nothing(tmp_path, web):
    """Every letter, digit and a space typed into the open dialog: it stays, nothing is answered,
    the config is byte for byte as it was. Then Ctrl+T (Always) and, about the private address,
    Ctrl+O: each answer, who gave it and where Always saved the host are in the transcript and in
    trajectory.json."""
    config = tmp_path / "xdg" / "lis-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_bytes(b'# mine\n[network]\ndeny = ["*:25"]   # no mail\n')
    before = config.read_bytes()
    fetch = f"curl -sS -m 60 {web.url}/hello.txt"
    script = [reply(tool_calls=[bash(fetch)]), submit()]
    term = Tmux(f"lis-typed-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url, "--model", "m",
                                       "--rootfs", "host", "--network", "ask", "-t", "fetch it"), 120, 35)
            term.wait_for("The sandbox wants the network", timeout=60)
            term.keys("-l", TYPED)  # as it opens (in its grace, most likely), and after it
            term.wait_for('"9" typed here answers nothing')  # every key came: 9 was the last
            time.sleep(GRACE_S)
            term.keys("-l", TYPED[::-1])
            typed = term.wait_for('" " typed here answers nothing')
            unanswered = json.loads((tmp_path / "out" / "trajectory.json").read_text()).get("network_answers")
            unchanged = config.read_bytes() == before
            term.answer("C-t", "The host is at a private address")  # Always; then the address: once
            shown = term.answer("C-o", "you allowed 127.0.0.2 always (any port); saved to",
                                f"you allowed {web.hostport} at 127.0.0.2 once")
            term.quit_after_run()
        finally:
            term.kill()
        fetched = server.chat_requests[1].tool_outputs[0]
    assert "The sandbox wants the network" in typed and "Always ^T" in typed
    assert unanswered is None and unchanged
    assert "Network: you allowed" in shown and "hello from the host" in fetched
    answers = json.loads((tmp_path / "out" / "trajectory.json").read_text())["network_answers"]
    port = web.server_address[1]
    assert [{k: v for k, v in a.items() if k != "time"} for a in answers] == [
        {"host": "127.0.0.2", "port": port, "answer": "allow_always", "by": "user", "saved": str(config)},
        {"host": "127.0.0.2", "port": port, "answer": "allow_once", "by": "user", "address": "127.0.0.2"}]
    assert config.read_text().startswith("# mine\n") and '"127.0.0.2"' in config.read_text()
