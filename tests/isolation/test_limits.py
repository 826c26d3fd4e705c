"""One sandbox never starves the host or its neighbours (issue 24, parts 1, 2 and 6): pid 1 is
bounded like every command and out of their reach, the disk cap stops the sandbox whole, every
tmpfs is sized or read-only, and the per-user kernel counters are capped per sandbox. Each test
runs the attack and shows what it got."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import subprocess
import time

import pytest

from isolation import Limits, Sandbox, SandboxError, SandboxSpec
from tools.shell import Shell

pytestmark = pytest.mark.sandbox
LIMIT_ROWS = ("Max processes", "Max data size", "Max file size", "Max open files", "Max pending signals",
              "Max msgqueue size")

# Rewrites a process's code through /proc/PID/mem: execve("/bin/sh", ["sh", "-c", SCRIPT]) written at
# its instruction pointer (read from /proc/PID/syscall), a two-byte nop before it where a restarted
# read() resumes, then a signal its bash handles (SIGCHLD) makes that read() return into it.
REWRITE = r'''
import os, signal, struct, subprocess, sys, time

def rewrite(pid, script):
    try:
        pc = int(open(f"/proc/{pid}/syscall").read().split()[-1], 16)
    except OSError as e:
        return f"syscall:{errno_name(e)}"
    strings = b"/bin/sh\0sh\0-c\0" + script.encode() + b"\0"
    code_len = 29
    path_at = pc + code_len
    argv_at = (path_at + len(strings) + 7) & ~7
    code = (b"\x48\xbf" + struct.pack("<Q", path_at) + b"\x48\xbe" + struct.pack("<Q", argv_at)
            + b"\x31\xd2\xb8\x3b\x00\x00\x00\x0f\x05")  # rdi=path, rsi=argv, edx=0, eax=execve; syscall
    blob = code + strings
    blob += b"\0" * (argv_at - pc - len(blob)) + struct.pack("<4Q", path_at + 8, path_at + 11, path_at + 14, 0)
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as e:
        return f"mem:{errno_name(e)}"
    os.pwrite(fd, b"\x66\x90", pc - 2)
    os.pwrite(fd, blob, pc)
    os.close(fd)
    os.kill(pid, signal.SIGCHLD)
    return "written"

def errno_name(e):
    import errno
    return errno.errorcode[e.errno]

def wait_for(path):
    for _ in range(100):
        if os.path.exists(path):
            return True
        time.sleep(0.05)
    return False

# A control: the same rewrite of a sibling like pid 1 (a bash in `read`, started by this command)
sibling = subprocess.Popen(["bash", "-c", "while read -r _; do :; done"], stdin=subprocess.PIPE)
time.sleep(0.3)
said = {"sibling": rewrite(sibling.pid, "cat /proc/self/limits > /testbed/sibling-limits"),
        "pid1": rewrite(1, "cat /proc/self/limits > /testbed/pid1-limits; exec sleep 1000")}
said["sibling_ran"] = wait_for("/testbed/sibling-limits")
said["pid1_ran"] = wait_for("/testbed/pid1-limits")
print(json.dumps(said))
'''


def _rows(text: str) -> dict[str, str]:
    return {row: " ".join(line[len(row):].split()[:2]) for line in text.splitlines() for row in LIMIT_ROWS
            if line.startswith(row)}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the payload is x86_64 machine code; the defence "
                    "(pid 1's capability) is the same on every architecture")
def test_a_command_cannot_rewrite_pid_1_through_proc_mem_and_pid_1_holds_every_limit(sandbox):
    r = sandbox.exec(["python3", "-c", "import json\n" + REWRITE], timeout=60)
    assert r.exit_code == 0, r.stderr
    said = json.loads(r.stdout)
    # the attack works: a sibling command, as reachable as pid 1 was, ran the payload...
    assert said["sibling"] == "written" and said["sibling_ran"], said
    # ...and pid 1 refuses it: its code cannot be read or written (bwrap.KEEPER_CAP)
    assert said["pid1"] == "syscall:EPERM" and not said["pid1_ran"], said
    assert sandbox.exec("cat /proc/1/cmdline").stdout.startswith("sh\0-c\0")  # still the keeper
    # whatever pid 1 ever runs holds the limits every command holds
    pid_1 = _rows(sandbox.exec("cat /proc/1/limits").stdout)
    command = _rows(sandbox.exec("cat /proc/self/limits").stdout)
    assert pid_1 == command and len(command) == len(LIMIT_ROWS), (pid_1, command)
    signals = Limits().pending_signals
    assert pid_1["Max processes"] == "1024 1024" and pid_1["Max pending signals"] == f"{signals} {signals}"


def test_the_disk_cap_stops_the_whole_sandbox_pid_1_included_and_says_how_to_raise_it(monkeypatch):
    monkeypatch.setenv("LIS_DISK_TMPFS", "0")  # the walk's cap (--disk-on disk); a tmpfs's is the kernel's wall
    with Sandbox(SandboxSpec(limits=Limits(disk=20 << 20))) as sb, Shell(sb, timeout=60) as shell:
        pidfd = os.pidfd_open(sb.pid)
        try:
            # a writer that left the command's tree (pid 1 inherits it), then the command itself
            result = shell.run("setsid sh -c 'while :; do sleep 1; done' & "
                               "for i in $(seq 400); do head -c 1M /dev/zero > /testbed/f$i; sleep 0.02; done; "
                               "echo finished")
            assert "finished" not in result.output
            assert "disk limit of 20 MiB was reached" in result.output and "--disk" in result.output
            assert sb.stopped and "--disk SIZE" in sb.stopped
            from isolation.output import ready
            assert ready([pidfd], 10), "pid 1 outlived the disk cap"
        finally:
            os.close(pidfd)
        with pytest.raises(SandboxError, match=r"disk limit of 20 MiB .* --disk SIZE"):
            sb.exec("echo still here")
        with pytest.raises(SandboxError, match="disk limit"):
            shell.run("echo still here")


def test_every_tmpfs_is_sized_or_read_only():
    with Sandbox(SandboxSpec(limits=Limits(tmp_size=16 << 20))) as sb:
        masks = sb.exec("grep -E ' /etc/(ssh|ssl/private|sudoers.d) ' /proc/self/mountinfo "
                        "| cut -d' ' -f5").stdout.split()
        got = {path: sb.exec(f"head -c 20M /dev/zero > {path}/fill; echo $?; stat -c %s {path}/fill")
               for path in ("/dev/shm", "/run", "/tmp", "/", "/dev", *masks)}
        sizes = sb.exec("df -B1 --output=size / /dev /dev/shm /run /tmp | tail -5").stdout.split()
        files = sb.exec("cd /dev/shm && rm fill && i=0; while [ $i -lt 5000 ] && : > f$i; do i=$((i+1)); done; echo $i")
    # sized: a writer stops at 16 MiB (/dev at 1 MiB), and 5,000 empty files at 4,096 inodes
    for path in ("/dev/shm", "/run", "/tmp", "/"):
        assert "No space left on device" in got[path].stderr and got[path].stdout.split() == ["1", str(16 << 20)], got
    assert "No space left on device" in got["/dev"].stderr and int(got["/dev"].stdout.split()[1]) <= 1 << 20
    assert sizes == [str(16 << 20), str(1 << 20)] + [str(16 << 20)] * 3
    assert "No space left on device" in files.stderr and files.stdout.strip() == "4095"  # and its root
    for path in masks:  # the masks over host secrets: read-only
        assert "Read-only file system" in got[path].stderr, (path, got[path])
    assert masks, "this host has no secret folder to mask (/etc/ssh, /etc/ssl/private, /etc/sudoers.d)"


COUNTERS = r'''
import ctypes, errno, json, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
def count(make, most):
    made = 0
    while made < most and make() >= 0:
        made += 1
    return made, errno.errorcode.get(ctypes.get_errno(), "?")
def timer():
    t = ctypes.c_void_p()
    return libc.timer_create(1, None, ctypes.byref(t))  # CLOCK_MONOTONIC, SIGALRM on expiry
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
def mqueue(name=[0]):  # one message of 1 KiB: 1,120 bytes of RLIMIT_MSGQUEUE with the kernel's bookkeeping
    name[0] += 1
    return rt.mq_open(f"/lis-{os.getpid()}-{name[0]}".encode(), os.O_CREAT | os.O_RDWR, 0o600,
                      ctypes.byref(Attr(0, 1, 1024, 0)))
class Value(ctypes.Union):
    _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
queue = lambda: libc.sigqueue(os.getpid(), signal.SIGRTMIN, Value(1))
most = int(sys.argv[1])
out = {"inotify": count(libc.inotify_init, most), "mqueue": count(mqueue, most), "sigqueue": count(queue, most),
       "timer": count(timer, most)}
for n in range(1, mqueue.__defaults__[0][0] + 1):  # queues outlive us on the host, unlike in a sandbox
    rt.mq_unlink(f"/lis-{os.getpid()}-{n}".encode())
print(json.dumps(out), flush=True)
if sys.argv[2] == "hold":
    sys.stdin.read()
'''


@pytest.mark.skipif(os.geteuid() == 0, reason="root's processes share and are exempt from some of these counts: "
                    "the unprivileged CI pass (lis-ci) runs this")
def test_one_sandbox_holding_every_per_user_counter_leaves_them_to_the_host_and_a_neighbour():
    with Sandbox() as hog, Sandbox() as neighbour:
        holder = hog.popen(["python3", "-c", COUNTERS, "200000", "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            held = json.loads(holder.stdout.readline())
            host = json.loads(subprocess.run([_python(), "-c", COUNTERS, "1", "once"], capture_output=True,
                                             text=True, check=True).stdout)
            beside = neighbour.exec(["python3", "-c", COUNTERS, "1", "once"])
        finally:
            holder.kill()
            holder.wait()
    # the host and a second sandbox still get each of them...
    ok = {"inotify": [1, "?"], "mqueue": [1, "?"], "sigqueue": [1, "?"], "timer": [1, "?"]}
    assert {k: [v[0], "?"] for k, v in host.items()} == ok, (host, held)
    assert {k: [v[0], "?"] for k, v in json.loads(beside.stdout).items()} == ok, (beside, held)
    # ...since the hog took all it was allowed, and no more
    limits = Limits()
    assert held["inotify"] == [limits.inotify_instances, "EMFILE"], held
    assert held["sigqueue"] == [limits.pending_signals, "EAGAIN"] and held["timer"] == [0, "EAGAIN"], held
    assert held["mqueue"] == [limits.message_queues // 1120, "EMFILE"], held


PTYS = """
import errno, os, sys
held = []
try:
    while len(held) < 500:
        held.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    print(len(held), "none")
