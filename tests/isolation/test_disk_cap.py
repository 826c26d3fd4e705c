"""The disk cap, with real sandboxes (issue 24, part 3).

With a disk limit the writable layers live in a tmpfs of that size and inode count: each writer
below runs for real into the kernel's wall ("No space left on device"), the note reaches the
command, and the sandbox runs on (room made, writes work again). On the code before, the walk
missed each of them: they wrote their 300 MB (or 200,000 files) and finished. The walk stays for
layers on disk (--disk-on disk; LIS_DISK_TMPFS=0 here), stopping the sandbox past its limit; the
measure tests show its numbers without a watcher in the way (no disk limit: `usage`)."""
from __future__ import annotations

import os
import stat
import time

import pytest

from isolation import Limits, Sandbox, SandboxError, SandboxSpec
from isolation.limits import diskcap
from isolation.host.walk import RefusedPaths

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]
MiB = 1 << 20
UNWATCHED = SandboxSpec(limits=Limits(disk=None, inodes=None))
# 300 MB a megabyte at a time, slowly enough for a pass of the watcher to find it.
FILL = "for i in $(seq 300); do head -c 1M /dev/zero >{target}; sleep 0.02; done; echo finished"


def stopped(result, limit: str) -> None:
    assert "finished" not in result.stdout, "the writer was not stopped"
    assert f"limit of {limit}" in result.stderr and "start it with a larger limit" in result.stderr


def walled(sb, result, limit: str, room: str) -> None:
    """The writer met the kernel's wall, was told why, and the sandbox runs on: once `room` is
    made, the note is gone and writes work again."""
    assert "No space left on device" in result.stderr, result.stderr[-2000:]
    assert f"disk is full: its limit of {limit} is reached" in result.stderr
    assert "--disk SIZE" in result.stderr or "inodes in [sandbox]" in result.stderr  # how to raise it
    assert not sb.stopped and sb.running
    used, inodes = sb.writable_usage()
    assert used <= sb.spec.limits.disk and inodes <= (sb.spec.limits.inodes or inodes)
    again = sb.exec(f"{room} && echo more > /testbed/after && cat /testbed/after")
    assert (again.exit_code, again.stdout, again.stderr) == (0, "more\n", "")


def test_a_directory_the_sandbox_shut_with_its_mode_is_measured_and_keeps_its_mode():
    with Sandbox(UNWATCHED) as sb:
        r = sb.exec("mkdir -p /testbed/a/b && head -c 30M /dev/zero > /testbed/a/b/f && head -c 30M /dev/zero "
                    "> /testbed/a/g && chmod 0000 /testbed/a/b && chmod 0300 /testbed/a")
        assert r.exit_code == 0, r.stderr
        shut = sb.writable / "testbed" / "a"
        if os.geteuid() != 0:  # root reads it anyway (CAP_DAC_READ_SEARCH); we cannot, by path
            with pytest.raises(PermissionError):
                os.listdir(shut)
        used, inodes = diskcap.usage(sb)
        assert used >= 60 * MiB and inodes >= 4
        assert stat.S_IMODE(os.lstat(shut).st_mode) == 0o300  # given back as the sandbox left it
        assert sb.exec("stat -c %a /testbed/a /testbed/a/b").stdout.split() == ["300", "0"]


def test_a_writer_in_a_shut_directory_meets_the_kernels_wall():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        r = sb.exec("mkdir /testbed/shut && chmod 0300 /testbed/shut && "
                    "for i in $(seq 300); do head -c 1M /dev/zero >/testbed/shut/f$i || exit 1; done; echo finished",
                    timeout=120)
        walled(sb, r, "40 MiB", "chmod 0700 /testbed/shut && rm -rf /testbed/shut")


def test_deleted_files_held_open_count_on_the_layers_and_not_on_tmpfs():
    with Sandbox(UNWATCHED) as sb:
        holder = sb.popen(["sh", "-c", "exec 3>/testbed/held 4>/root/held 5>/tmp/held; head -c 30M /dev/zero >&3; "
                           "head -c 20M /dev/zero >&4; head -c 40M /dev/zero >&5; rm /testbed/held /root/held "
                           "/tmp/held; echo ready; exec sleep 60"], stdout=-1)
        assert holder.stdout.readline() == b"ready\n"
        assert not (sb.writable / "testbed" / "held").exists()  # gone from the tree the walk reads
        used, inodes = diskcap.usage(sb)
        assert 50 * MiB <= used < 60 * MiB  # 30 + 20 MiB held on the layers; /tmp's 40 MiB is memory
        holder.kill()
        holder.wait()
        assert diskcap.usage(sb)[0] < MiB


