"""A kept session's layers: in the budgeted tmpfs while it runs (the kernel's bound), on disk between
runs, with what overlayfs needs kept; a close that fails leaves the previous state."""
from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxError, SandboxSpec, sessions
from isolation.limits import tmpfs
from isolation.spec import Limits

pytestmark = pytest.mark.sandbox
LIS = str(Path(sys.executable).with_name("lis-tui"))
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _own_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_SESSIONS", str(tmp_path / "sessions"))


WRITE = """set -e
echo kept > /testbed/f; ln /testbed/f /testbed/linked; touch -d 2001-02-03 /testbed/f
rm /etc/debian_version
rm -r /etc/apt; mkdir /etc/apt; echo only > /etc/apt/only
echo tool > /opt/tool; chmod 4710 /opt/tool; mkdir /opt/g; chmod 2755 /opt/g
mkdir /opt/shut; echo in > /opt/shut/in; chmod 000 /opt/shut
ln -s nowhere /testbed/link; mkfifo /testbed/fifo
stat -f -c %T /testbed /etc/apt/only
"""
READ = """cat /testbed/f; stat -c '%h %y' /testbed/f
test -e /etc/debian_version && echo whiteout-lost; test -e /etc/issue && echo lower-seen
ls -A /etc/apt; stat -c %a /opt/tool /opt/g /opt/shut; chmod 700 /opt/shut; cat /opt/shut/in
readlink /testbed/link; stat -c %F /testbed/fifo
"""


def test_a_kept_session_runs_in_the_tmpfs_and_keeps_whiteouts_opaque_dirs_modes_and_links(debian_rootfs):
    spec = SandboxSpec(rootfs=str(debian_rootfs.rootfs.path), session="k1")
    with Sandbox(spec) as sb:
        r = sb.exec(WRITE)
        assert r.exit_code == 0, r.stderr
        assert r.stdout == "tmpfs\noverlayfs\n"  # /testbed and the upper are the budgeted tmpfs, not the disk
        assert sb.writable != sb.layers and "" in tmpfs.mounts(sb)  # the layers' tmpfs, counted in the budget
    saved = Path(os.environ["LIS_SESSIONS"]) / "k1" / "layers"
    assert (saved / "upper/etc/apt").is_dir() and not (saved.parent / "upper").exists()
    # no set-uid or set-gid bit is kept: as root the saved copy is root's, a set-uid root file
    assert oct((saved / "upper/opt/tool").stat().st_mode & 0o7777) == "0o710"
    assert oct((saved / "upper/opt/g").stat().st_mode & 0o7777) == "0o755"
    with Sandbox(spec) as sb:
        r = sb.exec(READ)
    assert r.stdout == ("kept\n2 2001-02-03 00:00:00.000000000 +0000\n"  # a file, its hard link, its time
                        "lower-seen\n"  # the rootfs shows through, but the deleted file stays deleted (a whiteout)
                        "only\n"  # the replaced directory hides the rootfs's (opaque)
                        "710\n755\n0\nin\n"  # modes, set-id bits dropped, and a shut directory's
                        "nowhere\nfifo\n"), r.stderr


def test_a_kept_session_is_refused_past_its_disk_and_writes_past_it_get_enospc():
    spec = SandboxSpec(session="big", limits=Limits(disk=64 * MiB))
    with Sandbox(spec) as sb:
        assert sb.exec("head -c 20M /dev/urandom > /testbed/data").exit_code == 0
    r = subprocess.run([LIS, "exec", "--session", "big", "--disk", "16M", "--", "true"], capture_output=True, text=True)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert re.search(r"session big holds 20(\.\d)?M in .* --disk 2[56]M", r.stderr), r.stderr
    with Sandbox(SandboxSpec(session="big", limits=Limits(disk=32 * MiB))) as sb:
        r = sb.exec("head -c 20M /dev/zero > /testbed/more")
        assert r.exit_code != 0 and "No space left on device" in r.stderr  # the kernel's, at once
        assert "disk is full" in r.stderr and sb.stopped is None  # no walk stopped it: it runs on
        assert sb.exec("rm /testbed/more; cat /testbed/data | wc -c").stdout == f"{20 * MiB}\n"
    listed = subprocess.run([LIS, "sessions", "list"], capture_output=True, text=True, check=True).stdout
    assert "big" in listed and "20." in listed, listed  # its size on disk, in MB
    assert sessions.list_sessions()[0].size >= 20 * MiB


def test_a_close_whose_copy_fails_or_is_killed_leaves_the_state_before_it():
    spec = SandboxSpec(session="crash")
    with Sandbox(spec) as sb:
        sb.exec("echo one > /testbed/a")
    sb = Sandbox(spec).start()
    sb.exec("echo two > /testbed/a; head -c 4M /dev/zero > /testbed/big")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MiB, limit[1]))  # the copy of `big` fails half-way: EFBIG
    try:  # (Python ignores SIGXFSZ, so the write fails rather than the process)
        with pytest.raises(SandboxError, match="session crash was not saved .*resumes as it was before"):
            sb.close()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    folder = Path(os.environ["LIS_SESSIONS"]) / "crash"
    assert not (folder / "layers.new").exists()
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_COPY], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    assert (folder / "layers.new").is_dir()  # the half copy it left
    with Sandbox(spec) as sb:
        assert sb.exec("cat /testbed/a; ls /testbed").stdout == "one\na\ninput\noutput\n"
    assert not (folder / "layers.new").exists()


KILLED_MID_COPY = """
import resource, signal
from isolation import Sandbox, SandboxSpec
sb = Sandbox(SandboxSpec(session="crash")).start()
sb.exec("echo three > /testbed/a; head -c 4M /dev/zero > /testbed/big")
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sb.close()  # SIGXFSZ kills this process half-way through the copy of `big`
"""


def test_a_git_folder_a_kept_session_replaced_is_still_found_in_its_saved_layers(tmp_path):
    """The read-only .git check looks at the kept upper before the start copies it into the tmpfs."""
    (tmp_path / "ws/.git").mkdir(parents=True)
    with Sandbox(SandboxSpec(session="g", workspace=str(tmp_path / "ws"), git_writable=True)) as sb:
        assert sb.exec("rm -r /testbed/.git && echo planted > /testbed/.git").exit_code == 0
    with pytest.raises(SandboxError, match="session g replaced /testbed/.git in an earlier run"):
        Sandbox(SandboxSpec(session="g", workspace=str(tmp_path / "ws"))).start()


def test_a_session_moves_between_the_disk_and_the_tmpfs_with_its_files():
    """Kept on disk (--disk-on disk, or before this change), resumed in the tmpfs, and back."""
    folder = Path(os.environ["LIS_SESSIONS"]) / "moved"
    on_disk = SandboxSpec(session="moved", limits=Limits(disk=64 * MiB, disk_on="disk"))
    with Sandbox(on_disk) as sb:
        sb.exec("echo one > /testbed/a; echo home > /root/.h")
    assert (folder / "testbed/a").is_file()  # the layers in the session's folder, under the walk
    with Sandbox(SandboxSpec(session="moved", limits=Limits(disk=64 * MiB))) as sb:
        assert sb.exec("stat -f -c %T /testbed; cat /testbed/a /root/.h").stdout == "tmpfs\none\nhome\n"
        sb.exec("echo two >> /testbed/a")
    assert (folder / "layers/testbed/a").is_file() and not (folder / "testbed").exists()
    with Sandbox(on_disk) as sb:
        assert sb.exec("cat /testbed/a /root/.h").stdout == "one\ntwo\nhome\n"
    assert (folder / "testbed/a").is_file() and not (folder / "layers").exists()
