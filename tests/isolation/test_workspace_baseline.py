"""Whether the host changed a path since the sandbox started, told from the kernel's stamps of the
changed paths only (isolation.changes.baseline): real bwrap overlays, real host edits, and inotify
to see which folders of the project a start, review, save and apply open."""
from __future__ import annotations

import ctypes
import io
import os
import time
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.changes.baseline import Baseline, stamped_here
from isolation.changes.baseline import snapshot
from isolation.changes.workspace import WorkspaceConflict

pytestmark = pytest.mark.sandbox
IN_ACCESS, IN_OPEN = 0x1, 0x20


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    for rel in ("a.txt", "keep.txt", "d/b.txt", "other/o.txt", "other/deep/p.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    return root


def watch(folder: Path) -> int:
    """An inotify descriptor that hears every open and read of `folder` (a listing opens it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(folder), IN_OPEN | IN_ACCESS) >= 0
    return fd


def heard(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def test_start_review_save_and_apply_of_one_change_never_open_the_projects_other_folders(project):
    fd = watch(project / "other")
    try:
        os.listdir(project / "other")
        assert heard(fd), "the watch hears a listing"
        with Sandbox(SandboxSpec(workspace=project)) as sb:
            assert heard(fd) == b""  # the start noted nothing of the project's files
            assert sb.exec("echo new > d/new.txt && echo more >> a.txt").exit_code == 0
            assert {c.path for c in sb.review().changes} == {"a.txt", "d/new.txt"}
            assert sb.save_changes(io.BytesIO()).moved == []
            sb.apply()
            assert heard(fd) == b""
    finally:
        os.close(fd)
    assert (project / "d" / "new.txt").read_text() == "new\n"


def test_the_host_deleting_or_editing_what_the_model_changed_is_a_conflict_whenever_it_happens(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        (project / "keep.txt").write_text("the person's, at once\n")  # in the start's tick, maybe
        assert sb.exec("echo m >> a.txt && echo m >> d/b.txt && echo m >> keep.txt && "
                       "echo new > d/new.txt").exit_code == 0
        (project / "a.txt").unlink()  # before lis-tui looked at anything
        assert sb.save_changes(io.BytesIO()).moved == ["a.txt", "keep.txt"]
        (project / "d" / "b.txt").unlink()  # after it looked
        with pytest.raises(WorkspaceConflict) as conflict:
            sb.apply()
        assert str(conflict.value).split(": ", 1)[1].startswith("a.txt, d/b.txt, keep.txt. Fix:")
        assert sorted(os.listdir(project / "d")) == []  # nothing was written
        sb.apply(["d/new.txt"])
    assert (project / "d" / "new.txt").read_text() == "new\n" and not (project / "a.txt").exists()
    assert (project / "keep.txt").read_text() == "the person's, at once\n"


def test_the_persons_work_beside_the_models_new_files_never_stops_them(project):
    """An editor's swap file and save by rename change the folder the model's new file is in, before
    lis-tui looked at it: the new file still goes, and after apply the model's next one too; an edit
    of an applied file is the host's again."""
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        assert sb.exec("echo new > d/new.txt && echo new > top.txt").exit_code == 0
        (project / "d" / ".b.txt.swp").write_text("swap")
        (project / "d" / "b.txt.tmp").write_text("the person's save\n")
        os.replace(project / "d" / "b.txt.tmp", project / "d" / "b.txt")
        (project / "mine.txt").write_text("a new file of the person's\n")
        sb.apply()
        assert sb.exec("echo second > d/second.txt && echo again >> top.txt && echo m >> d/new.txt").exit_code == 0
        (project / "d" / "new.txt").write_text("the person's edit of what was applied\n")
        with pytest.raises(WorkspaceConflict, match=r"applied: d/new.txt\. Fix"):
            sb.apply()
        sb.apply(["d/second.txt", "top.txt"])
    assert (project / "d" / "second.txt").read_text() == "second\n"
    assert (project / "top.txt").read_text() == "new\nagain\n"
    assert (project / "d" / "b.txt").read_text() == "the person's save\n"


def test_without_the_kernels_stamps_a_table_of_the_project_decides(tmp_path):
    """Where ctimes are not this kernel's (network filesystems, FUSE), the start notes every entry."""
    for rel in ("a.txt", "d/b.txt", "d/c.txt"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(rel)
    fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert stamped_here(fd) is False
    finally:
        os.close(fd)
    assert Baseline.begin(tmp_path, time.time_ns()).table is None  # a local disk: no table
    base = Baseline(time.time_ns(), table=snapshot(tmp_path))
    (tmp_path / "a.txt").write_text("edited, longer")
    (tmp_path / "d" / "b.txt").unlink()
    (tmp_path / "new.txt").write_text("made")
    asked = ["a.txt", "d/b.txt", "d/c.txt", "new.txt", "absent.txt", "d"]
    assert base.moved(tmp_path, asked) == {"a.txt", "d/b.txt", "new.txt", "d"}
    base.rebase(tmp_path, ["a.txt", "d/b.txt", "new.txt", "d"])
    assert base.moved(tmp_path, asked) == set()
