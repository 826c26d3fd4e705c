"""Sandbox.save_changes: a patch real `git apply` takes that rebuilds the sandbox's /testbed exactly,
with large files kept beside it, and isolation.changes.patchapply applying it, 3-way too (real bwrap,
real git)."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.changes.beside import Beside, place
from isolation.changes.patchapply import Entry, PatchConflict, apply_patch, held_back, kind_of, read_patch

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


def kept_entries(beside: Beside) -> dict[str, list[Entry]]:
    """The files kept beside a patch as apply_patch takes them (as lis_tui.runs.changes adds them)."""
    return {k.path: [Entry(k.path, k.old_mode, k.mode, k.old_id, k.new_id, b"", kept=True)] for k in beside.kept}


def test_a_large_file_is_kept_beside_the_patch_reused_while_unchanged_and_written_in_place(project, tmp_path):
    """A 450 MB file touched by two bytes was base85 in the patch: 45 silent seconds, 608 MB."""
    (project / "big.bin").write_bytes(os.urandom(1 << 20) * 9)  # over KEEP_LIMIT
    blobs = tmp_path / "blobs"
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(project))) as sb:
        assert sb.exec("cd /testbed && printf XY | dd of=big.bin bs=1 seek=5 conv=notrunc 2>/dev/null && "
                       "truncate -s 20M sparse.bin && printf end >> sparse.bin && echo b > edit.txt").exit_code == 0
        first = Beside(blobs, exact=False)
        sb.save_changes(io.BytesIO(), first)
        copied = {k.path: os.stat(blobs / k.new_id).st_ino for k in first.kept}
        again = Beside(blobs, first.kept, exact=False)  # a save after the next step: nothing changed
        sb.save_changes(io.BytesIO(), again)
        assert again.kept == first.kept and {k.path: os.stat(blobs / k.new_id).st_ino for k in again.kept} == copied
        assert sb.exec("printf Z | dd of=/testbed/big.bin bs=1 seek=9 conv=notrunc 2>/dev/null").exit_code == 0
        final, out = Beside(blobs, again.kept), io.BytesIO()  # the run's end: exact
        said = sb.save_changes(out, final)
        final.tidy()
        inside = hashlib.sha256(sb.read_file("/testbed/big.bin")).hexdigest()
    assert sorted(k.path for k in final.kept) == ["big.bin", "sparse.bin"] and said.paths == ["big.bin", "edit.txt",
                                                                                              "sparse.bin"]
    assert sorted(os.listdir(blobs)) == sorted([k.new_id for k in final.kept] + final.bases)  # not the earlier big.bin
    assert b"big.bin" not in out.getvalue() and len(out.getvalue()) < 1000
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    (tmp_path / "p.patch").write_bytes(out.getvalue())
    assert subprocess.run(["git", "apply", str(tmp_path / "p.patch")], cwd=copy).returncode == 0  # the rest alone

    patch = {**read_patch(out.getvalue()), **kept_entries(final)}
    original = (project / "big.bin").read_bytes()
    (project / "big.bin").write_bytes(b"the person's")
    with pytest.raises(PatchConflict) as refused:
        apply_patch(project, patch, list(patch), blobs=blobs)
    assert refused.value.paths == ["big.bin"] and (project / "big.bin").read_bytes() == b"the person's"
    (project / "big.bin").write_bytes(original)
    apply_patch(project, patch, list(patch), blobs=blobs)
    assert hashlib.sha256((project / "big.bin").read_bytes()).hexdigest() == inside
    sparse = project / "sparse.bin"
    assert sparse.stat().st_size == (20 << 20) + 3 and sparse.stat().st_blocks * 512 < 1 << 20  # holes kept
    assert sparse.read_bytes()[-4:] == b"\0end" and (project / "edit.txt").read_text() == "b\n"


def test_a_kept_file_is_never_written_through_a_link(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "data").symlink_to(elsewhere)
    (tmp_path / "blob").write_bytes(b"new")
    with pytest.raises(NotADirectoryError):
        place(project, "data/x.bin", tmp_path / "blob", False, None, hashlib.sha1(b"blob 3\0new").hexdigest())
    assert list(elsewhere.iterdir()) == [] and [p.name for p in project.iterdir()] == ["data"]


LINES = "".join(f"line {i}\n" for i in range(1, 21))
ATTRIBUTES = "* text eol=crlf\n" + "".join(f"# {i}\n" for i in range(1, 13))


def test_three_way_merges_what_the_project_changed_since_and_leaves_gits_markers_on_a_conflict(tmp_path):
    """git's own 3-way apply, in a scratch copy: a .gitattributes being merged (eol=crlf) converts nothing."""
    root, blobs = tmp_path / "project", tmp_path / "blobs"
    root.mkdir()
    for name, text in (("lines.txt", LINES), (".gitattributes", ATTRIBUTES), ("clash.txt", "x\ny\n")):
        (root / name).write_text(text)
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(root))) as sb:
        assert sb.exec("cd /testbed && sed -i 's/^line 2$/LINE 2/' lines.txt && sed -i 's/^# 12$/# twelve/' "
                       ".gitattributes && echo sandbox > clash.txt").exit_code == 0
        out = io.BytesIO()
        sb.save_changes(out, Beside(blobs))
    patch = read_patch(out.getvalue())
    (root / "lines.txt").write_text(LINES.replace("line 19\n", "PERSON 19\n"))
    (root / ".gitattributes").write_text(ATTRIBUTES.replace("# 1\n", "# one\n"))
    (root / "clash.txt").write_text("person\n")
    with pytest.raises(PatchConflict) as refused:
        apply_patch(root, patch, list(patch), blobs=blobs)
    assert refused.value.mergeable == sorted(patch) and (root / "clash.txt").read_text() == "person\n"
    assert apply_patch(root, patch, list(patch), blobs=blobs, three_way=True) == ["clash.txt"]
    assert (root / "lines.txt").read_text() == LINES.replace("line 2\n", "LINE 2\n").replace("line 19\n", "PERSON 19\n")
    assert (root / ".gitattributes").read_bytes() == ATTRIBUTES.replace("# 1\n", "# one\n").replace(
        "# 12\n", "# twelve\n").encode()
    assert (root / "clash.txt").read_text() == "<<<<<<< ours\nperson\n=======\nsandbox\n>>>>>>> theirs\n"
