"""Sandbox.save_changes: a patch real `git apply` takes that rebuilds the sandbox's /testbed exactly,
and isolation.changes.patchapply applying it (real bwrap, real git)."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.changes.patchapply import PatchConflict, apply_patch, held_back, kind_of, read_patch

pytestmark = pytest.mark.sandbox

# Every kind of change: text (no newline at the end too), binary grown and new, deletions, a new
# executable and a gained bit, links made, a link become a file, a folder become a file, names
# git must quote; and what no patch carries: a fifo, files in .git.
EDITS = r"""cd /testbed && printf 'a\nB\nc\nd\n' > edit.txt && rm gone.txt && printf 'noeol2' > noeol.txt
head -c 5000 /dev/urandom > new.bin && printf '#!/bin/sh\necho hi\n' > run.sh && chmod +x run.sh
head -c 100 /dev/urandom >> bin.dat && ln -s sub/deep.txt newlink && rm oldlink && echo now-file > oldlink
rm -r olddir && echo f > olddir && mkdir -p n/m && echo z > n/m/z.txt && touch empty && mkfifo fifo
chmod +x sub/deep.txt && echo 'a b' > 'sp ace.txt' && echo u > "$(printf 'uni\303\251 "q"\\t')"
mkdir -p .git && echo x > .git/config"""


def tree(root: Path) -> dict[str, str]:
    found = {}
    for top, dirs, files in os.walk(root):
        if ".git" in dirs:
            dirs.remove(".git")
        for name in dirs + files:
            path = Path(top, name)
            rel, st = str(path.relative_to(root)), path.lstat()
            found[rel] = ("-> " + os.readlink(path) if path.is_symlink() else "dir" if path.is_dir()
                          else "fifo" if not path.is_file()
                          else f"{st.st_mode & 0o100:o} " + hashlib.sha256(path.read_bytes()).hexdigest())
    return found


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "sub").mkdir(parents=True)
    (root / "edit.txt").write_text("a\nb\nc\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "noeol.txt").write_text("noeol")
    (root / "bin.dat").write_bytes(os.urandom(3000))
    (root / "sub" / "deep.txt").write_text("x\n")
    (root / "oldlink").symlink_to("edit.txt")
    (root / "olddir").mkdir()
    (root / "olddir" / "q").write_text("q\n")
    return root


def saved(project: Path) -> tuple[bytes, object, dict]:
    """The patch of EDITS, what save_changes said, and the sandbox's /testbed as a tree."""
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(project))) as sb:
        assert sb.exec(EDITS).exit_code == 0
        out = io.BytesIO()
        said = sb.save_changes(out)
        assert sb.exec("cp -a /testbed /tmp/after && rm /tmp/after/fifo && rm -r /tmp/after/.git && "
                       "tar -C /tmp/after -cf /tmp/after.tar .").exit_code == 0
        data = sb.read_file("/tmp/after.tar")
    return out.getvalue(), said, data


def test_git_apply_rebuilds_the_sandboxs_tree_exactly(project, tmp_path):
    patch, said, tar = saved(project)
    (tmp_path / "after.tar").write_bytes(tar)
    (tmp_path / "after").mkdir()
    subprocess.run(["tar", "-C", str(tmp_path / "after"), "-xf", str(tmp_path / "after.tar")], check=True)
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    (tmp_path / "p.patch").write_bytes(patch)
    done = subprocess.run(["git", "apply", str(tmp_path / "p.patch")], cwd=copy, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert tree(copy) == tree(tmp_path / "after")
    assert b"GIT binary patch" in patch and b"new file mode 120000" in patch and b'"a/uni\\303\\251 \\"q\\"\\\\t"' in patch
    assert "fifo (a special file: never applied)" in said.unsaved
    assert any(note.startswith(".git/ (1 change inside") for note in said.unsaved)
    assert said.moved == [] and "olddir" in said.paths and "olddir/q" in said.paths


def test_apply_patch_holds_links_and_new_executables_and_refuses_a_changed_file(project, tmp_path):
    patch = read_patch(saved(project)[0])
    assert kind_of(patch["oldlink"]) == "type" and kind_of(patch["gone.txt"]) == "deleted"
    held = held_back(project, patch)
    assert set(held) == {"run.sh", "newlink", "sub/deep.txt"}
    assert held["sub/deep.txt"] == "it gains an executable bit" and held["newlink"].endswith("-> sub/deep.txt")
    (project / "noeol.txt").write_text("the person's edit")
    before = tree(project)
    with pytest.raises(PatchConflict) as refused:
        apply_patch(project, patch, [p for p in patch if p not in held])
    assert refused.value.paths == ["noeol.txt"] and tree(project) == before
    apply_patch(project, patch, ["edit.txt", "olddir", "olddir/q"])
    assert (project / "edit.txt").read_text() == "a\nB\nc\nd\n" and (project / "olddir").read_text() == "f\n"


def test_a_file_the_host_changed_while_the_sandbox_ran_is_marked_and_never_applied(project):
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(project))) as sb:
        assert sb.exec("echo sandbox > /testbed/edit.txt && echo sandbox > /testbed/bin.dat").exit_code == 0
        (project / "edit.txt").write_text("the person's, meanwhile\n")
        out = io.BytesIO()
        said = sb.save_changes(out)
    assert said.moved == ["edit.txt"] and said.paths == ["bin.dat", "edit.txt"]
    with pytest.raises(PatchConflict) as refused:
        apply_patch(project, read_patch(out.getvalue()), said.paths, said.moved)
    assert refused.value.paths == ["edit.txt"] and "while the sandbox ran" in str(refused.value)
    assert (project / "edit.txt").read_text() == "the person's, meanwhile\n"


def test_a_gitattributes_file_does_not_rewrite_what_is_applied(project):
    """With the project as git's work tree, `* text eol=crlf` (the project's, or one the sandbox adds)
    turned every applied line ending into CRLF."""
    (project / ".gitattributes").write_text("* text eol=crlf\n")
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(project))) as sb:
        assert sb.exec("printf 'a\\nb\\n' > /testbed/new.txt").exit_code == 0
        out = io.BytesIO()
        sb.save_changes(out)
    apply_patch(project, read_patch(out.getvalue()), ["new.txt"])
    assert (project / "new.txt").read_bytes() == b"a\nb\n"
