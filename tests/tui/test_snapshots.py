"""Snapshots (pytest-textual-snapshot) of the main screen, the network modal, the command modal
and the review screen.

Built from a saved run (and, for the review, a real sandbox's fixed edits to a fixed workspace),
so nothing depends on timing. Skipped when the plugin is not installed;
`pytest tests/tui/test_snapshots.py --snapshot-update` redraws them after a deliberate change.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("pytest_textual_snapshot")

from isolation import Sandbox, SandboxSpec  # noqa: E402
from isolation.net import NetworkRequest  # noqa: E402
from lis_tui.app.tui import create_app  # noqa: E402
from lis_tui.app.screens.approve_command import CommandApprovalScreen  # noqa: E402
from lis_tui.app.screens.approve_network import NetworkApprovalScreen  # noqa: E402
from lis_tui.app.screens.review import ReviewScreen  # noqa: E402

SIZE = (80, 24)


def bash(call_id: str, command: str, output: str, exit_code: int = 0) -> dict:
    return {"id": call_id, "name": "execute_bash", "arguments": json.dumps({"command": command}),
            "output": output, "exit_code": exit_code, "duration": 0.25}


def mid_run() -> dict:
    """A run two steps in, not finished: what the main screen shows while a task runs."""
    return {"id": "20261122T010000Z-abc123", "task": "How many primes are below 1000?",
            "model": {"model": "qwen3-32b"}, "sandbox": {"rootfs": "host", "network": "ask"},
            "agent": {"max_steps": 100}, "finish_reason": None, "steps": [
                {"step": 1, "started": 0, "text": "I will count them with a **sieve**.",
                 "usage": {"prompt_tokens": 1200, "completion_tokens": 40},
                 "tool_calls": [bash("c1", "cat > sieve.py <<'EOF'\nprint(sum(1 for n in range(2, "
                                           "1000) if all(n % d for d in range(2, n))))\nEOF",
                                     "")]},
                {"step": 2, "started": 0, "text": "",
                 "usage": {"prompt_tokens": 1300, "completion_tokens": 20},
                 "tool_calls": [bash("c2", "python3 sieve.py", "168")]}]}


async def _replayed(pilot) -> None:
    """The replay is drawn and scrolled to its end before a modal goes over it: on a loaded
    machine (CI) the scroll can come late, and a snapshot taken before it shows the top."""
    from lis_tui.app.widgets.transcript import Transcript

    for _ in range(300):
        await pilot.pause(0.01)
        transcript = pilot.app.screen.query_one(Transcript)
        if transcript.max_scroll_y > 0 and transcript.scroll_y >= transcript.max_scroll_y:
            break


async def _settled(pilot) -> None:
    """The modal is mounted and has focused its field (the network dialog: drawn, and its grace
    over, which focuses nothing), for the same reason."""
    for _ in range(300):
        await pilot.pause(0.01)
        screen = pilot.app.screen
        if screen.is_modal and (pilot.app.focused is not None or getattr(screen, "takes_answers", False)):
            break
    await pilot.pause(0.05)


def test_main_screen_mid_run(snap_compare):
    assert snap_compare(create_app(replay=mid_run()), terminal_size=SIZE, run_before=_replayed)


def test_network_modal(snap_compare):
    async def ask(pilot):
        request = NetworkRequest("pypi.org", 443, "CONNECT")
        await _replayed(pilot)
        await pilot.app.push_screen(NetworkApprovalScreen(request, "pip install sympy"))
        await _settled(pilot)

    assert snap_compare(create_app(replay=mid_run()), terminal_size=SIZE, run_before=ask)


def test_command_modal(snap_compare):
    async def ask(pilot):
        await _replayed(pilot)
        await pilot.app.push_screen(CommandApprovalScreen("rm -rf /testbed/output/*"))
        await _settled(pilot)

    assert snap_compare(create_app(replay=mid_run()), terminal_size=SIZE, run_before=ask)


WORKSPACE = {"app.py": "def greet(name):\n    return 'hello ' + name\n\n\nprint(greet('world'))\n",
             "notes.md": "# Notes\n\nNothing yet.\n", "old.txt": "to be removed\n"}
EDITS = ("sed -i \"s/'hello ' + name/f'hello, {name}!'/\" app.py && rm old.txt"
         " && printf 'def test_greet():\\n    assert True\\n' > test_app.py")


@pytest.mark.sandbox
def test_review_screen(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative workspace: the title shows `ws`, not a temp path
    (tmp_path / "ws").mkdir()
    for name, text in WORKSPACE.items():
        (tmp_path / "ws" / name).write_text(text)

    async def review(pilot):
        # The screen's whole need of a conversation: its sandbox, and no output dir yet.
        await pilot.app.push_screen(ReviewScreen(SimpleNamespace(sandbox=sb, out=None)))
        deadline = time.monotonic() + 30
        while not (pilot.app.screen.query_one("OptionList").option_count
                   and pilot.app.screen.query_one("#diff").content):
            assert time.monotonic() < deadline, "the review never listed the changes"
            await pilot.pause(0.05)

    with Sandbox(SandboxSpec(rootfs="host", workspace="ws")) as sb:
        assert sb.exec(EDITS).exit_code == 0
        assert snap_compare(create_app(replay=mid_run()), terminal_size=SIZE, run_before=review)


# -- at 100x30, the size issue 14 was seen at ----------------------------------------------------
BIG = (100, 30)


def test_main_screen_mid_run_at_100x30(snap_compare):
    assert snap_compare(create_app(replay=mid_run()), terminal_size=BIG, run_before=_replayed)


def test_help_at_100x30(snap_compare):
    async def help_(pilot):
        await _replayed(pilot)
        await pilot.press("f1")
        await _settled(pilot)

    assert snap_compare(create_app(replay=mid_run()), terminal_size=BIG, run_before=help_)


def _live(monkeypatch, model: str = "qwen3-4b"):
    """A live app whose server refuses the welcome's check (fixed URL and places)."""
    from lis_tui.config.settings import load_config
    from lis_tui.app.rootfs_offer import RootfsOffer

    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")  # outside any home: shown as written
    monkeypatch.setenv("XDG_DATA_HOME", "/srv/share")  # where the runs go
    overrides = {"model.base_url": "http://127.0.0.1:9/v1"}  # discard: refused, said the same each time
    if model:
        overrides["model.model"] = model
    config = load_config(overrides=overrides, env={}, paths=[])
    return create_app(config, SandboxSpec(rootfs="host"), server_ports=(("vLLM", 9),),
                      rootfs_offer=RootfsOffer(exists=lambda: False))


