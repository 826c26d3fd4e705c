"""What a new user meets in the app (issue 14): the setup screen's found servers and rootfs offer,
the welcome, the status line's live step and run directory, the help, the footer, F5's words.
Pilot against the scripted model server, a real sandbox, a real rootfs store."""

from __future__ import annotations

import io
import re
import socket
import tarfile
import threading
import time

import pytest

from fakes.hostile import HOSTILE, SHOWN, raw_in
from fakes.openai_server import FakeOpenAI, call, reply, submit
from isolation import SandboxSpec
from isolation.rootfs import RootfsError, RootfsStore
from lis_tui.app.tui import create_app
from lis_tui.config.settings import load_config
from lis_tui.app.rootfs_offer import RootfsOffer
from lis_tui.app.screens.files import empty_text
from lis_tui.app.widgets.blocks import AnswerBlock, NoticeBlock
from lis_tui.app.widgets.prompt import PromptInput
from lis_tui.app.widgets.status import StatusBar
from lis_tui.app.widgets.welcome import Welcome

from test_app import run, texts, wait_for

HOSTILE_TITLE = "\x1b]2;pwned\x07"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live_app(server, tmp_path, model: str = "m", **kwargs):
    config = load_config(overrides={"model.model": model, "model.base_url": server.base_url,
                                    "model.max_retries": 0}, env={}, paths=[])
    return create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                      server_ports=(), **kwargs)


def footer_fits(app) -> bool:
    """Every key of the footer is drawn inside the screen (none cut off at the right edge)."""
    keys = list(app.screen.query("FooterKey"))
    return bool(keys) and all(k.region.right <= app.size.width for k in keys)


# -- the setup screen ---------------------------------------------------------------------------

@pytest.mark.sandbox
def test_setup_offers_the_servers_found_and_one_enter_saves_and_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    script = [reply(tool_calls=[call("execute_bash", {"command": "echo 4 > /testbed/output/answer.txt"})]),
              submit()]

    async def scenario():
        with FakeOpenAI(script, models=["qwen3-4b", "gemma3-1b", "gemma3-1b"]) as server:
            ports = (("vLLM", closed_port()), ("llama.cpp server", server.port))
            config = load_config(env={}, paths=[])  # nothing says where the model is
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                             task="What is 2+2?", server_ports=ports,
                             rootfs_offer=RootfsOffer(exists=lambda: True))
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                               and app.screen.query_one("#found").option_count == 3)
                found = texts(app, "#found-text")[0]
                await pilot.press("down", "enter")  # the second model of the one server found
                await wait_for(pilot, lambda: app.screen.query(AnswerBlock))
                status = app.main.query_one(StatusBar).status
                return found, server.chat_requests[0].body["model"], status.model

    found, model, shown = run(scenario())
    assert "Found on this machine" in found
    assert model == "gemma3-1b" and shown == "gemma3-1b"
    saved = (tmp_path / "xdg" / "lis-tui" / "config.toml").read_text()
    assert "gemma3-1b" in saved and "127.0.0.1" in saved


def test_setup_says_when_no_server_was_found(tmp_path):
    async def scenario():
        config = load_config(env={}, paths=[])
        app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                         server_ports=(("Ollama", closed_port()),),
                         rootfs_offer=RootfsOffer(exists=lambda: True))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                           and "No model server" in texts(app, "#found-text")[0])
            return texts(app, "#found-text")[0], app.screen.query_one("#found").display, \
                bool(app.screen.query("#rootfs"))

    text, listed, offered = run(scenario())
    assert "(Ollama " in text and "enter one below" in text
    assert not listed and not offered  # the rootfs exists already: nothing to offer


def test_a_found_server_s_model_names_are_shown_as_text(tmp_path):
    # A server on this machine is not trusted any more than the model: its list is shown safe.
    async def scenario():
        with FakeOpenAI(models=[f"evil {HOSTILE}"]) as server:
            config = load_config(env={}, paths=[])
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                             server_ports=(("vLLM", server.port),),
                             rootfs_offer=RootfsOffer(exists=lambda: True))
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen"
                               and app.screen.query_one("#found").option_count == 1)
                option = app.screen.query_one("#found").get_option_at_index(0)
                await pilot.pause(0.1)
                return option.prompt.plain, app.is_running

    shown, running = run(scenario())
    assert not raw_in(shown) and all(piece in shown for piece in SHOWN) and running


