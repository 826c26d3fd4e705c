"""AGENTS.md, the project's (the workspace's top) and the user's (beside config.toml): in the system
prompt of `run` and the app, named on run's first line, off with --no-project-instructions, never
in paper mode, and read as a hostile file would be (capped, no link out of the project, no fifo)."""

import json
import os
import subprocess
import sys

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from isolation import SandboxSpec
from lis_tui.config.settings import load_config
from lis_tui.agent.instructions import MAX_BYTES, read_instructions
from test_run_cli import env_for

PROJECT_RULE = "Always run `make lint` before you submit. Format: {output_dir} stays {as written}."
USER_RULE = "Answer in British English."
SCRIPT = [reply(tool_calls=[call("execute_bash", {"command": "echo ok > /agent/output/answer.txt"})]),
          submit()]


def project(tmp_path, text=PROJECT_RULE):
    work = tmp_path / "project"
    work.mkdir(exist_ok=True)
    (work / "AGENTS.md").write_text(text)
    (tmp_path / "xdg" / "lis-tui").mkdir(parents=True, exist_ok=True)
    (tmp_path / "xdg" / "lis-tui" / "AGENTS.md").write_text(USER_RULE)
    return work


def lis_run(tmp_path, server, *args):
    argv = [sys.executable, "-m", "lis_tui.cli", "run", "--base-url", server.base_url, "--model", "m",
            "--rootfs", "host", "--output-dir", str(tmp_path / "out"), *args, "do the task"]
    return subprocess.run(argv, cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True,
                          timeout=120)


def system_of(server) -> str:
    first = server.chat_requests[0].messages[0]
    assert first["role"] == "system"
    return first["content"]


@pytest.mark.sandbox
def test_run_puts_both_files_in_the_system_message_as_written_and_names_them_first(tmp_path):
    work = project(tmp_path)
    with FakeOpenAI(list(SCRIPT)) as server:
        done = lis_run(tmp_path, server, "--workspace", str(work))
    assert done.returncode == 0, done.stderr
    system = system_of(server)
    assert PROJECT_RULE in system  # braces are not placeholders: the file's words, unchanged
    assert USER_RULE in system and system.index(USER_RULE) < system.index(PROJECT_RULE)
    assert PROJECT_RULE not in server.chat_requests[0].messages[1]["content"]
    first = done.stderr.splitlines()[0]
    assert first.startswith("instructions: read ") and str(work / "AGENTS.md") in first, done.stderr
    assert str(tmp_path / "xdg" / "lis-tui" / "AGENTS.md") in first


@pytest.mark.sandbox
@pytest.mark.parametrize("flags", [["--no-project-instructions"], ["--observation", "paper"]])
def test_off_with_the_flag_and_never_in_paper_mode(tmp_path, flags):
    work = project(tmp_path)
    with FakeOpenAI(list(SCRIPT)) as server:
        done = lis_run(tmp_path, server, "--workspace", str(work), *flags)
    assert done.returncode == 0, done.stderr
    assert PROJECT_RULE not in system_of(server) and USER_RULE not in system_of(server)
    assert "instructions:" not in done.stderr


@pytest.mark.sandbox
def test_the_app_s_conversation_sends_them_too(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    from lis_tui.conversation import Conversation

    work = project(tmp_path)
    with FakeOpenAI(list(SCRIPT)) as server:
        config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url}, env={},
                             paths=[])
        talk = Conversation(config, SandboxSpec(rootfs="host", workspace=str(work)), tmp_path / "out",
                            stream=False)
        try:
            finished = talk.ask("do the task")
        finally:
            talk.close()
    assert finished.reason == "submitted", finished.message
    assert PROJECT_RULE in system_of(server) and USER_RULE in system_of(server)
    assert "AGENTS.md" in talk.instructions.summary()


# -- reading a file that may be hostile (no sandbox needed) -----------------------------------------

def read(tmp_path, monkeypatch, **agent):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = load_config(overrides={f"agent.{k}": v for k, v in agent.items()}, env={}, paths=[])
    return read_instructions(config, SandboxSpec(rootfs="host", workspace=str(tmp_path / "project")))