except OSError as exc:
    print(len(held), errno.errorcode[exc.errno])
"""


def test_one_sandbox_holding_every_pty_it_may_leaves_ptys_to_a_neighbour():
    # Every devpts but the host's shares kernel.pty.max - kernel.pty.reserve (3,072): uncapped,
    # one sandbox took them all, and no other sandbox or container could open a terminal.
    with Sandbox() as hog, Sandbox() as neighbour:
        holder = hog.popen(["python3", "-c", PTYS + "sys.stdout.flush(); sys.stdin.read()"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            held = holder.stdout.readline().decode().split()
            beside = neighbour.exec(["python3", "-c", PTYS.replace("< 500", "< 1")])
            shell_ok = Shell(neighbour, timeout=30)  # the shell tool's own pty, opened from the host side
            with shell_ok as shell:
                assert shell.run("echo ok").output.strip() == "ok"
        finally:
            holder.kill()
            holder.wait()
    assert held == [str(Limits().ptys), "ENOSPC"], held
    assert beside.stdout.split() == ["1", "none"], beside


def _python() -> str:
    """A python of the host's that can load librt (the test's own)."""
    import sys
    return sys.executable


def test_a_command_stopped_by_a_limit_is_told_which_and_how_to_change_it():
    with Sandbox(SandboxSpec(limits=Limits(memory=256 << 20, tmp_size=8 << 20))) as sb, Shell(sb, timeout=60) as shell:
        memory = shell.run("python3 -c 'x = bytearray(512 << 20)'")
        full = shell.run("head -c 9M /dev/zero > /tmp/fill")
        fine = shell.run("false")
    assert "MemoryError" in memory.output and "256 MiB of memory" in memory.output and "--memory" in memory.output
    assert "/tmp 8 MiB" in full.output and "tmp_size in [sandbox]" in full.output
    assert fine.output == "" or "sandbox" not in fine.output
