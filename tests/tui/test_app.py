"""The app driven by Textual's Pilot against the scripted model server and a real sandbox."""

from __future__ import annotations

import asyncio
import functools
import io
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from fakes.openai_server import FakeOpenAI, call, reply, submit
from isolation import SandboxSpec
from lis_tui.app.tui import create_app
from lis_tui.config.settings import load_config
from lis_tui.runs.replay import load_trajectory
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock, TaskBlock
from lis_tui.app.widgets.prompt import PromptInput
from lis_tui.app.widgets.status import StatusBar
from lis_tui.app.widgets.tool_block import OutputView, ToolBlock

SIZE = (100, 40)


def bash(command: str):
    return call("execute_bash", {"command": command})


def app_for(server: FakeOpenAI, tmp_path, network: str = "off", **kwargs):
    config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url,
                                    "model.max_retries": 0}, env={}, paths=[])
    spec = SandboxSpec(rootfs="host", network=network)
    return create_app(config, spec, output_dir=tmp_path / "out", **kwargs)


async def wait_for(pilot, condition, timeout: float = 30.0) -> None:
    """Let the app run until `condition()` holds (the agent works in a thread)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition.__doc__ or condition}")
        await pilot.pause(0.05)


def modal_ready(app, name: str) -> bool:
    """The modal is up and takes keys now: a question (network, command) once the keys that come
    now are past its grace, another once it has put the focus on its first field or button."""
    grace_over = getattr(app.screen, "takes_answers", None)
    return type(app.screen).__name__ == name and (app.focused is not None if grace_over is None
                                                  else grace_over)


def texts(app, cls) -> list[str]:
    """The plain text of each matching Static (Rich renderables drawn the way a terminal would)."""
    console = Console(width=200, color_system=None, record=True, file=io.StringIO())
    shown = []
    screen = getattr(app, "screen", app)  # an app (its current screen) or a screen
    for widget in screen.query(cls):
        console.print(widget.content)
        shown.append(console.export_text())
    return shown


def run(coro):
    return asyncio.run(coro)


@pytest.mark.sandbox
def test_a_task_runs_to_submit_and_a_follow_up_goes_on(tmp_path):
    script = [reply("Let me count.", [bash("echo $((6*7)) | tee /testbed/output/answer.txt")]),
              submit(),
              reply("Adding one.", [bash("echo 43 > /testbed/output/answer.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.click(PromptInput)
                await pilot.press(*"What is 6*7?", "enter")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                assert "What is 6*7?" in texts(app, TaskBlock)[0]
                blocks = list(app.screen.query(ToolBlock))
                assert "42" in blocks[0].query_one(OutputView).output
                status = str(blocks[0].query_one(".tool-status").render())
                assert status.startswith("exit 0 · ")
                assert "42" in texts(app, AnswerBlock)[0]
                assert app.query_one(PromptInput).placeholder.startswith("Type a follow-up")

                await pilot.press(*"Now add one", "enter")
                await wait_for(pilot, lambda: len(app.screen.query(AnswerBlock)) == 2)
                assert "43" in texts(app, AnswerBlock)[1]
                follow_up = server.chat_requests[2].messages
                assert "Now add one" in follow_up[-1]["content"]
                assert any("42" in (m.get("content") or "") for m in follow_up)
        return app

    run(scenario())
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert saved["finish_reason"] == "submitted"
    assert (tmp_path / "out" / "answer.txt").read_text() == "43\n"

    async def replayed():  # the saved run, shown again by `lis-tui replay`
        app = create_app(replay=load_trajectory(tmp_path / "out"))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return ([v.output for v in app.screen.query(OutputView)], texts(app, AnswerBlock),
                    texts(app, TaskBlock))

    outputs, answers, tasks = run(replayed())
    assert "42" in outputs[0] and "43" in answers[-1]
    assert "Task" in tasks[0] and "What is 6*7?" in tasks[0]
    assert "Follow-up" in tasks[1] and "Now add one" in tasks[1]


@pytest.mark.sandbox
@pytest.mark.parametrize("choice", ["run", "edit", "skip"])
def test_command_approval(tmp_path, choice):
    script = [reply(tool_calls=[bash("echo model-wrote")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="say something", command_approval=True)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "CommandApprovalScreen"))
                if choice == "edit":
                    await pilot.press("f2", "ctrl+a", "ctrl+k")  # clear the line, then type anew
                    await pilot.press(*"echo person-wrote")
                    await pilot.press("tab", "tab", "enter")  # past the reason input to Run
                elif choice == "skip":
                    await pilot.press(*"not now", "enter")  # the reason has the keys at first
                else:
                    await pilot.press("ctrl+r")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return server.chat_requests[1].tool_outputs[0]

    seen = run(scenario())
    expected = {"run": "model-wrote", "edit": "person-wrote", "skip": "not now"}[choice]
    assert expected in seen
    assert choice != "skip" or "chose not to run" in seen


def test_replay_shows_a_saved_run(tmp_path):
    doc = {"format": "lis-tui-trajectory/1", "id": "run-1", "task": "What is 2+2?",
           "model": {"model": ""}, "sandbox": {"rootfs": "host", "network": "off"},
           "finish_reason": "submitted", "answer": "4", "steps": [
               {"step": 1, "started": 0, "duration": 75.2, "model_duration": 0.1,
                "text": "I will compute it.", "reasoning": "",
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                "tool_calls": [{"id": "c1", "name": "execute_bash",
                                "arguments": json.dumps({"command": "echo 4"}),
                                "output": "4", "exit_code": 0, "duration": 0.01}]},
               {"step": 2, "started": 0, "reasoning": "The file needs fixing.", "tool_calls": [
                   {"id": "c2", "name": "str_replace_editor", "output": "edited",
                    "arguments": json.dumps({"command": "str_replace", "path": "/testbed/a.py",
                                             "old_str": "x = 1", "new_str": "x = 2"})}]},
               {"step": 3, "started": 0, "tool_calls": [
                   {"id": "c3", "name": "submit", "arguments": "{}", "submitted": True}]}]}
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(doc))

    async def scenario():
        app = create_app(replay=load_trajectory(tmp_path))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert "What is 2+2?" in texts(app, TaskBlock)[0]
            status = texts(app, StatusBar)[0]  # the server's own model, the recorded time
            assert "(server default)" in status and "01:15" in status, status
            assert [v.output for v in app.screen.query(OutputView)] == ["4", "edited"]
            headers = texts(app, ".tool-header")
            assert "str_replace /testbed/a.py" in headers[1]
            assert "-x = 1" in headers[1] and "+x = 2" in headers[1]
            reasoning = app.screen.query("Collapsible.reasoning")
            assert [r.has_class("hidden") for r in reasoning] == [True, False, True]
            assert reasoning[1].collapsed
            assert "4" in texts(app, AnswerBlock)[0]
            assert app.query_one(PromptInput).disabled
            await pilot.press("ctrl+q")
        return app

    assert run(scenario()).return_code in (0, None)


@pytest.mark.sandbox
def test_model_server_down_is_a_notice_not_a_traceback(tmp_path):
    async def scenario():
        with FakeOpenAI([]) as server:  # every request: 500
            app = app_for(server, tmp_path, task="anything")
            async with app.run_test(size=SIZE) as pilot:
                # the toast is a message of its own (App.notify posts it), so it may come a beat later
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock) and not app.screen.busy
                               and list(app._notifications))
                notices = texts(app, NoticeBlock)
                assert app.screen.query_one(PromptInput).disabled is False
                return notices, [n.message for n in app._notifications]

    notices, toasts = run(scenario())
    assert "The run failed" in notices[0]
    assert toasts and "Traceback" not in "".join(toasts)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A web server on this machine (127.0.0.2: loopback, but not the sandbox's own)."""
    root = tmp_path_factory.mktemp("web")
    (root / "hello.txt").write_text("hello from the host\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0),
                                             functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.hostport = f"127.0.0.2:{server.server_address[1]}"
    server.url = f"http://{server.hostport}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.sandbox
@pytest.mark.parametrize("key,answer", [("ctrl+o", "allow_once"), ("ctrl+s", "allow_session"),
                                        ("ctrl+t", "allow_always"), ("escape", "deny")])
def test_network_approval(tmp_path, monkeypatch, web, key, answer):
    """Each answer key does what it says, and the answer is in the transcript and the trajectory,
    with who gave it (and for Always, where it was saved)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # where "always" is saved
    fetch = f"curl -s -m 20 {web.url}/hello.txt"
    script = [reply(tool_calls=[bash(f"{fetch}; echo; {fetch}")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task="fetch hello.txt")
            app.conversation.host_services.append(web.hostport)  # the host is this machine
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                shown = " ".join(str(w.render()) for w in app.screen.query("Static"))
                assert web.hostport in shown and "curl" in shown
                first = app.screen
                await pilot.press(key)
                if answer in ("allow_once", "deny"):  # these hold for one request only
                    await wait_for(pilot, lambda: app.screen is not first
                                   and modal_ready(app, "NetworkApprovalScreen"))
                    await pilot.press(key)
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return server.chat_requests[1].tool_outputs[0], texts(app, NoticeBlock)

    output, notices = run(scenario())
    if answer == "deny":
        assert "hello from the host" not in output and "refused by the user" in output
    else:
        assert output.count("hello from the host") == 2
    saved = tmp_path / "xdg" / "lis-tui" / "config.toml"
    assert (answer == "allow_always") == (saved.exists() and "127.0.0.2" in saved.read_text())
    by, times = ("escape", 2) if answer == "deny" else ("user", 2 if answer == "allow_once" else 1)
    answers = json.loads((tmp_path / "out" / "trajectory.json").read_text())["network_answers"]
    assert [(a["host"], a["port"], a["answer"], a["by"], a.get("saved")) for a in answers] == \
        [("127.0.0.2", web.server_address[1], answer, by, str(saved) if answer == "allow_always" else None)] * times
    said = {"allow_once": f"you allowed {web.hostport} once",
            "allow_session": f"you allowed {web.hostport} for this session",
            "allow_always": f"you allowed 127.0.0.2 always (any port); saved to the allow list in {saved}",
            "deny": f"you denied {web.hostport} (Esc)"}[answer]
    assert [t.strip() for t in notices if "Network: you" in t] == [f"Network: {said}"] * times, notices


def test_keys_as_the_network_dialog_opens_answer_nothing(tmp_path):
    """Keys that come with the dialog, or within its grace once drawn (the Enter that ends a
    sentence, an Esc meant to stop the step, a habit's answer key), answer nothing; a key after
    the grace answers, and the answer says who gave it."""
    from textual import events  # noqa: PLC0415
    from isolation.net import Answer, NetworkRequest  # noqa: PLC0415
    from lis_tui.app.screens.question import GRACE_S  # noqa: PLC0415

    async def scenario():
        config = load_config(overrides={"model.model": "m", "model.base_url": "http://127.0.0.1:9/v1"},
                             env={}, paths=[])
        app = create_app(config, SandboxSpec(rootfs="host", network="ask"), output_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            future = app.ask_network(NetworkRequest("pypi.org", 443, "CONNECT"))
            for key in ("enter", "escape", "ctrl+o", "ctrl+t", "tab", "enter"):  # queued behind the question
                app.post_message(events.Key(key, None))
            await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
            dialog, early = app.screen, [future.done(), app.focused]
            await pilot.press("tab")  # past the grace: a button has the focus now
            late_enter = events.Key("enter", "\r")  # as a busy app meets a key it got in the grace
            late_enter.time = dialog.drawn_at + GRACE_S / 2
            app.post_message(late_enter)
            await pilot.pause()
            early += [future.done(), app.screen is dialog]
            await pilot.press("ctrl+s")
            return early, future.result(timeout=5), app.screen is dialog

    early, answer, still_open = run(scenario())
    assert early == [False, None, False, True], early
    assert answer == Answer("allow_session", "user") and not still_open


@pytest.mark.sandbox
def test_interrupt_stops_a_long_command_and_the_app_goes_on(tmp_path):
    script = [reply(tool_calls=[bash("sleep 30")]),
              reply(tool_calls=[bash("echo after > /testbed/output/answer.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="wait a while")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "running" in texts(app, ".tool-status")[0]
                               if app.screen.query(".tool-status") else False)
                await pilot.press("escape")
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock), timeout=15)
                assert "interrupted" in texts(app, NoticeBlock)[0]
                assert not app.screen.busy
                await pilot.press(*"go on", "enter")  # a follow-up in the same sandbox
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return texts(app, AnswerBlock)[0]

    assert "after" in run(scenario())


@pytest.mark.sandbox
def test_keys_answer_while_a_long_command_runs(tmp_path):
    script = [reply(tool_calls=[bash("sleep 30")])]

    def sleeping(app) -> bool:
        """`sleep 30` has started and has not ended."""
        shown = texts(app.main, ".tool-status") if app.main.query(".tool-status") else [""]
        return "running" in shown[0] and app.conversation.state == "working"

    async def scenario():
        with FakeOpenAI(script, default=submit()) as server:
            app = app_for(server, tmp_path, task="wait a while")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: sleeping(app))
                badge = app.main.query_one(StatusBar)
                await pilot.press("f2")  # the badge changes while the command runs...
                await wait_for(pilot, lambda: "NET ASK" in str(badge.render()), timeout=2)
                await pilot.press("f1")  # ...and the help opens over it
                await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen",
                               timeout=2)
                assert sleeping(app), "the keys were only answered once the command ended"
                await pilot.press("escape", "escape")  # close the help, then interrupt
                await wait_for(pilot, lambda: app.main.query(NoticeBlock), timeout=15)
                return texts(app.main, NoticeBlock)[0]

    assert "interrupted" in run(scenario())


def test_keys_toggle_network_mode_and_command_approvals(tmp_path):
    async def scenario():
        with FakeOpenAI([]) as server:
            app = app_for(server, tmp_path)
            async with app.run_test(size=(80, 24)) as pilot:
                status = app.screen.query_one(StatusBar)
                await pilot.press("f2")
                assert (status.status.network, app.conversation.network) == ("ask", "ask")
                await pilot.press("f2", "f2")
                assert status.status.network == "off"
                await pilot.press("f3")
                assert status.status.approvals and app.conversation.command_approval
                assert "APPROVE ON" in str(status.render())
                await pilot.press("f1")
                assert type(app.screen).__name__ == "HelpScreen"
                await pilot.press("escape")
                assert type(app.screen).__name__ == "MainScreen"

    run(scenario())


@pytest.mark.sandbox
def test_quit_while_a_command_runs_asks_first_then_stops_it(tmp_path):
    script = [reply(tool_calls=[bash("sleep 30")])]

    async def scenario():
        with FakeOpenAI(script, default=submit()) as server:
            app = app_for(server, tmp_path, task="wait a while")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.screen.query(".tool-status"))
                await pilot.press("ctrl+q")
                await wait_for(pilot, lambda: modal_ready(app, "ConfirmScreen"))
                await pilot.press("n")
                assert type(app.screen).__name__ == "MainScreen"
                await pilot.press("ctrl+q")
                await wait_for(pilot, lambda: modal_ready(app, "ConfirmScreen"))
                await pilot.press("y", "e", "s")  # text: no letter says yes
                await pilot.pause(0.1)
                assert type(app.screen).__name__ == "ConfirmScreen"
                await pilot.press("ctrl+q")  # again: quits
        return app

    app = run(scenario())
    assert app.conversation.state == "closed"
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert (saved["task"], saved["finish_reason"]) == ("wait a while", "cancelled")


def test_a_sandbox_that_cannot_start_is_a_notice(tmp_path):
    async def scenario():
        with FakeOpenAI([]) as server:
            config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url},
                                 env={}, paths=[])
            spec = SandboxSpec(rootfs=str(tmp_path / "no-such-rootfs"))
            app = create_app(config, spec, output_dir=tmp_path / "out", task="anything")
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock))
                return texts(app, NoticeBlock)[0], [n.message for n in app._notifications]

    notice, toasts = run(scenario())
    assert "The run failed: the sandbox failed to start" in notice
    assert "Traceback" not in "".join(toasts)


def test_replay_of_a_missing_run_says_what_to_give(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lis_tui.cli", "replay", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "does not exist; give a run's directory or its trajectory.json" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.sandbox
def test_an_approval_nobody_waits_for_any_more_goes_away(tmp_path):
    async def scenario():
        with FakeOpenAI([reply(tool_calls=[bash("echo hi")])]) as server:
            app = app_for(server, tmp_path, task="say hi", command_approval=True)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "CommandApprovalScreen"))
                app.conversation.cancel()  # as an interrupt or a quit would
                await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock))
                return texts(app, NoticeBlock)[0]

    assert "interrupted" in run(scenario())


@pytest.mark.sandbox
def test_first_run_setup_tests_the_server_saves_and_the_task_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    script = [reply(tool_calls=[bash("echo 4 > /testbed/output/answer.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script, models=["qwen3", "llama"]) as server:
            config = load_config(env={}, paths=[])  # nothing says where the model is
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                             task="What is 2+2?", server_ports=())
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                               and app.focused is not None)
                app.screen.query_one("#base_url").value = server.base_url
                app.screen.query_one("#model").value = "qwen3"
                await pilot.press("ctrl+t")
                await wait_for(pilot, lambda: "connected" in texts(app, "#result")[0])
                assert "qwen3, llama" in texts(app, "#result")[0]
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return texts(app, AnswerBlock)[0], server.chat_requests[0].body["model"]

    answer, model = run(scenario())
    assert "4" in answer and model == "qwen3"
    saved = (tmp_path / "xdg" / "lis-tui" / "config.toml").read_text()
    assert "qwen3" in saved and "127.0.0.1" in saved


@pytest.mark.sandbox
def test_setup_chooses_the_tool_format_saves_it_and_the_task_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    script = [reply("```bash\necho 4 > /testbed/output/answer.txt\n```"), reply("```bash\nsubmit\n```")]

    async def scenario():
        with FakeOpenAI(script, models=["gemma"]) as server:
            config = load_config(env={}, paths=[])
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                             task="What is 2+2?", server_ports=())
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                               and app.focused is not None)
                app.screen.query_one("#base_url").value = server.base_url
                app.screen.query_one("#tool_format").value = "bash"
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return texts(app, AnswerBlock)[0], server.chat_requests[0].body

    answer, body = run(scenario())
    assert "4" in answer and "tools" not in body and "```bash" in body["messages"][0]["content"]
    assert 'tool_format = "bash"' in (tmp_path / "xdg" / "lis-tui" / "config.toml").read_text()


def test_setup_says_what_is_wrong_when_the_server_is_down(tmp_path):
    async def scenario():
        config = load_config(env={}, paths=[])
        app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                         server_ports=())  # no servers of this machine's in the way
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                           and app.focused is not None)
            app.screen.query_one("#base_url").value = "http://127.0.0.1:9/v1"  # nothing listens
            await pilot.press("ctrl+t")
            await wait_for(pilot, lambda: "✘" in texts(app, "#result")[0])
            shown = texts(app, "#result")[0]
            await pilot.press("escape")
            assert type(app.screen).__name__ == "MainScreen"
            return shown

    shown = run(scenario())
    assert "could not reach model server http://127.0.0.1:9/v1" in shown
    assert "the key is read from $OPENAI_API_KEY" in shown


def test_setup_shell_without_a_real_terminal_says_where_to_get_one(tmp_path):
    async def scenario():  # Pilot's headless driver cannot step aside; tmux tests the real one
        config = load_config(env={}, paths=[])
        app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                         server_ports=())  # no servers of this machine's in the way
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                           and app.focused is not None)
            await pilot.press("ctrl+o")
            await wait_for(pilot, lambda: "✘" in texts(app, "#result")[0])
            return texts(app, "#result")[0], type(app.screen).__name__

    shown, screen = run(scenario())
    assert "run `lis-tui shell`" in shown and screen == "SetupScreen"


@pytest.mark.sandbox
def test_network_turned_on_mid_session_reaches_the_running_shell(tmp_path, web):
    fetch = f"curl -s -m 20 {web.url}/hello.txt || echo FAILED"
    script = [reply(tool_calls=[bash(fetch)]), submit(), reply(tool_calls=[bash(fetch)]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="fetch hello.txt")  # network off
            app.conversation.host_services.append(web.hostport)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await pilot.press("f2")  # OFF -> ASK, while the sandbox runs
                await pilot.press(*"again", "enter")
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                await pilot.press("ctrl+o")
                await wait_for(pilot, lambda: len(app.screen.query(AnswerBlock)) == 2)
                return server.chat_requests[1].tool_outputs[0], server.chat_requests[3].tool_outputs

    offline, online = run(scenario())
    assert "FAILED" in offline
    assert "hello from the host" in online[-1]


@pytest.mark.sandbox
def test_files_panel_lists_the_output_and_previews_a_file(tmp_path):
    script = [reply(tool_calls=[bash("printf 'line one\\nline two\\n' > /testbed/output/notes.md"
                                     " && echo 4 > /testbed/output/answer.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="write notes")
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await pilot.press("f5")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "FilesScreen"
                               and app.screen.query_one("OptionList").option_count > 0)
                listing = app.screen.query_one("OptionList")
                paths = [listing.get_option_at_index(i).id for i in range(listing.option_count)]
                await pilot.press("down", "enter")  # the second output file: notes.md
                await wait_for(pilot, lambda: "line two" in texts(app, "#preview")[0])
                preview = texts(app, "#preview")[0]
                await pilot.press("escape")
                return paths, preview

    paths, preview = run(scenario())
    assert paths[:2] == ["/testbed/output/answer.txt", "/testbed/output/notes.md"]
    assert preview.startswith("/testbed/output/notes.md")


def test_a_run_that_cannot_start_says_so_in_the_transcript(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")  # the run directory would have to go inside a file

    async def scenario():
        with FakeOpenAI([submit()]) as server:
            config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url,
                                            "model.max_retries": 0}, env={}, paths=[])
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=blocker / "run", task="do it")
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock))
                await pilot.pause(0.2)
                return texts(app, NoticeBlock), str(app.screen.query_one(StatusBar).status.sandbox), server.chat_requests

    notices, state, requests = run(scenario())
    assert any("failed before it started" in n and "not-a-directory" in n for n in notices), notices
    assert state == "failed" and not requests  # no model call was paid for


@pytest.mark.sandbox
def test_the_app_keeps_its_runs_in_the_data_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    async def scenario():
        with FakeOpenAI([reply(tool_calls=[bash("echo 1 > /testbed/output/answer.txt")]), submit()]) as server:
            config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url,
                                            "model.max_retries": 0}, env={}, paths=[])
            app = create_app(config, SandboxSpec(rootfs="host"), task="write the answer")
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))

    run(scenario())
    runs = list((tmp_path / "data" / "lis-tui" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "trajectory.json").exists()
    assert not (tmp_path / "lis-output").exists()


@pytest.mark.sandbox
def test_each_request_that_got_a_credential_is_a_line_in_the_transcript(tmp_path, monkeypatch, web):
    from isolation.net.ca import SandboxCA
    from isolation.net.credentials import Credential
    from isolation.net.proxy import default_proxy

    monkeypatch.setenv("LIS_TUI_TEST_TOKEN", "tui-secret-value")
    proxy = default_proxy()
    before, proxy.ca = proxy._ca, SandboxCA(tmp_path / "ca")
    host, port = web.hostport.split(":")
    credential = Credential(host, "X-Api-Key", "${env:LIS_TUI_TEST_TOKEN}", int(port), http=True)
    script = [reply(tool_calls=[bash(f"curl -s -m 20 {web.url}/hello.txt {web.url}/hello.txt")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="fetch it twice")
            app.conversation.spec = SandboxSpec(rootfs="host", network="on", allow_hosts=(web.hostport,),
                                                credentials=(credential,))
            app.conversation.network = "on"
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                return texts(app, NoticeBlock)

    try:
        shown = run(scenario())
    finally:
        proxy.ca = before
    lines = [t.strip() for t in shown if "credential" in t]
    assert lines == [f"Network: credential added for {host} (X-Api-Key, GET)"] * 2, shown
    assert not any("tui-secret-value" in t for t in shown)


def test_an_ignored_project_config_is_a_notice_in_the_app(tmp_path, monkeypatch):
    from lis_tui.config import trust

    (tmp_path / "lis-tui.toml").write_text('[network]\nmode = "on"\n')
    monkeypatch.chdir(tmp_path)
    trust._warned.clear()

    async def scenario():
        config = load_config(env={"XDG_STATE_HOME": str(tmp_path / "state"),
                                  "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
        app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            return config.network.mode, [n.message for n in app._notifications]

    mode, toasts = run(scenario())
    assert mode == "off"
    assert toasts == [f"{tmp_path}/lis-tui.toml: not trusted; it may come from a sandbox; review it, then: "
                      f"lis-tui trust {tmp_path}"]
