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
