"""Host-side work on hostile sandbox-made trees (issue 13, items 1, 4, 5, 6), with real sandboxes.

Each test makes the hostile layout for real and shows it is there (inside the sandbox or in its
upper directory), runs every operation that used to misbehave under a hard timeout, and proves
that a canary tree outside the workspace is unchanged, hashed before and after."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.host.walk import Cursor, RefusedPaths, TreeChanged, files_below, remove_tree
from isolation.changes.workspace import OPAQUE
from lis_tui.agent.trajectory import export_output

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
DEPTH = 2500
# mkdir + chdir by relative name; bash's `cd` re-checks $PWD at every level and takes minutes. Then
# proves the depth: the slashes in the path to f below the current directory.
DEEP = (f"python3 -c 'import os\nfor _ in range({DEPTH}): os.mkdir(\"d\"); os.chdir(\"d\")\n"
        "open(\"f\", \"w\").write(\"deep\\n\")' && find d -name f | tr -cd / | wc -c")


def bounded(fn, *args, seconds: float = 120, **kwargs):
    """fn(*args, **kwargs), failing the test if it has not returned after `seconds` (it hangs)."""
    result: dict = {}

    def call() -> None:
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            result["error"] = exc

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{fn.__name__} still running after {seconds} s: it hangs")
    if "error" in result:
        raise result["error"]
    return result["value"]


def digest(root: Path) -> str:
    """Every name, type, mode, link target and file content under `root`, links not followed."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            h.update(f"{os.path.relpath(path, root)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(Path(path).read_bytes())
    return h.hexdigest()


@pytest.fixture
def canary(tmp_path):
    """A tree outside every workspace, which nothing may list or touch."""
    root = tmp_path / "victim"
    for rel, text in {"secret.txt": "id_rsa\n", "sub/a.txt": "a\n", "sub/deeper/b.txt": "b\n",
                      "dir2/x.txt": "x\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def kinds(changes) -> dict[str, tuple[str, str]]:
    return {c.path: (c.kind, c.detail) for c in changes}


def opaque(path: Path) -> bool:
    for name in OPAQUE:
        try:
            return os.getxattr(path, name, follow_symlinks=False) == b"y"
        except OSError:
            pass
    return False


def starts_again() -> None:
    with Sandbox() as again:
        assert again.exec("true").exit_code == 0


# ---- 1: links --------------------------------------------------------------------------------

def test_a_host_symlink_in_the_workspace_is_never_walked_through(tmp_path, canary):
    ws = tmp_path / "ws"
    (ws / "o").mkdir(parents=True)
    (ws / "o" / "f.txt").write_text("o\n")
    (ws / "data").symlink_to(canary)
    before = digest(canary)
    with Sandbox(SandboxSpec(workspace=ws)) as sb:
        # The link becomes a directory; a directory made over a whiteout (opaque) moves into it as
        # data/sub, and a file takes the place of the host's directory data/dir2.
        r = sb.exec("rm data && mkdir data && rm -rf o && mkdir o && echo mine > o/m.txt && mv o data/sub && "
                    "echo x > data/dir2")
        assert r.exit_code == 0, r.stderr
        upper = sb.writable / "ws-upper"
        assert (upper / "data").is_dir() and not (upper / "data").is_symlink()
        assert opaque(upper / "data" / "sub") and (upper / "data" / "dir2").is_file()
        found = kinds(bounded(sb.changes))
        assert found["data"] == ("type", "symlink -> directory")
        assert found["data/sub/"] == ("added", "") and found["data/sub/m.txt"] == ("added", "")
        assert found["data/dir2"] == ("added", "")  # not "directory -> file" of the canary's dir2
        assert not [p for p in found if p.startswith("data/") and found[p][0] != "added"]
        assert "victim" not in bounded(sb.diff)
        with pytest.raises(RefusedPaths, match=r"data/dir2 \(.*'data' on the host is a file or a symlink"):
            bounded(sb.apply, ["data/dir2"])  # the host's data is still the link: nothing goes through it
        assert digest(canary) == before
        bounded(sb.apply)
    assert digest(canary) == before
    assert (ws / "data").is_dir() and not (ws / "data").is_symlink()
    assert (ws / "data" / "sub" / "m.txt").read_text() == "mine\n"
    assert (ws / "data" / "dir2").read_text() == "x\n" and not (ws / "o").exists()


def test_sandbox_made_links_go_only_by_name_and_out_only_when_allowed(tmp_path, canary):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    before = digest(canary)
    with Sandbox(SandboxSpec(workspace=ws)) as sb:
        r = sb.exec(f"ln -s {canary}/secret.txt sshkey && ln -s a.txt inside && ln -s ../../etc up && "
                    "echo n > new.txt")
        assert r.exit_code == 0, r.stderr
        assert os.readlink(sb.writable / "ws-upper" / "sshkey") == f"{canary}/secret.txt"
        found = kinds(bounded(sb.changes))
        assert found["sshkey"] == ("added", f"symlink -> {canary}/secret.txt")
        assert found["inside"] == ("added", "symlink -> a.txt")
        assert f"added: sshkey symlink -> {canary}/secret.txt\n" in bounded(sb.diff)
        with pytest.raises(RefusedPaths) as refused:
            bounded(sb.apply)  # "apply all" takes everything but the links, and says so
        assert {line.split(" ")[0] for line in refused.value.refused} == {"sshkey", "inside", "up"}
        assert "applied only by name" in str(refused.value)
        assert (ws / "new.txt").read_text() == "n\n"
        assert not any(os.path.lexists(ws / n) for n in ("sshkey", "inside", "up"))
        with pytest.raises(RefusedPaths, match=r"apply\(\['sshkey'\], allow_outside_links=True\)") as refused:
            bounded(sb.apply, ["sshkey", "up"])
        assert len(refused.value.refused) == 2 and not os.path.lexists(ws / "sshkey")
        bounded(sb.apply, ["inside"])
        bounded(sb.apply, ["sshkey"], allow_outside_links=True)
    assert os.readlink(ws / "inside") == "a.txt"
    assert os.readlink(ws / "sshkey") == f"{canary}/secret.txt"
    assert digest(canary) == before


def test_a_directory_the_host_cannot_read_is_named_and_the_rest_goes_on(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with Sandbox(SandboxSpec(workspace=ws)) as sb:
        r = sb.exec("mkdir secret && echo x > secret/f && chmod 000 secret && echo n > n.txt")
        assert r.exit_code == 0 and stat.S_IMODE(os.lstat(sb.writable / "ws-upper" / "secret").st_mode) == 0
        found = [(c.path, c.kind, c.detail) for c in bounded(sb.changes)]
        if os.geteuid() == 0:  # root reads it anyway
            assert ("secret/f", "added", "") in found
            bounded(sb.apply)
            return
        assert found == [("n.txt", "added", ""), ("secret/", "added", ""),
                         ("secret/", "refused", "cannot be read: Permission denied; not reviewed, never applied")]
        with pytest.raises(RefusedPaths, match=r"secret \(cannot be read: Permission denied"):
            bounded(sb.apply)
    assert (ws / "n.txt").read_text() == "n\n" and (ws / "secret").is_dir()
    os.chmod(ws / "secret", 0o700)


# ---- 4: depth --------------------------------------------------------------------------------

def test_a_2500_level_tree_is_reviewed_applied_exported_and_removed(tmp_path, canary):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data").symlink_to(canary)
    before = digest(canary)
    deepest = "output/" + "d/" * DEPTH + "f"
    dest = tmp_path / "exported"
    try:
        with Sandbox(SandboxSpec(workspace=ws)) as sb:
            r = sb.exec(f"mkdir output && cd output && {DEEP}", timeout=300)
            assert (r.exit_code, r.stdout.strip()) == (0, str(DEPTH)), r.stderr
            assert len(deepest) > 4096  # past PATH_MAX: no joined path could reach it
            found = bounded(sb.changes)
            assert len(found) == DEPTH + 2 and found[-1].path == deepest
            assert f"+++ b/{deepest}\n" in bounded(sb.diff)
            bounded(sb.export, "/testbed/output", dest)
            assert files_below(dest) == [deepest.removeprefix("output/")]
            bounded(sb.apply)
            assert files_below(ws / "output") == [deepest.removeprefix("output/")]
            layers = sb.layers
            bounded(sb.close)
        assert not layers.exists()
        starts_again()
    finally:
        remove_tree(ws / "output")  # pytest's own cleanup would recurse past Python's limit
        remove_tree(dest)
    assert digest(canary) == before


def test_a_crashed_owners_deep_scratch_is_swept_by_the_next_start(tmp_path):
    env = {**os.environ, "LIS_SCRATCH": str(tmp_path / "scratch"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "LIS_DISK_TMPFS": "0"}  # layers on disk, as --disk-on disk's
    script = ("import sys; from isolation import Sandbox; sb = Sandbox().start(); "
              f"r = sb.exec({DEEP!r}, timeout=300); print(r.exit_code, r.stdout.strip(), flush=True); "
              "sys.stdin.read()")
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert bounded(owner.stdout.readline, seconds=300).split() == ["0", str(DEPTH)]
    finally:
        owner.kill()  # a crash: no close(), the scratch and its unlocked record stay
        owner.wait()
    [left] = [p for p in (tmp_path / "scratch").iterdir() if p.is_dir()]
    assert (left / "testbed" / "d" / "d" / "d").is_dir()
    r = subprocess.run([str(Path(sys.executable).with_name("lis-tui")), "exec", "--rootfs", "host", "--", "true"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "scratch").iterdir()) == []


# ---- 5: fifos --------------------------------------------------------------------------------

def test_fifos_never_block_review_apply_export_or_close(tmp_path, canary):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("k\n")
    os.mkfifo(ws / "hostpipe", 0o644)
    os.chmod(ws / "hostpipe", 0o644)
    before = digest(canary)
    with Sandbox(SandboxSpec(workspace=ws)) as sb:
        r = sb.exec("mkfifo pipe && mkdir output && mkfifo output/pipe && echo o > output/o.txt && "
                    "rm keep.txt && mkfifo keep.txt && chmod 600 hostpipe && test -p pipe && test -p keep.txt")
        assert r.exit_code == 0, r.stderr
        assert stat.S_ISFIFO(os.lstat(sb.writable / "ws-upper" / "output" / "pipe").st_mode)
        found = kinds(bounded(sb.changes))
        assert found["pipe"] == ("added", "fifo (special files are never applied)")
        assert found["keep.txt"] == ("type", "file -> fifo (special files are never applied)")
        assert found["hostpipe"] == ("mode", "644 -> 600")
        assert "added: output/pipe fifo" in bounded(sb.diff)
        with pytest.raises(RefusedPaths) as refused:
            bounded(sb.apply)
        assert {line.split(" ")[0] for line in refused.value.refused} == {"pipe", "output/pipe", "keep.txt"}
        assert "special files are never applied" in str(refused.value)
        assert (ws / "output" / "o.txt").read_text() == "o\n" and (ws / "keep.txt").read_text() == "k\n"
        assert not os.path.lexists(ws / "pipe") and not os.path.lexists(ws / "output" / "pipe")
        assert stat.S_IMODE(os.lstat(ws / "hostpipe").st_mode) == 0o600  # chmod without opening it
        with pytest.raises(RefusedPaths, match=r"pipe \(fifo\)"):
            bounded(sb.export, "/testbed/output", tmp_path / "out")
        assert files_below(tmp_path / "out") == ["o.txt"] and not os.path.lexists(tmp_path / "out" / "pipe")
        report = bounded(export_output, sb, tmp_path / "files")
        assert report == {"files": ["o.txt"], "skipped": ["pipe (fifo)"]}
        layers = sb.layers
        bounded(sb.close)
    assert not layers.exists()
    starts_again()
    assert digest(canary) == before


def test_close_removes_a_fifo_and_a_deep_tree_without_a_workspace(tmp_path):
    with Sandbox() as sb:
        r = sb.exec(f"mkfifo /testbed/pipe && cd /testbed && {DEEP}", timeout=300)
        assert (r.exit_code, r.stdout.strip()) == (0, str(DEPTH))
        assert stat.S_ISFIFO(os.lstat(sb.writable / "testbed" / "pipe").st_mode)
        assert kinds(bounded(sb.changes))["pipe"] == ("added", "fifo (special files are never applied)")
        layers = sb.layers
        bounded(sb.close)
    assert not layers.exists()
    starts_again()


# ---- 6: export -------------------------------------------------------------------------------

def test_export_keeps_the_destinations_mode_and_files(tmp_path, canary):
    dest = tmp_path / "dest"
    dest.mkdir()
    os.chmod(dest, 0o700)
    (dest / "keep.txt").write_text("host\n")
    (dest / "hostlink").symlink_to(canary / "secret.txt")  # a host link where the sandbox has a file
    (dest / "sub").symlink_to(canary)  # and one where it has a directory
    umask = os.umask(0)
    os.umask(umask)
    before = digest(canary)
    with Sandbox() as sb:
        r = sb.exec("cd /testbed/output && echo sandbox > keep.txt && echo new > new.txt && echo s > hostlink && "
                    "mkdir -m 777 sub open && echo x > sub/x && chmod 777 . && stat -c %a .")
        assert (r.exit_code, r.stdout) == (0, "777\n"), r.stderr
        with pytest.raises(RefusedPaths) as refused:
            bounded(sb.export, "/testbed/output", dest)
        assert sorted(refused.value.refused) == [
            "hostlink (it exists on the host; pass force=True to overwrite it)",
            "keep.txt (it exists on the host; pass force=True to overwrite it)",
            "sub/ (a file or a symlink is in the way on the host; nothing below it was copied)"]
        assert stat.S_IMODE(dest.stat().st_mode) == 0o700
        assert (dest / "keep.txt").read_text() == "host\n" and (dest / "new.txt").read_text() == "new\n"
        assert stat.S_IMODE((dest / "open").stat().st_mode) == 0o755 & ~umask
        with pytest.raises(RefusedPaths, match=r"^exported 3 file\(s\).*\n  sub/ \(a file or a symlink"):
            bounded(sb.export, "/testbed/output", dest, force=True)
        assert (dest / "keep.txt").read_text() == "sandbox\n"
        assert not (dest / "hostlink").is_symlink() and (dest / "hostlink").read_text() == "s\n"
        assert stat.S_IMODE(dest.stat().st_mode) == 0o700
        fresh = bounded(sb.export, "/testbed/output", tmp_path / "new" / "fresh")  # what the review screen does
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o755 & ~umask
        assert stat.S_IMODE((fresh / "sub").stat().st_mode) == 0o755 & ~umask
        assert sorted(files_below(fresh)) == ["hostlink", "keep.txt", "new.txt", "sub/x"]
    assert digest(canary) == before


def test_links_swapped_in_while_exporting_are_never_followed(tmp_path, canary):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(canary)  # a host link where the sandbox's directory goes
    before = digest(canary)
    with Sandbox() as sb:
        r = sb.exec("cd /testbed/output && mkdir sub && echo x > sub/x && "
                    "(while :; do mv sub s2 && ln -s /etc sub && rm sub && mv s2 sub; done) >/dev/null 2>&1 &")
        # Look for the swap for up to 20 s: on a loaded machine the swapper may be slow to start.
        seen = sb.exec("end=$((SECONDS + 20)); while [ $SECONDS -lt $end ]; do "
                       "[ -L /testbed/output/sub ] && echo link && break; done")
        assert r.exit_code == 0 and seen.stdout == "link\n"  # the swapping runs
        outcomes = set()
        for _ in range(30):
            try:
                bounded(sb.export, "/testbed/output", dest, force=True, allow_outside_links=True)
                outcomes.add("copied")
            except (RefusedPaths, TreeChanged) as exc:
                outcomes.add(type(exc).__name__)
            bounded(sb.changes)
        assert outcomes
    assert digest(canary) == before and (dest / "sub").is_symlink()
    assert not [name for name in files_below(dest) if "passwd" in name]  # /etc was never read through


# ---- the walk itself -------------------------------------------------------------------------

def test_a_directory_moved_during_a_walk_stops_it(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    with Cursor.open(tmp_path) as cursor:
        assert cursor.down("a") and cursor.down("b")
        os.rename(tmp_path / "a" / "b", tmp_path / "b")
        with pytest.raises(TreeChanged, match="moved"):
            cursor.up()
