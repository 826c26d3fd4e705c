"""The spawn helper and its zygotes: what a command gets, and what happens around idle exits."""
from __future__ import annotations

import os
import signal
import time

import pytest

from isolation import Sandbox, spawn
from isolation.spawn.helper import IDLE

pytestmark = pytest.mark.sandbox


def test_a_command_holds_no_descriptor_but_its_own(sandbox):
    # The zygote holds the sockets of every command it started: none may leak into the next one.
    sleepers = [sandbox.popen(["sleep", "30"]) for _ in range(3)]
    try:
        fds = sandbox.exec(["ls", "/proc/self/fd"]).stdout.split()
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
    assert sorted(fds, key=int) == ["0", "1", "2", "3"]  # 3: the directory ls reads


def test_a_command_that_outlives_its_zygote_still_reports_its_end(sandbox):
    proc = sandbox.popen(["sh", "-c", f"sleep {IDLE + 1.5}; exit 7"])
    first = sandbox._zygote.pid
    time.sleep(IDLE + 0.5)  # the zygote is idle now, and hands the command to the helper
    assert not os.path.exists(f"/proc/{first}") or _state(first) == "Z"
    assert proc.wait(10) == 7
    assert sandbox.exec("echo again").stdout == "again\n"  # a new zygote
    assert sandbox._zygote.pid != first


def test_a_caller_slower_than_the_idle_exit_still_gets_its_commands_run(sandbox, monkeypatch):
    """Under load a thread may send its request seconds after the zygote forked for it was ready
    (128 episodes on 2 cores): that zygote waits for it, and one exiting idle never drops a request
    that crossed its exit. Before, three such tries in a row crashed the episode."""
    real = spawn._send

    def starved(channel, request, fds):
        if request.get("op") != "zygote":  # the command's request, not the fork's
            time.sleep(IDLE * 1.5)
        return real(channel, request, fds)

    time.sleep(IDLE * 1.5)  # the sandbox's first zygote has exited idle
    monkeypatch.setattr(spawn, "_send", starved)
    for _ in range(2):
        assert sandbox.exec("echo ok").stdout == "ok\n"


def test_a_killed_helper_is_replaced():
    with Sandbox() as sb:
        assert sb.exec("true").exit_code == 0
        helper = spawn._helper.pid
        os.kill(helper, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while spawn._helper.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not spawn._helper.alive()
        sb._zygote.close()  # its zygote went with its helper's socket
        assert sb.exec("echo back").stdout == "back\n"
        assert spawn._helper.pid != helper


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _keys_owned() -> int:
    """How many keys this uid owns (/proc/key-users' qnkeys), which the kernel caps at
    kernel.keys.maxkeys (200) for an ordinary user."""
    with open("/proc/key-users") as f:
        for line in f:
            uid, rest = line.split(":", 1)
            if int(uid) == os.getuid():
                return int(rest.split()[2].split("/")[0])
    return 0


def test_live_sandboxes_cost_no_key_each():
    # A keyring per zygote made the 197th live sandbox of an ordinary user fail with EDQUOT.
    with Sandbox() as first:
        first.exec("true")  # the helper, with its one keyring, is up
        before = _keys_owned()
        boxes = [Sandbox().start() for _ in range(8)]
        try:
            for sb in boxes:
                assert sb.exec("true").exit_code == 0  # each has a live zygote now
            # a keyring each would be 8 more; the uid's other processes (root's, on a shared
            # machine) may make or free a key or two meanwhile
            assert _keys_owned() - before < len(boxes) // 2, (before, _keys_owned())
        finally:
            for sb in boxes:
                sb.close()