def tiny_tarball(path) -> None:
    """The least a store takes as a root filesystem: a /bin/sh, and a file to find again."""
    with tarfile.open(path, "w") as tar:
        for name, data in (("etc/os-release", b"NAME=tiny\n"), ("bin/sh", b"#!/bin/false\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))


def quick_offer(tmp_path, gate: threading.Event, fail: bool = False) -> RootfsOffer:
    """The offer's flow with a build that takes no minutes: a tiny tarball imported into a real
    store, after a first progress line and a gate the test opens."""
    store = RootfsStore(tmp_path / "store")
    tiny_tarball(tmp_path / "tiny.tar")

    def build(progress, stop) -> str:
        progress("Get:1 http://archive.example/ubuntu noble InRelease [256 kB]")
        deadline = time.monotonic() + 30
        while not gate.wait(0.05):
            if stop.is_set() or time.monotonic() > deadline:
                raise RootfsError("interrupted; nothing half-made was kept")
        if fail:
            raise RootfsError("the mirror could not be reached. Fix: check the network")
        store.import_tar("tiny", tmp_path / "tiny.tar", progress=progress)
        store.set_default("tiny")
        return "tiny"

    return RootfsOffer(size="about 1 kB", time="a moment", build=build,
                       exists=lambda: any(r.name == "tiny" for r in store.list()))


def test_the_rootfs_offer_can_be_skipped_then_built_from_f4_with_progress(tmp_path):
    gate = threading.Event()

    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path, rootfs_offer=quick_offer(tmp_path, gate))
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.press("f4")
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                offer = texts(app, "#rootfs-text")[0]
                await pilot.press("escape")  # skipped: nothing built
                await wait_for(pilot, lambda: type(app.screen).__name__ == "MainScreen")
                skipped = app.rootfs_job.state
                await pilot.press("f4")  # offered again
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                await pilot.press("ctrl+b")
                await wait_for(pilot, lambda: "Get:1" in texts(app, "#rootfs-text")[0])
                building = texts(app, "#rootfs-text")[0]
                await pilot.press("escape")  # the build goes on without the screen
                await wait_for(pilot, lambda: "building the recommended" in texts(app, Welcome)[0])
                gate.set()
                await wait_for(pilot, lambda: app.rootfs_job.state != "building")
                assert app.rootfs_job.state == "built", app.rootfs_job
                await wait_for(pilot, lambda: app.main.query_one(StatusBar).status.rootfs == "tiny")
                welcome = texts(app, Welcome)[0]
                spec_rootfs = app.conversation.spec.rootfs
                await pilot.press("f4")  # built: said, with no button to build it again
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen")
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                built = texts(app, "#rootfs-text")[0], app.screen.query_one("#build").display
                return offer, skipped, building, welcome, spec_rootfs, built

    offer, skipped, building, welcome, spec_rootfs, built = run(scenario())
    assert "about 1 kB, a moment" in offer and "lis-tui rootfs build ubuntu-paper --preset paper" in offer
    assert skipped == "offered"
    assert "building" in building and "Get:1 http://archive.example/ubuntu" in building
    assert spec_rootfs == "tiny" and "tiny" in welcome
    assert "✔ built tiny" in built[0] and not built[1]
    assert (tmp_path / "store" / "tiny" / "root" / "etc" / "os-release").read_text() == "NAME=tiny\n"


def test_quitting_while_the_rootfs_builds_asks_first_then_stops_the_build(tmp_path):
    gate = threading.Event()

    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path, rootfs_offer=quick_offer(tmp_path, gate))
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.press("f4")
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                await pilot.press("ctrl+b")
                await wait_for(pilot, lambda: app.rootfs_job.state == "building")
                await pilot.press("ctrl+q")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
                question = texts(app, "Label")
                await pilot.press("ctrl+y")
                await wait_for(pilot, lambda: app.rootfs_job.state != "building", timeout=10)
                return question, app.rootfs_job.state

    question, state = run(scenario())
    assert any("rootfs is still building" in q for q in question), question
    assert state == "failed"  # stopped: nothing was kept
    assert not (tmp_path / "store" / "tiny").exists()


def test_a_failed_rootfs_build_says_why_and_can_be_tried_again(tmp_path):
    gate = threading.Event()
    gate.set()

    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path, rootfs_offer=quick_offer(tmp_path, gate, fail=True))
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.press("f4")
                await wait_for(pilot, lambda: app.screen.query("#rootfs"))
                await pilot.press("ctrl+b")
                await wait_for(pilot, lambda: app.rootfs_job.state == "failed")
                await pilot.pause(0.1)
                return texts(app, "#rootfs-text")[0], app.screen.query_one("#build").display, \
                    app.main.query_one(StatusBar).status.rootfs

    text, button, rootfs = run(scenario())
    assert "the build failed" in text and "could not be reached" in text
    assert button and rootfs == "host"


# -- the main screen ----------------------------------------------------------------------------

