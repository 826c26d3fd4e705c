"""Memory per sandbox, not per process (issue 35, item 5): where no cgroup holds a sandbox, a
watcher sums the anonymous memory of its processes and stops it whole past `--memory`, saying so.
Each process stays under its own limit (RLIMIT_DATA): only the sum is over."""
from __future__ import annotations

import errno
import subprocess
import time

import pytest

from isolation import Limits, Sandbox, SandboxError, SandboxSpec
from isolation.limits import memcap

pytestmark = pytest.mark.sandbox
MiB = 1 << 20
# Holds `argv[1]` MiB of touched heap, says so, then waits for its stdin to end.
HOLD = "import sys; held = bytearray(int(sys.argv[1]) << 20); print('held', flush=True); sys.stdin.read()"


def _holders(sb: Sandbox, mib: int, count: int = 3) -> tuple[list, list[bytes]]:
    """The processes, and what each said: "held" once it had its memory (the sandbox may be
    stopped before the last one does). Each starts once the one before holds its memory, so which
    one passes the sum is known: started together, three could be stopped at 90 MiB each."""
    procs, said = [], []
    for _ in range(count):
        procs.append(sb.popen(["python3", "-c", HOLD, str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        said.append(procs[-1].stdout.readline())
    return procs, said


def _no_cgroup(sb: Sandbox) -> None:
    if not memcap.applies(sb):
        pytest.skip("a cgroup holds this sandbox's memory (memory.max): the watcher is not needed")


def test_three_processes_that_together_pass_the_memory_limit_stop_the_sandbox_and_say_why():
    with Sandbox(SandboxSpec(limits=Limits(memory=256 * MiB))) as sb:
        _no_cgroup(sb)
        procs, said = _holders(sb, 120)  # 360 MiB together, each under 256
        for proc in procs:
            proc.wait(timeout=120)  # killed with the whole sandbox: nothing ends them otherwise
        why = sb.stopped
        with pytest.raises(SandboxError) as later:
            sb.exec("true")
    assert said[:2] == [b"held\n"] * 2, said  # each got its memory: under the per-process limit
    assert why and "memory limit of 256 MiB was reached" in why and "processes together" in why, why
    assert "--memory SIZE" in why and "every process in it was killed" in why
    assert "memory limit of 256 MiB" in str(later.value) and "--memory" in str(later.value)


def test_processes_under_the_limit_together_are_counted_once_and_left_running():
    with Sandbox(SandboxSpec(limits=Limits(memory=256 * MiB))) as sb:
        _no_cgroup(sb)
        procs, said = _holders(sb, 40)  # 120 MiB together
        used, count = memcap.usage(sb)
        memcap.check(sb)
        still = sb.exec("echo running").stdout
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=60)
    assert said == [b"held\n"] * 3, said
    assert 120 * MiB <= used < 200 * MiB and count >= 4, (used, count)  # the three, pid 1, and the exec's
    assert still == "running\n" and sb.stopped is None


def test_processes_of_a_pid_namespace_nested_in_the_sandbox_count_toward_its_memory():
    """With nested_userns a command may make a pid namespace of its own; the kernel says whose it
    is nested in (NS_GET_PARENT), so what runs there is the sandbox's, even once its parent is gone
    and the sandbox's pid 1 adopted it. Before, only the sandbox's own namespace counted."""
    nested = ["unshare", "--user", "--pid", "--fork", "python3", "-c", HOLD]
    with Sandbox(SandboxSpec(limits=Limits(memory=256 * MiB), nested_userns=True)) as sb:
        _no_cgroup(sb)
        first = sb.popen([*nested, "120"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        said = first.stdout.readline()
        first.kill()  # unshare alone: its child, pid 1 of the nested namespace, goes on
        first.wait(timeout=60)
        used, count = memcap.usage(sb)
        second = sb.popen([*nested, "200"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        second.wait(timeout=120)  # killed with the whole sandbox: nothing ends it otherwise
        why = sb.stopped
    assert said == b"held\n", said
    assert used >= 120 * MiB and count == 2, (used, count)  # pid 1 and the adopted holder
    assert why and "memory limit of 256 MiB was reached" in why, why


# Memory that RLIMIT_DATA does not see (issue 52, item 4): a memfd written and held open (in the
# kernel's own tmpfs, which nothing sizes), and a shared mapping (Python's mmap(-1, SIZE)), each in
# 1 MiB pieces so that no anonymous copy of it is ever made.
MEMFD = ("import os, sys; fd = os.memfd_create('held'); piece = b'x' * (1 << 20)\n"
         "for _ in range(int(sys.argv[1])): os.write(fd, piece)\n"
         "print('held', flush=True); sys.stdin.read()")
SHARED = ("import mmap, sys; m = mmap.mmap(-1, int(sys.argv[1]) << 20); piece = b'x' * (1 << 20)\n"
          "for i in range(int(sys.argv[1])): m[i << 20:(i + 1) << 20] = piece\n"
          "print('held', flush=True); sys.stdin.read()")
# SysV IPC, asked for until the kernel refuses (at most `most` of each): 64 MiB shared-memory
# segments (never touched: the kernel counts their size), message queues, sets of 32,000 semaphores.
SYSV = """import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
def count(make, most):
    for n in range(most):
        if make() < 0:
            return n, ctypes.get_errno()
    return most, 0
print(*count(lambda: libc.shmget(0, ctypes.c_size_t(64 << 20), 0o600), 8),
      *count(lambda: libc.msgget(0, 0o600), 1000), *count(lambda: libc.semget(0, 32000, 0o600), 4))
"""


def _shmem() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("Shmem:"))


def test_shared_memory_and_memfd_files_count_and_sysv_is_bounded_in_the_sandboxs_ipc_namespace():
    """Three processes each wrote 400 MiB into memfd files under --memory 256M: the host's shared
    memory grew 1.2 GiB and the sandbox ran on. Now a memfd held open and a shared mapping, each
    under the limit alone, stop the sandbox together, and what they held is freed; SysV shared
    memory is refused by the kernel past the memory limit, message queues and semaphores past
    their caps, in the sandbox's own IPC namespace."""
    with Sandbox(SandboxSpec(limits=Limits(memory=256 * MiB))) as sb:
        sysv = sb.exec(["python3", "-c", SYSV]).stdout.split()
        # 4 segments of 64 MiB (the 256 MiB limit), then ENOSPC; 256 queues; 2 sets (65,536 semaphores)
        assert sysv == ["4", str(errno.ENOSPC), "256", str(errno.ENOSPC), "2", str(errno.ENOSPC)], sysv
        _no_cgroup(sb)
        memfd = sb.popen(["python3", "-c", MEMFD, "150"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        said = [memfd.stdout.readline()]
        used, _ = memcap.usage(sb)
        held = _shmem()  # the memfd's 150 MiB among the host's shared memory
        shared = sb.popen(["python3", "-c", SHARED, "150"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        said.append(shared.stdout.readline())
        for proc in (memfd, shared):
            proc.wait(timeout=120)  # killed with the whole sandbox: nothing ends them otherwise
        why = sb.stopped
        with pytest.raises(SandboxError) as later:
            sb.exec("true")
        deadline = time.monotonic() + 30
        while _shmem() > held - 100 * MiB and time.monotonic() < deadline:
            time.sleep(0.1)
        freed = held - _shmem()
    assert said[0] == b"held\n" and 150 * MiB <= used < 256 * MiB, (said, used)  # counted, under the limit alone
    assert why and "memory limit of 256 MiB was reached" in why and "memfd files included" in why, why
    assert "--memory SIZE" in why and "memory limit of 256 MiB" in str(later.value)
    assert freed >= 100 * MiB, freed  # nothing of the sandbox's holds the memfd any more
