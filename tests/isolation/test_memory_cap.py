"""Memory per sandbox, not per process (issue 35, item 5): where no cgroup holds a sandbox, a
watcher sums the anonymous memory of its processes and stops it whole past `--memory`, saying so.
Each process stays under its own limit (RLIMIT_DATA): only the sum is over."""
from __future__ import annotations

import subprocess

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