def test_a_long_file_is_cut_and_says_so(tmp_path, monkeypatch):
    project(tmp_path, "x" * (MAX_BYTES - 1) + "é" + "TAIL" * 1000)
    found = read(tmp_path, monkeypatch)
    mine = next(f for f in found.files if f.whose == "project")
    assert mine.cut and "TAIL" not in mine.text and len(mine.text.encode()) <= MAX_BYTES + 2
    assert "longer than 64 KiB" in found.section()
    assert "(cut at 64 KiB)" in found.summary()


def test_a_link_out_of_the_project_is_not_followed(tmp_path, monkeypatch):
    work = project(tmp_path)
    (tmp_path / "secret").write_text("SECRET-KEY")
    (work / "AGENTS.md").unlink()
    (work / "AGENTS.md").symlink_to("../secret")
    found = read(tmp_path, monkeypatch)
    assert "SECRET-KEY" not in found.section()
    assert [f.whose for f in found.files] == ["user"]
    assert "not read: " in found.summary() and "link" in found.summary()
    (work / "AGENTS.md").unlink()
    (work / "AGENTS.md").symlink_to(tmp_path / "secret")  # absolute: out as well
    assert "SECRET-KEY" not in read(tmp_path, monkeypatch).section()


def test_a_link_inside_the_project_is_read(tmp_path, monkeypatch):
    work = project(tmp_path)
    (work / "docs").mkdir()
    (work / "docs" / "agents.md").write_text("INSIDE")
    (work / "AGENTS.md").unlink()
    (work / "AGENTS.md").symlink_to("docs/agents.md")
    assert "INSIDE" in read(tmp_path, monkeypatch).section()


def test_a_fifo_is_not_opened_for_reading_and_nothing_waits(tmp_path, monkeypatch):
    work = project(tmp_path)
    (work / "AGENTS.md").unlink()
    os.mkfifo(work / "AGENTS.md")
    found = read(tmp_path, monkeypatch)  # a blocking open would hang here
    assert [f.whose for f in found.files] == ["user"] and "not a regular file" in found.summary()


def test_prompts_of_the_paper_package_read_none(tmp_path, monkeypatch):
    project(tmp_path)
    assert read(tmp_path, monkeypatch, prompts="llm-in-sandbox:math").files == ()
    assert read(tmp_path, monkeypatch, project_instructions=False).files == ()


def test_a_hostile_project_name_is_shown_safely_on_run_s_first_line(tmp_path):
    import io

    from lis_tui.commands.run import StepLog
    from lis_tui.agent.events import InstructionsRead

    out = io.StringIO()
    StepLog(out).on_event(InstructionsRead("read /tmp/\x1b]0;owned\x07/AGENTS.md"))
    assert "\x1b" not in out.getvalue() and "\\x1b" in out.getvalue()


@pytest.mark.sandbox
def test_the_bench_never_reads_them(tmp_path, monkeypatch):
    from lis_tui.bench.runner import BenchOptions, BenchRunner
    from lis_tui.bench.tasks import load_tasks

    project(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path / "project")
    (tmp_path / "tasks.jsonl").write_text('{"id": "t1", "problem_statement": "Say ok.", "ground_truth": "ok"}\n')
    with FakeOpenAI(default=submit()) as server:
        config = load_config(None, {"model.base_url": server.base_url, "model.model": "m",
                                    "sandbox.rootfs": "host"}, env={}, paths=[])
        options = BenchOptions(output=tmp_path / "out", modes=("sandbox", "llm"), concurrency=1, progress=None)
        BenchRunner(load_tasks(tmp_path / "tasks.jsonl"), config, None, options, None).run()
    sent = json.dumps([r.messages for r in server.chat_requests])
    assert len(server.chat_requests) >= 2 and USER_RULE not in sent and "Standing instructions" not in sent
    from lis_tui.api import run_task  # the same config and files: `run` would send them

    with FakeOpenAI(list(SCRIPT)) as server:
        config.set("model.base_url", server.base_url, "test")
        run_task("Say ok.", config=config, output_dir=tmp_path / "run")
    assert USER_RULE in system_of(server)
