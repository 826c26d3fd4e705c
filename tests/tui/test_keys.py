"""Keys as in every terminal agent (issue 53, items 2 and 6), driven by Textual's Pilot: Ctrl+C
twice asks before quitting where changes are not applied, a follow-up typed ahead goes back to
the prompt when the task is interrupted, Ctrl+U erases the prompt, no key answers the command
dialog in its first moment, toasts wait while a dialog asks; the review and files lists are
readable, the welcome's examples fit a workspace. The real terminal's side is test_keys_tmux."""

from __future__ import annotations

import io
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from rich.console import Console

from fakes.openai_server import FakeOpenAI, reply, submit
from isolation import SandboxSpec
from isolation.net import NetworkRequest
from lis_tui.app.widgets.blocks import NoticeBlock
from lis_tui.app.widgets.prompt import PromptInput
from lis_tui.config.settings import load_config
from test_app import SIZE, app_for, bash, modal_ready, run, texts, wait_for
from test_review import app_for as workspace_app, open_review, workspace


def running(app, command: str) -> bool:
    """`command` has started and has not ended."""
    status = app.main.query_one("StatusBar").status
    return command in status.doing and app.conversation.state == "working"


@pytest.mark.sandbox
def test_ctrl_c_twice_stops_the_step_then_asks_where_changes_are_not_applied(tmp_path):
    ws = workspace(tmp_path)
    script = [reply(tool_calls=[bash("echo new > /testbed/a.txt; sleep 30")])]

    async def scenario():
        with FakeOpenAI(script, default=submit()) as server:
            app = workspace_app(server, tmp_path, ws)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: running(app, "sleep 30"))
                await pilot.press("ctrl+c", "ctrl+c")
                await wait_for(pilot, lambda: modal_ready(app, "ConfirmScreen"), timeout=15)
                question = texts(app, "Label")[0]
                await pilot.press("ctrl+c")  # again: quits
                await pilot.pause()
                return question, app.is_running

    question, still_running = run(scenario())
    assert "1 change to" in question and "not applied" in question and "(ctrl+c again quits)" in question
    assert not still_running
    assert b"+new" in (tmp_path / "out" / "changes.patch").read_bytes()
    assert (ws / "a.txt").read_text() == "old\n"


@pytest.mark.sandbox
def test_a_follow_up_queued_while_a_task_runs_comes_back_to_the_prompt_when_it_is_interrupted(tmp_path):
    script = [reply(tool_calls=[bash("sleep 30")])]

    async def scenario():
        with FakeOpenAI(script, default=submit()) as server:
            app = app_for(server, tmp_path, task="wait a while")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: running(app, "sleep 30"))
                await pilot.press(*"now what", "enter")  # typed ahead, queued
                await pilot.pause()
                queued = texts(app, "#queued")[0]
                await pilot.press(*"draft")  # typed on after it: kept
                await pilot.press("escape")
                await wait_for(pilot, lambda: not app.main.busy, timeout=15)
                await pilot.pause()
                return (queued, app.main.query_one(PromptInput).text, texts(app, NoticeBlock),
                        app.main.query_one("#queued").display, len(server.chat_requests))

    queued, prompt, notices, still_shown, requests = run(scenario())
    assert "Queued: now what" in queued and "sent when this task ends" in queued
    assert prompt == "now what\ndraft" and not still_shown
    assert any("not sent (you interrupted the task): it is back in the prompt" in n for n in notices), notices
    assert requests == 1  # nothing was sent after the interrupt


def test_ctrl_u_erases_the_prompt_back_to_its_start_every_line(tmp_path):
    async def scenario():
        with FakeOpenAI([]) as server:
            app = app_for(server, tmp_path)
            async with app.run_test(size=(80, 24)) as pilot:
                prompt = app.main.query_one(PromptInput)
                await pilot.press(*"first", "ctrl+j", *"second", "ctrl+u")
                erased = prompt.text
                await pilot.press(*"keep this", "left", "left", "left", "left", "ctrl+u")
                return erased, prompt.text

    assert run(scenario()) == ("", "this")