def test_the_welcome_says_what_to_type_the_keys_and_the_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))

    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path, model="qwen3-4b")
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(Welcome))
                before = texts(app, Welcome)[0]
                await pilot.press("f2")
                after = texts(app, Welcome)[0]
                return before, after, footer_fits(app), server.base_url

    before, after, fits, url = run(scenario())
    assert "Type a task below and press Enter" in before and "For example" in before
    assert f"qwen3-4b at {url}" in before and "Rootfs" in before and "host" in before
    assert "Network      OFF" in before and "Network      ASK" in after
    assert str(tmp_path / "data" / "lis-tui" / "runs") in before
    assert "F1 all keys" in before and fits


@pytest.mark.parametrize("size", [(100, 30), (80, 24)])
def test_help_fits_scrolls_says_esc_closes_it_and_where_the_run_goes(tmp_path, size):
    async def scenario():
        with FakeOpenAI() as server:
            app = live_app(server, tmp_path)
            async with app.run_test(size=size) as pilot:
                await pilot.press("f1")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
                await pilot.pause(0.1)
                hint = app.screen.query_one(".hint")
                box = app.screen.query_one("#help")
                shown = (texts(app, ".title")[0], texts(app, "#help-keys")[0],
                         hint.region.bottom <= app.size.height and hint.region.height == 1,
                         box.region.bottom <= app.size.height)
                await pilot.press("down", "down", "down")  # the keys scroll; title and hint stay
                await pilot.pause(0.1)
                scrolled = box.scroll_y > 0 and hint.region.bottom <= app.size.height
                await pilot.press("escape")
                return shown, scrolled, type(app.screen).__name__

    (title, keys, hint_in_view, fits), scrolled, after = run(scenario())
    assert scrolled
    assert "Esc closes this help" in title and hint_in_view and fits
    assert "Runs go to" in keys and "Log" not in keys
    assert after == "MainScreen"


@pytest.mark.sandbox
def test_the_status_line_shows_the_running_step_and_interrupting_goes_when_it_stopped(tmp_path):
    command = f"sleep 30 # {HOSTILE_TITLE}"
    script = [reply("Waiting.", [call("execute_bash", {"command": command})])]

    async def scenario():
        with FakeOpenAI(script, models=["fake-model"]) as server:
            app = live_app(server, tmp_path, model="")
            async with app.run_test(size=(80, 24)) as pilot:
                before = app.main.query_one(StatusBar).status.model
                await pilot.click(PromptInput)
                await pilot.press(*"wait", "enter")
                status = app.main.query_one(StatusBar)
                await wait_for(pilot, lambda: "execute_bash sleep 30" in status.status.doing)
                ticked = re.compile(r"pwned\\x07  [1-9]\d*s\n")  # the step's clock, each second
                await wait_for(pilot, lambda: ticked.search(texts(app, StatusBar)[0]))
                line = texts(app, StatusBar)[0]
                busy_footer = footer_fits(app)
                await pilot.press("f5")
                await wait_for(pilot, lambda: "empty so far" in "".join(texts(app, "#preview")))
                await pilot.press("escape")
                seen, change = [], status.change  # every line the status showed from now on
                status.change = lambda **fields: (seen.append(fields.get("doing")),
                                                  change(**fields))
                await pilot.press("escape")  # interrupt
                interrupting = [d for d in seen if d is not None][:1]
                await wait_for(pilot, lambda: not app.main.busy)
                await pilot.pause(0.1)
                toasts = [n.message for n in app._notifications]
                return (before, line, busy_footer, interrupting, status.status, toasts,
                        texts(app, NoticeBlock), len(app.screen.query(Welcome)))

    before, line, fits, interrupting, status, toasts, notices, welcome = run(scenario())
    assert before in ("(server default)", "fake-model")  # the welcome's check may have named it
    assert status.model == "fake-model"
    assert "▶ step 1 · execute_bash sleep 30 # \\x1b]2;pwned\\x07" in line and "\x1b" not in line
    assert fits
    assert interrupting == ["interrupting…"] and status.doing == ""
    assert not any("Interrupting" in t for t in toasts)
    assert status.sandbox == "ready" and status.run_dir == str(tmp_path / "out")
    assert any("interrupted" in n for n in notices) and not welcome


@pytest.mark.sandbox
def test_the_run_directory_is_named_in_the_status_line_and_the_help(tmp_path):
    async def scenario():
        with FakeOpenAI([submit()]) as server:
            app = live_app(server, tmp_path, task="done already")
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(NoticeBlock) or
                               app.screen.query(AnswerBlock))
                await wait_for(pilot, lambda: not app.main.busy)
                line = texts(app, StatusBar)[0]
                await pilot.press("f1")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
                return line, texts(app, "#help-keys")[0]

    line, keys = run(scenario())
    out = str(tmp_path / "out")
    assert f"run {out}" in line and "This run" in keys and out in keys


