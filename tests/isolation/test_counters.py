"""Sandboxes share the user's per-user kernel counters fairly (issue 35, item 3): 16 live
sandboxes, each taking as much as it can of every counter, leave the host user at least half of
each. The hogs and the host run the same script: real mq_open, inotify_init1/inotify_add_watch,
sigqueue and /dev/ptmx loops."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from isolation import Limits, Sandbox
from isolation.limits import counters

pytestmark = pytest.mark.sandbox

# Takes up to argv[1] (a JSON object) of each counter, or all it can where a goal is absent, prints
# what it took as JSON, and holds it until its stdin ends. A queue of one message of z bytes costs
# z + 96 bytes of RLIMIT_MSGQUEUE (the message's header and its priority's node); z is at most 8192
# (fs.mqueue.msgsize_max) without CAP_SYS_RESOURCE.
TAKE = r'''
import ctypes, errno, json, os, resource, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
goal = json.loads(sys.argv[1])
most = lambda name: goal.get(name, 1 << 40)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
took = {}

class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
queues = []
def queue(size):  # its descriptor, or -1; an unlinked queue holds its bytes until closed
    name = f"/lis-take-{os.getpid()}-{len(queues)}".encode()
    fd = rt.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, ctypes.byref(Attr(0, 1, size, 0)))
    if fd >= 0:
        queues.append(name)
    return fd
def fits(size):
    fd = queue(size)
    if fd >= 0:
        os.close(fd)
        rt.mq_unlink(queues.pop())
    return fd >= 0
taken = 0
while most("mq") - taken >= 8192 + 96 and queue(8192) >= 0:
    taken += 8192 + 96
low, high = 0, min(8192, most("mq") - taken - 96) + 1  # the largest last queue that still fits
while high - low > 1:
    low, high = ((low + high) // 2, high) if fits((low + high) // 2) else (low, (low + high) // 2)
if low and queue(low) >= 0:
    taken += low + 96
for name in queues:  # a queue outlives its opener on the host (not in a sandbox): unlinked now, held open
    rt.mq_unlink(name)
took["mq"] = taken

instances = []
while len(instances) < most("instances") and (fd := libc.inotify_init1(os.O_CLOEXEC)) >= 0:
    instances.append(fd)
took["instances"] = len(instances)

def paths(n):  # of distinct inodes: a second watch of one inode in one instance is the same watch
    seen = set()
    for top, dirs, files in os.walk("/usr"):
        for name in dirs + files:
            path = os.path.join(top, name)
            inode = os.lstat(path)[1:3]
            if inode not in seen:
                seen.add(inode)
                yield path.encode()
            if len(seen) == n:
                return
watches = 0
if instances:
    names = list(paths(min(most("watches"), 1 << 20) // len(instances) + 1))
    for fd in instances:
        for name in names:
            if watches >= most("watches"):
                break
            if libc.inotify_add_watch(fd, name, 0x100 | 0x2000000) >= 0:  # IN_CREATE, IN_DONT_FOLLOW
                watches += 1
            elif ctypes.get_errno() == errno.ENOSPC:
                break
took["watches"] = watches

class Value(ctypes.Union):
    _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
signals = 0
while signals < most("signals") and libc.sigqueue(os.getpid(), signal.SIGRTMIN, Value(1)) == 0:
    signals += 1
took["signals"] = signals

ptys = []
with __import__("contextlib").suppress(OSError):
    while len(ptys) < most("ptys"):
        ptys.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
took["ptys"] = len(ptys)
print(json.dumps(took), flush=True)
sys.stdin.read()
'''
HOGS = counters.SANDBOXES


def _host_limits() -> dict[str, int]:
    """The user's whole allowance of each, as the host has it."""
    found = {c.name: c.host for c in counters.host_counters()}
    return {"mq": found["message_queues"], "instances": found["inotify_instances"],
            "watches": found["inotify_watches"], "signals": found["pending_signals"], "ptys": found["ptys"]}


@pytest.mark.skipif(os.geteuid() == 0, reason="root's sandboxes run as its subordinate id, whose counts are not "
                    "root's: the unprivileged CI pass (lis-ci) runs this")
def test_sixteen_sandboxes_taking_every_counter_they_can_leave_the_host_user_half_of_each():
    host = _host_limits()
    assert None not in host.values(), host
    half = {name: limit // 2 for name, limit in host.items()}
    with contextlib.ExitStack() as stack:
        sandboxes = [stack.enter_context(Sandbox()) for _ in range(HOGS)]
        hogs = []
        for sb in sandboxes:
            hog = sb.popen(["python3", "-c", TAKE, "{}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            stack.callback(hog.wait)
            stack.callback(hog.kill)
            hogs.append(hog)
        held = [json.loads(hog.stdout.readline()) for hog in hogs]
        mine = subprocess.run([sys.executable, "-c", TAKE, json.dumps(half)], input="", capture_output=True,
                              text=True, check=True)
    # the host user still got half of each...
    assert json.loads(mine.stdout) == half, (mine.stdout, held)
    # ...while every sandbox took all it was allowed, and no more
    limits = Limits()
    share = {"instances": limits.inotify_instances, "watches": limits.inotify_watches,
             "signals": limits.pending_signals, "ptys": limits.ptys}
    for took in held:
        assert {name: took[name] for name in share} == share, held
        assert limits.message_queues - 96 <= took["mq"] <= limits.message_queues, held


def test_each_share_is_the_hosts_limit_over_twice_sixteen_and_grows_with_it():
    host = _host_limits()
    limits = Limits()
    got = {"mq": limits.message_queues, "instances": limits.inotify_instances, "watches": limits.inotify_watches,
           "signals": limits.pending_signals, "ptys": limits.ptys}
    assert got == {name: max(1, limit // 32) for name, limit in host.items()}, (got, host)
    bigger = counters.Counter("inotify_instances", "inotify instances", 1024, "")
    assert bigger.share == 32 and counters.Counter("ptys", "ptys", None, "").share == counters.FALLBACK["ptys"]