def test_keys_as_the_command_dialog_opens_answer_nothing(tmp_path):
    """Enter, Esc and Ctrl+R typed ahead as the dialog opens answer nothing; past its grace, a
    reason typed and Enter skip with it."""
    from textual import events  # noqa: PLC0415
    from lis_tui.agent.events import Skip  # noqa: PLC0415
    from lis_tui.app.screens.approve_command import CommandApprovalScreen  # noqa: PLC0415

    async def scenario():
        with FakeOpenAI([]) as server:
            app = app_for(server, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                future: Future = Future()
                app.push_screen(CommandApprovalScreen("rm -rf /testbed/src", future), future.set_result)
                for key, char in (("enter", "\r"), ("escape", None), ("ctrl+r", None), ("enter", "\r")):
                    app.post_message(events.Key(key, char))  # behind the dialog's first frame
                await wait_for(pilot, lambda: modal_ready(app, "CommandApprovalScreen"))
                early = future.done(), type(app.screen).__name__
                await pilot.press(*"no", "enter")
                return early, future.result(timeout=5)

    early, answer = run(scenario())
    assert early == (False, "CommandApprovalScreen")
    assert answer == Skip("no")


def test_toasts_wait_while_a_dialog_asks_and_show_once_it_closed(tmp_path):
    async def scenario():
        config = load_config(overrides={"model.model": "m", "model.base_url": "http://127.0.0.1:9/v1"},
                             env={}, paths=[])
        from lis_tui.app.tui import create_app  # noqa: PLC0415

        app = create_app(config, SandboxSpec(rootfs="host", network="off"), output_dir=tmp_path / "out")
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await pilot.press("f2")  # a toast: "Network mode: ASK"
            await wait_for(pilot, lambda: app.screen.query("Toast"))
            future = app.ask_network(NetworkRequest("pypi.org", 443, "CONNECT"))
            await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
            app.notify("raised while it asks")
            await pilot.pause(0.2)
            over_dialog = len(app.screen.query("Toast"))
            await pilot.press("escape")  # deny
            await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
            await wait_for(pilot, lambda: len(app.screen.query("Toast")) == 2)
            return over_dialog, [str(toast.render()) for toast in app.screen.query("Toast")], future.result(timeout=5).answer

    over_dialog, toasts, answer = run(scenario())
    assert over_dialog == 0 and answer == "deny"
    assert any("Network mode: ASK" in t for t in toasts) and any("raised while it asks" in t for t in toasts)


LONG = "src/lis_tui/app/screens/deeply/nested/the_module.py"


@pytest.mark.sandbox
def test_the_review_list_keeps_each_path_on_a_line_and_the_files_panel_puts_the_project_first(tmp_path):
    ws = workspace(tmp_path)
    for tooling in (".venv/lib/python3/site.py", ".mypy_cache/3.12/a.json", "node_modules/x/index.js"):
        (ws / tooling).parent.mkdir(parents=True)
        (ws / tooling).write_text("tool\n")
    edit = f"mkdir -p /testbed/{LONG.rsplit('/', 1)[0]} && echo x > /testbed/{LONG} && echo y > /testbed/src/main.py"

    async def scenario():
        with FakeOpenAI([reply(tool_calls=[bash(edit)]), submit()]) as server:
            app = workspace_app(server, tmp_path, ws)
            async with app.run_test(size=(80, 40)) as pilot:  # 80 wide; tall, so every path shows
                await open_review(pilot, app)
                listing = app.screen.query_one("OptionList")
                await pilot.pause()
                lines = [listing.render_line(y).text.strip() for y in range(listing.size.height)]
                keys = [b.binding.description for b in app.screen.active_bindings.values() if b.binding.show]
                await pilot.press("escape")
                await pilot.press("f5")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "FilesScreen"
                               and app.screen.query_one("OptionList").option_count > 0)
                files = app.screen.query_one("OptionList")
                return lines, keys, [str(files.get_option_at_index(i).id) for i in range(files.option_count)]

    lines, keys, files = run(scenario())
    named = [line for line in lines if line.endswith("the_module.py")]
    assert named == ["+ …/nested/the_module.py"], lines  # its start gives way, never its name
    assert "+" not in lines and len(lines) > 7, lines  # no mark alone on a line; each path on one
    assert "Close (changes kept)" in keys and not any("Discard" in k for k in keys)
    assert files == [f"{ws}/a.txt", f"{ws}/src/main.py",  # the project's own files first (at its own path)
                     f"{ws}/.mypy_cache/", f"{ws}/.venv/", f"{ws}/node_modules/"], files  # tools: named


def test_the_welcome_offers_examples_about_the_project_in_a_workspace(tmp_path):
    from lis_tui.app.widgets.welcome import welcome_text  # noqa: PLC0415

    def shown(spec) -> str:
        conversation = SimpleNamespace(config=load_config(env={}, paths=[]), spec=spec, network="off",
                                       model_name="m")
        console = Console(record=True, width=200, file=io.StringIO())
        console.print(welcome_text(conversation, str(tmp_path / "runs")))
        return console.export_text()

    project = shown(SandboxSpec(rootfs="host", workspace=tmp_path))
    assert "Run the project's tests" in project and "primes" not in project
    assert "primes" in shown(SandboxSpec(rootfs="host"))
