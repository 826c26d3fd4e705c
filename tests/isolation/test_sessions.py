"""Kept sessions: files survive close and resume, one sandbox at a time, list/rm/gc."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxError, SandboxSpec, sessions
from isolation.changes.workspace import WorkspaceConflict

pytestmark = pytest.mark.sandbox
LIS = str(Path(sys.executable).with_name("lis-tui"))


@pytest.fixture(autouse=True)
def _own_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_SESSIONS", str(tmp_path / "sessions"))


def test_files_and_home_survive_close_and_resume():
    with Sandbox(SandboxSpec(session="s1")) as sb:
        sb.exec("echo kept > /testbed/f; echo home > /root/.h; echo gone > /tmp/t")
    with Sandbox(SandboxSpec(session="s1")) as sb:
        assert sb.exec("cat /testbed/f /root/.h").stdout == "kept\nhome\n"
        assert sb.exec("ls /tmp").stdout == "lis\n"  # /tmp is fresh each start (but the tools' folder)


def test_a_session_runs_in_one_sandbox_at_a_time():
    with Sandbox(SandboxSpec(session="busy")):
        with pytest.raises(SandboxError, match="in use"):
            Sandbox(SandboxSpec(session="busy")).start()
        with pytest.raises(SandboxError, match="in use"):
            sessions.remove("busy")


def test_resume_refuses_a_different_workspace(tmp_path):
    (tmp_path / "w").mkdir()
    with Sandbox(SandboxSpec(session="w1")):
        pass
    with pytest.raises(SandboxError, match="was made on rootfs 'host' with no workspace, not rootfs 'host' with "
                                           "workspace .*/w: .* Fix: leave --rootfs and --workspace out"):
        Sandbox(SandboxSpec(session="w1", workspace=tmp_path / "w")).start()
    for n, again in enumerate((tmp_path / "w", str(tmp_path / "w")), 1):  # the same folder, however named, resumes
        with Sandbox(SandboxSpec(session="w2", workspace=again)) as sb:
            assert sb.exec("echo once >> /testbed/f; wc -l < /testbed/f").stdout == f"{n}\n"


def test_a_session_kept_by_an_earlier_version_as_dot_waits_for_the_project_to_be_named(tmp_path):
    (tmp_path / "p").mkdir()
    with Sandbox(SandboxSpec(session="old", workspace=tmp_path / "p")) as sb:
        sb.exec("echo kept > /testbed/f")
    saved = tmp_path / "sessions" / "old" / "spec.json"
    saved.write_text(saved.read_text().replace(str(tmp_path / "p"), "."))  # as lis-tui kept `--workspace .`
    guessed = subprocess.run([LIS, "exec", "--session", "old", "--", "cat /testbed/f"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert guessed.returncode == 1 and "kept its workspace only as '.'" in guessed.stderr, guessed.stderr
    named = subprocess.run([LIS, "exec", "--session", "old", "--workspace", "p", "--", "cat /testbed/f"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert named.stdout == "kept\n", named.stderr
    assert sessions.load_spec(saved.parent).workspace == str(tmp_path / "p")  # kept whole from now on


def test_a_resumed_session_keeps_its_start_and_what_it_learnt_of_the_project(tmp_path):
    """The person's work between two lives of a session: an edit of a file the model changed, and
    the deletion of one it rewrote, are conflicts; their files beside the model's new one are not."""
    project = tmp_path / "p"
    (project / "d").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "d/c.txt"):
        (project / name).write_text(name)
    with Sandbox(SandboxSpec(session="s", workspace=project)) as sb:
        assert sb.exec("echo m >> a.txt && rm b.txt && echo new > b.txt && echo new > d/new.txt").exit_code == 0
    (project / "a.txt").write_text("the person's\n")
    (project / "b.txt").unlink()
    (project / "d" / ".c.txt.swp").write_text("an editor's swap file")
    with Sandbox(SandboxSpec(session="s", workspace=project)) as sb:
        with pytest.raises(WorkspaceConflict, match=r"applied: a.txt, b.txt\. Fix"):
            sb.apply()
        sb.apply(["d/new.txt"])
    assert (project / "d" / "new.txt").read_text() == "new\n" and not (project / "b.txt").exists()


def test_a_workspace_over_lis_tuis_own_state_is_refused_in_one_line(tmp_path_factory):
    holds = tmp_path_factory.getbasetemp()  # the scratch of every test's sandboxes is below it (conftest)
    for workspace in (holds, holds / "scratch"):
        workspace.mkdir(exist_ok=True)
        with pytest.raises(SandboxError, match=r"^--workspace \S+ overlaps lis-tui's own state \(\S+\): a sandbox "
                                               "cannot be laid over its own layers. Fix: give the project's folder"):
            Sandbox(SandboxSpec(workspace=workspace)).start()


def test_bad_ids_are_refused():
    with pytest.raises(SandboxError, match="not valid"):
        Sandbox(SandboxSpec(session="../escape")).start()


def test_cli_list_rm_and_gc(tmp_path):
    subprocess.run([LIS, "exec", "--session", "cli-one", "--", "echo x > /testbed/x"], check=True)
    out = subprocess.run([LIS, "sessions", "list"], capture_output=True, text=True).stdout
    assert "cli-one" in out and "host" in out
    r = subprocess.run([LIS, "exec", "--session", "cli-one", "--", "cat /testbed/x"], capture_output=True, text=True)
    assert r.stdout == "x\n"
    assert subprocess.run([LIS, "sessions", "rm", "nope"], capture_output=True, text=True).returncode == 1
    subprocess.run([LIS, "sessions", "gc", "--older-than", "0s"], check=True, capture_output=True)
    assert sessions.list_sessions() == []


def test_rm_right_after_a_close_waits_for_the_old_copy_s_removal():
    """The second close swaps its (small) copy in and leaves the old one, thousands of files, to
    this process's removal thread; `sessions.remove` at once must not walk that tree beside it."""
    with Sandbox(SandboxSpec(session="many")) as sb:
        assert sb.exec("mkdir -p /testbed/d && cd /testbed/d && seq 20000 | xargs touch").exit_code == 0
    with Sandbox(SandboxSpec(session="many")) as sb:
        assert sb.exec("rm -r /testbed/d").exit_code == 0
    sessions.remove("many")
    assert sessions.list_sessions() == []