def test_the_files_panel_says_why_it_is_empty(tmp_path):
    config = load_config(overrides={"model.model": "m"}, env={}, paths=[])
    from lis_tui.conversation import Conversation

    fresh = Conversation(config, SandboxSpec(rootfs="host"), tmp_path / "out")
    assert "starts with the first task" in empty_text(fresh)
    fresh.out = tmp_path / "out"
    fresh.state = "closed"
    assert "not running" in empty_text(fresh)
    fresh.state = "starting"
    assert "starting" in empty_text(fresh)
    assert "mode llm" in empty_text(Conversation(config, None, tmp_path / "out"))


def test_the_welcome_says_the_workspace_and_what_a_trusted_project_config_sets(tmp_path):
    """A trusted ./lis-tui.toml that changes the step limit, and where the project is seen, are
    said on the first screen, not found out later."""
    from types import SimpleNamespace

    from rich.console import Console

    from lis_tui.app.widgets.welcome import welcome_text

    project = tmp_path / "project"
    project.mkdir()
    (project / "lis-tui.toml").write_text("[agent]\nmax_steps = 5\n")
    config = load_config(env={}, paths=[project / "lis-tui.toml"])
    conversation = SimpleNamespace(config=config, spec=SandboxSpec(rootfs="host", workspace=project),
                                   network="off", model_name="m")
    console = Console(record=True, width=200)
    console.print(welcome_text(conversation, str(tmp_path / "runs")))
    shown = console.export_text()
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in shown.splitlines() if line.strip()}
    assert rows["Workspace"].startswith(f"{project} is seen at its own path (and /testbed), copy-on-write"), shown
    assert rows["Project"] == f"config {project / 'lis-tui.toml'} (trusted) sets agent.max_steps = 5", shown
    plain = SimpleNamespace(config=load_config(env={}, paths=[]), spec=SandboxSpec(rootfs="host"),
                            network="off", model_name="m")
    console = Console(record=True, width=200)
    console.print(welcome_text(plain, str(tmp_path / "runs")))
    assert "Workspace" not in console.export_text() and "Project config" not in console.export_text()


def test_the_welcome_asks_the_server_without_waiting_and_names_the_model_it_serves(tmp_path, monkeypatch):
    """Issue 36: the welcome says whether the configured server answers (a server that never
    answers does not hold the first screen) and the fix when it does not; after the setup saved
    a server but no model name, the status line and the welcome name the model it will use."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    silent = socket.socket()  # listens, never answers: the check waits until it is closed
    silent.bind(("127.0.0.1", 0))
    silent.listen()

    def model_row(app) -> str:  # the Model row and the line under it
        lines = texts(app, Welcome)[0].splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("Model"))
        return "\n".join(lines[at:at + 2])

    async def scenario():
        with FakeOpenAI(models=[f"evil {HOSTILE}", "qwen3-4b"]) as server:
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
            config = load_config(overrides={"model.base_url": url}, env={}, paths=[])
            app = create_app(config, SandboxSpec(rootfs="host"), output_dir=tmp_path / "out",
                             server_ports=())
            async with app.run_test(size=(120, 35)) as pilot:
                await wait_for(pilot, lambda: app.screen.query(Welcome))
                asking = model_row(app)
                silent.close()  # its waiting connection is reset: the check fails
                await wait_for(pilot, lambda: "✘" in model_row(app))
                failed = texts(app, Welcome)[0]
                await pilot.press("f4")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "SetupScreen")
                app.screen.query_one("#base_url").value = server.base_url  # no model name
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: "✔" in model_row(app))
                return (asking, failed, model_row(app), texts(app, StatusBar)[0], server.base_url)

    asking, failed, welcome, status, url = run(scenario())
    assert "asking it" in asking
    assert "could not reach model server" in failed and "is the server running?" in failed
    evil = f"evil {''.join(SHOWN[:5])}"  # the server's first model, as the server named it
    assert status.startswith(f"evil {SHOWN[0]}") and not raw_in(status)  # cut to fit, made safe
    assert f"{evil} {SHOWN[5]} (the server's first) at {url}  ✔ answers" in welcome
    assert not raw_in(welcome)


def test_the_welcome_says_when_the_server_lists_no_model_or_not_the_one_set():
    from lis_tui.model.discover import ServerCheck
    from lis_tui.app.widgets.welcome import server_text

    unlisted = server_text(f"m{HOSTILE_TITLE}", ServerCheck(models=("a", "b", "c", "d"))).plain
    assert unlisted.startswith("\n⚠ it answers, but does not list m\\x1b]2;pwned\\x07")
    assert unlisted.endswith("it serves a, b, c and 1 more") and not raw_in(unlisted)
    assert "lists no model: F4 sets a name" in server_text("", ServerCheck()).plain
    assert server_text("m", ServerCheck()).plain == "  ✔ answers"  # a model is set: it is asked for