async def _welcomed(pilot):
    for _ in range(3000):  # until the server's check answered (loaded machines: up to 30 s)
        await pilot.pause(0.01)
        welcome = pilot.app.screen.query("Welcome")
        if welcome and welcome.first().check is not None and pilot.app.focused is not None:
            break
    pilot.app.screen.query_one("#prompt").cursor_blink = False  # focused: drawn one way (the wait varies)
    await pilot.pause(0.05)


def test_welcome_at_100x30(snap_compare, monkeypatch):
    assert snap_compare(_live(monkeypatch), terminal_size=BIG, run_before=_welcomed)


def test_setup_at_100x30(snap_compare, monkeypatch):
    from lis_tui.config.settings import load_config
    from lis_tui.app.rootfs_offer import RootfsOffer

    async def searched(pilot):  # port 9 (discard) has no server on loopback: "none found"
        for _ in range(500):
            await pilot.pause(0.01)
            shown = pilot.app.screen.query("#found-text")
            if shown and "No model server" in str(shown.first().render()):
                break
        pilot.app.screen.query_one("#base_url").cursor_blink = False  # focused: drawn one way
        await pilot.pause(0.05)

    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    config = load_config(env={}, paths=[])  # nothing says where the model is: setup first
    app = create_app(config, SandboxSpec(rootfs="host"), server_ports=(("vLLM", 9),),
                     rootfs_offer=RootfsOffer(exists=lambda: False))
    assert snap_compare(app, terminal_size=BIG, run_before=searched)


def test_welcome_at_80x24(snap_compare, monkeypatch):
    assert snap_compare(_live(monkeypatch), terminal_size=SIZE, run_before=_welcomed)


def test_help_at_80x24(snap_compare):
    async def help_(pilot):
        await _replayed(pilot)
        await pilot.press("f1")
        await _settled(pilot)

    assert snap_compare(create_app(replay=mid_run()), terminal_size=SIZE, run_before=help_)
