"""Continuing a past run: `lis-tui run --resume ID "follow-up"` gives the model the conversation so far
in a fresh sandbox holding the run's work (its workspace changes applied inside, its output files put
back), never touching the host project; what cannot be continued is refused with the fix."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from past_runs import env_for, past_run

FIRST = ("cd /testbed && echo made-in-run-1 > made.txt && echo edited-inside >> notes.txt "
         "&& echo kept-output > /agent/output/kept.txt && echo 42 > /agent/output/answer.txt "
         "&& head -c 9000000 /dev/urandom > big.bin")  # kept beside the patch, not in it
LOOK = ("cat /testbed/made.txt /agent/output/kept.txt /agent/output/answer.txt /testbed/notes.txt "
        "&& sha256sum /testbed/big.bin")


def lis(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", *args], cwd=tmp_path, env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=300)


def bash(command: str):
    return call("execute_bash", {"command": command})


@pytest.mark.sandbox
def test_run_resume_sends_the_conversation_and_puts_the_work_back_inside_the_new_sandbox(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("one\n")
    run1 = past_run(tmp_path, monkeypatch, [reply("working", [bash(FIRST)]), submit()], "make things",
                     {"agent.max_context_tokens": 90000}, workspace=project)
    before = json.loads((run1 / "trajectory.json").read_text())["messages"]
    (project / "notes.txt").write_text("one\nchanged on the host since\n")  # the run's edit no longer applies

    seen: dict = {}

    def look(request):
        seen["messages"] = request.messages
        return reply("looking", [bash(LOOK)])

    def done(request):
        seen["output"] = request.tool_outputs[-1]
        return submit()

    with FakeOpenAI([look, done]) as server:
        second = lis(tmp_path, "run", "--base-url", server.base_url, "--model", "m",
                     "--resume", run1.name.rsplit("-", 1)[1], "again")
    assert second.returncode == 0, second.stderr
    # The model got the first conversation as it was, then the follow-up.
    assert seen["messages"][:len(before)] == before
    assert seen["messages"][len(before)]["role"] == "user" and seen["messages"][len(before)]["content"].startswith("again")
    assert ("Not all of the earlier work could be put back into this computer: notes.txt (patch does not apply: the "
            "project changed since the run)") in seen["messages"][len(before)]["content"]  # the model is told
    # The run's new file and output files are in the new sandbox; the host's edit wins over the run's.
    big = hashlib.sha256(max((run1 / "blobs").iterdir(), key=lambda p: p.stat().st_size).read_bytes()).hexdigest()
    assert seen["output"].split() == ["made-in-run-1", "kept-output", "42", "one", "changed", "on", "the", "host",
                                      "since", big, "/testbed/big.bin"]
    assert not (project / "made.txt").exists()  # put back inside, never on the host
    assert f"resumed: put back from {run1.name}: 2 changed files of the workspace" in second.stderr
    assert ("2 output files in /agent/output; not put back: notes.txt (patch does not apply: the project "
            "changed since the run)") in second.stderr
    run2 = Path(re.search(r"saved in (/\S+)", second.stderr).group(1))
    doc = json.loads((run2 / "trajectory.json").read_text())
    assert doc["resumed_from"] == run1.name and doc["resumed_from_path"] == str(run1)
    assert doc["messages"][:len(before)] == before and doc["task"] == "again"
    assert doc["resumed_sandbox"].startswith(f"put back from {run1.name}: 2 changed files")
    assert doc["agent"]["max_context_tokens"] == 90000  # the run's limits hold again
    assert doc["sandbox"]["workspace"] == str(project)
    from lis_tui.agent.events import RunStarted
    from lis_tui.runs.resume import chain_events  # what the replay and the resumed app draw: both runs
    assert [e.task for e in chain_events(doc) if isinstance(e, RunStarted)] == ["make things", "again"]


def test_what_cannot_be_resumed_is_refused_with_where_to_look(tmp_path):
    for argv in (["resume", "nosuch"], ["run", "--resume", "nosuch", "again"], ["--continue"]):
        done = lis(tmp_path, *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert len(done.stderr.splitlines()) == 1, done.stderr  # one line, not a traceback
        assert "lis-tui runs" in done.stderr


def test_bench_and_paper_episodes_are_refused_and_a_context_limit_is_said(tmp_path, monkeypatch):
    from lis_tui.runs.resume import load_resumable

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))

    def saved(name: str, **doc) -> str:  # in lis-tui's store: only a run there is taken at its word
        folder = tmp_path / "data" / "lis-tui" / "runs" / name
        folder.mkdir(parents=True)
        (folder / "trajectory.json").write_text(json.dumps({"steps": [], **doc}))
        return str(folder)

    talk = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]
    with pytest.raises(ValueError, match="bench or rollout episode.*lis-tui run"):
        load_resumable(saved("bench", bench_mode="sandbox", task_id="t1", messages=talk))
    with pytest.raises(ValueError, match="paper mode"):
        load_resumable(saved("paper", agent={"observation": "paper"}, messages=talk))
    with pytest.raises(ValueError, match="no conversation"):
        load_resumable(saved("empty", messages=[]))
    cut = load_resumable(saved("cut", finish_reason="max_context", messages=talk, tool_format="hermes",
                               tool_format_switch={"to": "hermes"}, agent={"max_context_tokens": 5000, "tool_format": "auto"}))
    assert "context limit (agent.max_context_tokens = 5000); the same limit holds" in cut.limit_notes()[0]
    merged = cut.overrides({"agent.max_context_tokens": None, "agent.tool_format": None})  # its switch holds
    assert merged["agent.max_context_tokens"] == 5000 and merged["agent.tool_format"] == "hermes"
    assert cut.overrides({"agent.max_context_tokens": 9000})["agent.max_context_tokens"] == 9000
    plain = load_resumable(saved("plain", finish_reason="submitted", messages=talk, tool_format="native",
                                 agent={"tool_format": "auto"}))
    assert plain.limit_notes() == [] and plain.overrides({}).get("agent.tool_format") is None  # auto may still switch


@pytest.mark.sandbox
def test_a_kept_session_resumes_its_last_run_in_that_session(tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_SESSIONS", str(tmp_path / "sessions"))
    from isolation import SandboxSpec

    make = "echo in-session > /testbed/kept.txt && echo 1 > /testbed/output/answer.txt"
    run1 = past_run(tmp_path, monkeypatch, [reply("working", [bash(make)]), submit()], "make things",
                     spec=SandboxSpec(rootfs="host", session="s1"))
    seen: dict = {}

    def done(request):
        seen["output"] = request.tool_outputs[-1]
        return submit()

    with FakeOpenAI([reply("looking", [bash("cat /testbed/kept.txt; ls /testbed/output")]), done]) as server:
        second = lis(tmp_path, "run", "--base-url", server.base_url, "--model", "m", "--resume", "s1", "again")
    assert second.returncode == 0, second.stderr
    assert "resumed: continuing in the kept session s1: its files are as the run left them" in second.stderr
    assert seen["output"].split() == ["in-session", "answer.txt"]  # nothing put back twice


def _git_project(where: Path, text: str) -> Path:
    where.mkdir()
    (where / "main.py").write_text(text)
    for argv in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start"]):
        subprocess.run(["git", *argv], cwd=where, check=True, capture_output=True)
    return where


def _lis_in(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", *args], cwd=cwd, env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.sandbox
def test_resume_continue_apply_and_a_session_stay_on_their_project_wherever_they_are_typed(tmp_path):
    a = _git_project(tmp_path / "a", "print('a')\n")
    b = _git_project(tmp_path / "b", "print('b')\n")
    seen: dict = {}

    def look(request):
        seen["output"], seen["model"] = request.tool_outputs[-1], request.body.get("model")
        return submit()

    server = FakeOpenAI([reply("working", [bash("echo 'print(1)' >> main.py && echo new > made.txt")]), submit(),
                         reply("looking", [bash("cat main.py made.txt")]), look]).start()
    first = _lis_in(tmp_path, a, "run", "--base-url", server.base_url, "--model", "m7", "--rootfs", "host",
                    "--workspace", ".", "edit it")
    assert first.returncode == 0, first.stderr
    run1 = Path(re.search(r"saved in (/\S+)", first.stderr).group(1))
    doc = json.loads((run1 / "trajectory.json").read_text())
    assert doc["sandbox"]["workspace"] == str(a) and json.loads((run1 / "changes.json").read_text())["workspace"] == str(a)

    # --continue: only a run of this folder; from b there is none, from a there is (then the app needs a terminal)
    none = _lis_in(tmp_path, b, "--continue")
    assert none.returncode == 2 and f"no run or session was started in {b}" in none.stderr, none.stderr
    here = _lis_in(tmp_path, a, "--continue")
    assert here.returncode == 2 and "the app needs a terminal" in here.stderr, here.stderr

    # An earlier version's record kept "." as its workspace: read against where it started, never here.
    doc["sandbox"]["workspace"] = "."
    (run1 / "trajectory.json").write_text(json.dumps(doc))
    try:  # no --model nor --base-url: the run's own model and server go on with its conversation
        second = _lis_in(tmp_path, b, "run", "--resume", run1.name, "again")
    finally:
        server.close()
    assert second.returncode == 0, second.stderr
    assert f"continuing in {a}, its project (not here)" in second.stderr and seen["model"] == "m7"
    assert seen["output"].split() == ["print('a')", "print(1)", "new"]  # a's files with run 1's work put back
    run2 = Path(re.search(r"saved in (/\S+)", second.stderr).group(1))
    assert json.loads((run2 / "trajectory.json").read_text())["sandbox"]["workspace"] == str(a)

    applied = _lis_in(tmp_path, b, "apply", run1.name)
    assert applied.returncode == 0 and f"applied 2 changes to {a}" in applied.stderr, applied.stderr
    assert (a / "made.txt").read_text() == "new\n" and not (b / "made.txt").exists()
    assert (b / "main.py").read_text() == "print('b')\n"

    # A kept session is its project's: from b it works in a, and is never laid over b.
    made = _lis_in(tmp_path, a, "exec", "--session", "s1", "--workspace", ".", "--", "echo kept > /testbed/s.txt")
    assert made.returncode == 0, made.stderr
    over = _lis_in(tmp_path, b, "exec", "--session", "s1", "--workspace", ".", "--", "cat /testbed/s.txt")
    assert over.returncode == 1 and f"was made on rootfs 'host' with workspace {a}, not rootfs 'host' with " \
        f"workspace {b}" in over.stderr, over.stderr
    there = _lis_in(tmp_path, b, "exec", "--session", "s1", "--", "cat /testbed/s.txt /testbed/main.py")
    assert there.returncode == 0 and there.stdout.split() == ["kept", "print('a')", "print(1)"], there.stderr
    assert f"session s1 works in {a} (its project), not here" in there.stderr

    # The project moved away: each says so in one line, with the fix, and nothing is written anywhere.
    a.rename(tmp_path / "a-moved")
    gone = _lis_in(tmp_path, b, "run", "--resume", run1.name, "again")
    assert gone.returncode == 2 and len(gone.stderr.splitlines()) == 1, gone.stderr
    assert f"the run's workspace {a} is gone (moved or removed?). Fix: give the project's folder: --workspace DIR" \
        in gone.stderr
    unapplied = _lis_in(tmp_path, b, "apply", run2.name)
    assert unapplied.returncode == 1 and len(unapplied.stderr.splitlines()) == 1, unapplied.stderr
    assert f"the project {a} is not a folder (moved or removed?)" in unapplied.stderr and "--workspace DIR" in \
        unapplied.stderr
    assert sorted(p.name for p in b.iterdir()) == [".git", "main.py"]