def test_a_writer_to_a_deleted_file_meets_the_kernels_wall():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        holder = sb.popen(["sh", "-c", "exec 3>/testbed/held && rm /testbed/held && head -c 300M /dev/zero >&3; "
                           "echo written; exec sleep 60"], stdout=-1, stderr=-1)
        assert holder.stdout.readline() == b"written\n"
        r = sb.exec("echo x > /testbed/x")  # the deleted file, still held, fills the disk
        assert r.exit_code != 0 and "disk is full: its limit of 40 MiB is reached" in r.stderr
        holder.kill()
        holder.wait()
        assert b"No space left on device" in holder.stderr.read()
        walled(sb, r, "40 MiB", "true")  # the file went with the process that held it


def test_200000_empty_files_meet_the_inode_cap():
    with Sandbox(SandboxSpec(limits=Limits(disk=1 << 30, inodes=50_000))) as sb:
        r = sb.exec("mkdir /testbed/many && cd /testbed/many && python3 -c '\n"
                    "for n in range(200):\n    [open(f\"{n}-{i}\", \"w\").close() for i in range(1000)]' "
                    "&& echo finished", timeout=180)
        assert len(os.listdir(sb.writable / "testbed" / "many")) < 50_000
        walled(sb, r, "50,000 files and directories", "rm -rf /testbed/many")


def test_sparse_files_count_their_blocks_not_their_length():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        assert sb.exec("truncate -s 1G /testbed/s1 /testbed/s2 /testbed/s3").exit_code == 0
        assert sb.writable_usage()[0] < MiB and "limit" not in sb.exec("true").stderr  # 3 GiB long, nothing held
        r = sb.exec("dd if=/dev/zero of=/testbed/s2 bs=1M count=60 conv=notrunc status=none")  # now 60 MiB of data
        walled(sb, r, "40 MiB", "rm /testbed/s2")


def test_the_walk_stops_a_sandbox_whose_layers_stay_on_disk(monkeypatch):
    monkeypatch.setenv("LIS_DISK_TMPFS", "0")  # as --disk-on disk layers are
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        assert sb.writable == sb.layers
        r = sb.exec("mkdir /testbed/shut && chmod 0300 /testbed/shut && "
                    + FILL.format(target="/testbed/shut/f$i"), timeout=120)
        stopped(r, "40 MiB")
        assert sb.stopped


def test_the_inode_cap_stops_a_sandbox_that_has_no_disk_limit():
    with Sandbox(SandboxSpec(limits=Limits(disk=None, inodes=1000))) as sb:
        holder = sb.popen(["sleep", "60"])
        told = sb.exec("mkdir /testbed/many && cd /testbed/many && touch $(seq 2000)").stderr
        diskcap.check(sb)
        deadline = time.monotonic() + 10
        while holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holder.poll() is not None  # killed, with the whole sandbox
        assert "limit of 1,000 files and directories was reached" in told + (sb.stopped or "")


@pytest.mark.parametrize("with_workspace", [False, True])
def test_what_a_stopped_sandbox_wrote_under_testbed_stays_readable_until_close(tmp_path, with_workspace,
                                                                               monkeypatch):
    # The answer and the output files used to go with the sandbox: every read needed its / alive.
    monkeypatch.setenv("LIS_DISK_TMPFS", "0")  # the walk stops it (a tmpfs's wall leaves it running)
    spec = SandboxSpec(limits=Limits(disk=20 * MiB), workspace=tmp_path / "ws" if with_workspace else None)
    if with_workspace:
        (tmp_path / "ws").mkdir()
    sb = Sandbox(spec).start()
    try:
        sb.exec("mkdir -p /testbed/output/sub && echo 42 > /testbed/output/answer.txt && echo kept > "
                "/testbed/output/sub/notes.md && ln -s /etc/hostname /testbed/output/link")
        # a writer with no end: however late a loaded machine's watcher comes, it is stopped
        stopped(sb.exec("i=0; while :; do i=$((i+1)); head -c 1M /dev/zero > /testbed/f$i; sleep 0.02; done",
                        timeout=240), "20 MiB")
        assert sb.stopped and sb.readable
        assert sb.read_file("/testbed/output/answer.txt") == b"42\n"
        assert sb.read_file_ends("/testbed/output/sub/notes.md", 10, 0)[0] == b"kept\n"
        with pytest.raises(FileNotFoundError):  # a link resolves in what the sandbox wrote, never the host
            sb.read_file("/testbed/output/link")
        for outside in ("/etc/hostname", "/testbed/../etc/hostname", "/tmp/x"):
            with pytest.raises(SandboxError, match="stopped"):
                sb.read_file(outside)
        with pytest.raises(SandboxError, match="stopped"):  # nothing is written or run any more
            sb.write_file("/testbed/output/more.txt", b"x")
        with pytest.raises(RefusedPaths, match="link"):  # the rest is copied
            sb.export("/testbed/output", tmp_path / "out", links=False)
        assert (tmp_path / "out" / "answer.txt").read_text() == "42\n"
        assert (tmp_path / "out" / "sub" / "notes.md").read_text() == "kept\n"
    finally:
        sb.close()
    assert not sb.readable
    with pytest.raises(SandboxError):
        sb.read_file("/testbed/output/answer.txt")
