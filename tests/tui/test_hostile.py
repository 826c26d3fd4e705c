"""A hostile model in the TUI: its command, reasoning, words, file names, answer and the server's
error are full of terminal escapes and markup. Nothing raw may reach the screen, no markup may
act, and the person still sees what was written (each escape visible; the Answer box shows the
file as a terminal would, as the output box does, and says that it holds escapes).

What is checked is what the terminal would be sent: the text of every strip the compositor
renders for the screen (styles aside), plus each widget's own text for what lies off screen."""

from __future__ import annotations

import json

import pytest

from fakes.hostile import HOSTILE, MARKUP, SHOWN, TITLE, raw_in
from fakes.openai_server import FakeOpenAI, call, error, reply, submit
from lis_tui.app.tui import create_app
from lis_tui.runs.replay import load_trajectory
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
from test_app import app_for, bash, modal_ready, run, texts, wait_for, web  # noqa: F401 (fixture)

BIG = (220, 100)  # room for the whole transcript: nothing scrolled away
VISIBLE = "".join(SHOWN[:5]) + " " + SHOWN[5]
"""HOSTILE as the person must see it."""
NAME = f"/testbed/n{TITLE}\u202e.txt"


def on_screen(app) -> str:
    """The characters the terminal would be sent for the current screen (styles aside)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(s.text for s in strip if not s.control) for strip in strips)


def assert_safe(shown: str) -> None:
    assert raw_in(shown) == [], shown


def write(path: str, text: str):
    return call("str_replace_editor", {"command": "create", "path": path, "file_text": text})


@pytest.mark.sandbox
def test_transcript_approval_dialogs_and_replay_show_hostile_text_safely(tmp_path, web):
    command = f"curl -s -m 20 {web.url}/hello.txt # {HOSTILE}"
    script = [reply(f"I will fetch it. {HOSTILE}", [bash(command)], reasoning=f"why {HOSTILE}"),
              reply(tool_calls=[write(NAME, f"body {HOSTILE}\n"),
                                write("/testbed/output/answer.txt", f"42 {HOSTILE}\n")]),
              submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, network="ask", task=f"task {HOSTILE}",
                          command_approval=True)
            app.conversation.host_services.append(web.hostport)
            async with app.run_test(size=BIG) as pilot:
                await wait_for(pilot, lambda: modal_ready(app, "CommandApprovalScreen"))
                dialog = app.screen.query_one("#command").text
                assert_safe(on_screen(app))
                await pilot.press("ctrl+r")  # Run: the model's command as it came
                await wait_for(pilot, lambda: modal_ready(app, "NetworkApprovalScreen"))
                asked = on_screen(app)
                await pilot.press("ctrl+o")
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await pilot.pause(0.3)  # the Markdown of the model's words is drawn last
                return (dialog, asked, on_screen(app), texts(app, ".tool-header"),
                        texts(app, ".reasoning-text"), texts(app, AnswerBlock),
                        server.chat_requests[1].tool_outputs[0], app.is_running)

    dialog, asked, screen, headers, reasoning, answers, output, running = run(scenario())
    assert dialog == f"curl -s -m 20 {web.url}/hello.txt # {VISIBLE}"
    assert "hello from the host" in output  # Run ran the command itself, escapes and all
    assert_safe(asked)
    assert web.hostport in asked and f"# {SHOWN[0]}" in asked
    for shown in (screen, *headers, *reasoning, *answers):
        assert_safe(shown)
    assert running  # the markup stayed text: nothing quit the app
    assert VISIBLE in headers[0] and f"why {VISIBLE}" in reasoning[0]
    assert f"✎ create /testbed/n\\x1b]0;pwned-title\\x07\\u202e.txt" in headers[1]
    assert f"body {VISIBLE}" in headers[1] and f"42 {VISIBLE}" in headers[2]  # the edit: as written
    # the Answer box: as a terminal shows the file (as the output box shows output), and said so
    assert f"42 31m{SHOWN[4]} {MARKUP}\n(answer.txt holds terminal escapes" in answers[0]
    for piece in (f"task {SHOWN[0]}", f"I will fetch it. {SHOWN[0]}", MARKUP):
        assert piece in screen

    async def replayed():
        app = create_app(replay=load_trajectory(tmp_path / "out"))
        async with app.run_test(size=BIG) as pilot:
            await pilot.pause(0.3)
            return on_screen(app), texts(app, ".tool-header"), app.is_running

    screen, headers, running = run(replayed())
    assert_safe(screen)
    assert running and VISIBLE in headers[0] and MARKUP in screen


@pytest.mark.sandbox
def test_files_and_review_screens_show_hostile_names_and_contents_safely(tmp_path):
    name = f"/testbed/output/m[@click=app.quit]x{TITLE}\u202e.txt"  # no "/" in a name: no [/]
    script = [reply(tool_calls=[write(name, f"body {HOSTILE}\n"),
                                write("/testbed/output/answer.txt", "4\n")]), submit()]

    async def scenario():
        with FakeOpenAI(script) as server:
            app = app_for(server, tmp_path, task="make files")
            async with app.run_test(size=BIG) as pilot:
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                await pilot.press("f5")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "FilesScreen"
                               and app.screen.query_one("OptionList").option_count > 1)
                listing = app.screen.query_one("OptionList")
                files = [str(listing.get_option_at_index(i).prompt)
                         for i in range(listing.option_count)]
                listing.highlighted = next(i for i, f in enumerate(files) if "pwned" in f)
                await pilot.press("enter")
                await wait_for(pilot, lambda: "body" in texts(app, "#preview")[0])
                seen = [on_screen(app), *files, *texts(app, "#preview")]
                await pilot.press("escape", "f6")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "ReviewScreen"
                               and app.screen.query_one("OptionList").option_count > 1)
                listing = app.screen.query_one("OptionList")
                changes = [str(listing.get_option_at_index(i).prompt)
                           for i in range(listing.option_count)]
                listing.highlighted = next(i for i, c in enumerate(changes) if "pwned" in c)
                await pilot.pause(0.2)
                seen += [on_screen(app), *changes, *texts(app, "#diff")]
                return seen, app.is_running

    seen, running = run(scenario())
    for shown in seen:
        assert_safe(shown)
    assert running
    label = "m[@click=app.quit]x\\x1b]0;pwned-title\\x07\\u202e.txt"
    assert f"/testbed/output/{label}" in seen[0]  # the list as drawn: markup as written
    assert f"body {VISIBLE}" in " ".join(seen)  # the preview and the diff
    assert any(label in s for s in seen[4:])  # the review's list


@pytest.mark.sandbox
def test_a_hostile_server_error_is_a_safe_notice_and_toast(tmp_path):
    async def scenario():
        with FakeOpenAI([], default=error(500, f"boom {HOSTILE}")) as server:
            app = app_for(server, tmp_path, task="anything")
            async with app.run_test(size=BIG) as pilot:
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock) and not app.screen.busy
                               and list(app._notifications))  # the toast is a message of its own
                await pilot.pause(0.2)
                return (on_screen(app), texts(app, NoticeBlock),
                        [n.message for n in app._notifications], app.is_running)

    screen, notices, toasts, running = run(scenario())
    for shown in (screen, *notices, *toasts):
        assert_safe(shown)
    assert running and f"boom {VISIBLE}" in notices[0] and f"boom {VISIBLE}" in toasts[0]
    assert MARKUP in screen.split("The run failed", 2)[-1]  # the toast, as written


def test_a_replayed_file_with_fields_of_the_wrong_type_is_drawn_not_fatal(tmp_path):
    """A trajectory a sandbox made (a workspace applied into ./lis-output) may put anything in
    any field: a list for the text, a dict for the arguments, text for the step number."""
    (tmp_path / "trajectory.json").write_text(json.dumps({
        "task": {"not": "text"}, "tools": "abc", "follow_ups": 7, "finish_reason": ["submitted"],
        "answer": {"a": 1}, "duration": "long", "steps": [
            "not a step",
            {"step": "one", "text": ["x", HOSTILE], "usage": {"prompt_tokens": "many"},
             "tool_calls": [{"id": 1, "name": None, "arguments": {"command": "ls"}, "output": [HOSTILE],
                             "exit_code": "0", "duration": "1s"}, "junk"]}]}))

    async def replayed():
        app = create_app(replay=load_trajectory(tmp_path))
        async with app.run_test(size=BIG) as pilot:
            await pilot.pause(0.3)
            return on_screen(app), app.is_running

    screen, running = run(replayed())
    assert_safe(screen)
    assert running and "command" in screen, screen
