"""What the disk cap's walk used to miss (issue 24, part 3's early warning), with real sandboxes.

Each writer below runs for real and is stopped at the cap (the note reaches the command, the rest
of its loop never runs); on the code before, each wrote its 300 MB (or 200,000 files) and finished.
The measure tests show the walk's numbers without a watcher in the way (no disk limit: `usage`)."""
from __future__ import annotations

import os
import stat
import time

import pytest

from isolation import Limits, Sandbox, SandboxError, SandboxSpec, diskcap
from isolation.hostwalk import RefusedPaths

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]
MiB = 1 << 20
UNWATCHED = SandboxSpec(limits=Limits(disk=None, inodes=None))
# 300 MB a megabyte at a time, slowly enough for a pass of the watcher to find it.
FILL = "for i in $(seq 300); do head -c 1M /dev/zero >{target}; sleep 0.02; done; echo finished"


def stopped(result, limit: str) -> None:
    assert "finished" not in result.stdout, "the writer was not stopped"
    assert f"limit of {limit}" in result.stderr and "start it with a larger limit" in result.stderr


def test_a_directory_the_sandbox_shut_with_its_mode_is_measured_and_keeps_its_mode():
    with Sandbox(UNWATCHED) as sb:
        r = sb.exec("mkdir -p /testbed/a/b && head -c 30M /dev/zero > /testbed/a/b/f && head -c 30M /dev/zero "
                    "> /testbed/a/g && chmod 0000 /testbed/a/b && chmod 0300 /testbed/a")
        assert r.exit_code == 0, r.stderr
        shut = sb.layers / "testbed" / "a"
        if os.geteuid() != 0:  # root reads it anyway (CAP_DAC_READ_SEARCH); we cannot, by path
            with pytest.raises(PermissionError):
                os.listdir(shut)
        used, inodes = diskcap.usage(sb)
        assert used >= 60 * MiB and inodes >= 4
        assert stat.S_IMODE(os.lstat(shut).st_mode) == 0o300  # given back as the sandbox left it
        assert sb.exec("stat -c %a /testbed/a /testbed/a/b").stdout.split() == ["300", "0"]


def test_a_writer_in_a_shut_directory_is_stopped_at_the_cap():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        r = sb.exec("mkdir /testbed/shut && chmod 0300 /testbed/shut && "
                    + FILL.format(target="/testbed/shut/f$i"), timeout=120)
        stopped(r, "40 MiB")


def test_deleted_files_held_open_count_on_the_layers_and_not_on_tmpfs():
    with Sandbox(UNWATCHED) as sb:
        holder = sb.popen(["sh", "-c", "exec 3>/testbed/held 4>/root/held 5>/tmp/held; head -c 30M /dev/zero >&3; "
                           "head -c 20M /dev/zero >&4; head -c 40M /dev/zero >&5; rm /testbed/held /root/held "
                           "/tmp/held; echo ready; exec sleep 60"], stdout=-1)
        assert holder.stdout.readline() == b"ready\n"
        assert not (sb.layers / "testbed" / "held").exists()  # gone from the tree the walk reads
        used, inodes = diskcap.usage(sb)
        assert 50 * MiB <= used < 60 * MiB  # 30 + 20 MiB held on the layers; /tmp's 40 MiB is memory
        holder.kill()
        holder.wait()
        assert diskcap.usage(sb)[0] < MiB


def test_a_writer_to_a_deleted_file_is_stopped_at_the_cap():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        r = sb.exec("exec 3>/testbed/held && rm /testbed/held && " + FILL.format(target="&3"), timeout=120)
        stopped(r, "40 MiB")


def test_200000_empty_files_are_stopped_at_the_inode_cap():
    with Sandbox(SandboxSpec(limits=Limits(disk=1 << 30, inodes=50_000))) as sb:
        r = sb.exec("mkdir /testbed/many && cd /testbed/many && python3 -c 'import time\n"
                    "for n in range(200):\n    [open(f\"{n}-{i}\", \"w\").close() for i in range(1000)]\n"
                    "    time.sleep(0.05)' && echo finished", timeout=180)
        stopped(r, "50,000 files and directories")
        assert len(os.listdir(sb.layers / "testbed" / "many")) < 200_000  # the sandbox is stopped: look from here


def test_sparse_files_count_their_blocks_not_their_length():
    with Sandbox(SandboxSpec(limits=Limits(disk=40 * MiB))) as sb:
        assert sb.exec("truncate -s 1G /testbed/s1 /testbed/s2 /testbed/s3").exit_code == 0
        holder = sb.popen(["sleep", "60"])
        diskcap.check(sb)  # 3 GiB long, 0 bytes held: under the cap
        assert holder.poll() is None and "limit" not in sb.exec("true").stderr
        # now 60 MiB of it is data (the watcher may stop dd itself; dd's stderr then has the note)
        told = sb.exec("dd if=/dev/zero of=/testbed/s2 bs=1M count=60 conv=notrunc status=none").stderr
        diskcap.check(sb)
        deadline = time.monotonic() + 10
        while holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert holder.poll() is not None  # killed, with the whole sandbox
        assert "disk limit of 40 MiB was reached" in told + (sb.stopped or "")


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
def test_what_a_stopped_sandbox_wrote_under_testbed_stays_readable_until_close(tmp_path, with_workspace):
    # The answer and the output files used to go with the sandbox: every read needed its / alive.
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
