"""The disk cap: a tmpfs of the limit's size under the writable layers, or a walk of them.

Where it can (`on_tmpfs`), the sandbox's writable layers (the overlay's upper, /testbed, /root)
are folders of a tmpfs of its own, sized to the disk limit with the inode limit as its inode
count, mounted in its mount namespace before bwrap builds it (spawn/forks.py, _Start.layers). That is
the kernel's bound: a write past it fails with ENOSPC inside, whatever the path, the directory's
mode, a deleted file held open or a sparse file's holes (blocks held are counted). The sandbox
runs on: after each command, while the tmpfs is full, `Sandbox.disk_note()` says so, naming the
limit and how to raise it, and the model can make room. The tmpfs is memory (and swap), as much as
the sandbox writes; it goes when the sandbox closes. No walk runs for such a sandbox.

A kept session's layers are in such a tmpfs too while it runs, and on disk between its runs
(session_layers.py).

Elsewhere (`disk_on` "disk", a kept session's included; a kernel before 6.6; LIS_DISK_TMPFS=0)
one thread per process walks the writable layers of every sandbox that has a disk or inode limit,
round-robin, and spends at most a tenth of a core doing it: a pass that took t seconds is
followed by a pause of max(1 s, 9 t). A sandbox found over its limit is stopped
whole, pid 1 included (`Sandbox._stop`): `Sandbox.disk_note()` says so to whoever ran the command
under way (the shell tool tells the model), and every later command fails with the same reason,
naming the limit and how to raise it. Between two passes a fast writer can overshoot by what it
writes in a few seconds: an early warning, not the kernel's wall.

What the walk counts: allocated blocks (a sparse file costs what it holds, not its length) and
inodes (every name, directories too, hard links once) under the writable layers, directories the
sandbox shut with their mode included (host/walk.py's _Usage opens them for the read); and the deleted
files its processes still hold open on those layers (their /proc/PID/fd, found by pid namespace
with one look at /proc per pass for every sandbox). A sandbox quiet since its last walk, its pid 1
alone running, is not walked again until something runs or writes there (activity.py).
"""
from __future__ import annotations

import functools
import os
import stat
import threading
import time
import weakref

from . import activity

MIN_PAUSE = 1.0
DUTY = 0.1


class Watcher:
    """One thread per process that runs `check(sandbox, by_ns)` (False: it could not measure) for
    every watched sandbox still running and not quiet since its last check (activity.py), from
    one look at /proc a pass, at most DUTY of a core (a pass that took t seconds is followed by
    max(`min_pause`, 9 t)). The disk walk's and the memory cap's (memcap.py)."""

    def __init__(self, name: str, check, min_pause: float) -> None:
        self.name, self.check, self.min_pause = name, check, min_pause
        self._watched: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._looks = activity.Looks()

    def watch(self, sandbox) -> None:
        with self._lock:
            self._watched.add(sandbox)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def unwatch(self, sandbox) -> None:
        with self._lock:
            self._watched.discard(sandbox)

    def _loop(self) -> None:
        while True:
            with self._lock:
                sandboxes = list(self._watched)
            start = time.monotonic()
            self._looks.pass_over(sandboxes, self.check)
            took = time.monotonic() - start
            time.sleep(max(self.min_pause, took * (1 - DUTY) / DUTY))


_watcher = Watcher("lis-disk-cap", lambda sandbox, by_ns: check(sandbox, by_ns), MIN_PAUSE)


def on_tmpfs(spec) -> bool:
    """Whether the sandbox's writable layers live in a tmpfs of their own, the size of its disk
    limit and with its inode count (see above): whenever there is a disk limit, but with `disk_on`
    "disk", on a kernel whose tmpfs keeps the user xattrs an overlay's upper needs (6.6), and
    unless LIS_DISK_TMPFS=0. A kept session's too: copied to disk at close and back at its next
    start (session_layers.py)."""
    return bool(spec.limits.disk) and spec.limits.disk_on != "disk" \
        and os.environ.get("LIS_DISK_TMPFS", "1") != "0" and _kernel() >= (6, 6)


@functools.lru_cache(maxsize=1)
def _kernel() -> tuple[int, int]:
    try:
        major, minor = os.uname().release.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def watch(sandbox) -> None:
    """Check `usage(sandbox)` against its limits' `disk` and `inodes` until it closes."""
    _watcher.watch(sandbox)


def unwatch(sandbox) -> None:
    _watcher.unwatch(sandbox)


def check(sandbox, by_ns: dict[str, list[int]] | None = None) -> bool:
    """One measure of one sandbox; over a limit, it is stopped (`_over_disk`, `_over_inodes`).
    `by_ns`: `activity.processes_by_ns(...)` when one look at /proc serves several sandboxes.
    False when it could not be measured just now."""
    limits = sandbox.spec.limits
    found = usage(sandbox, by_ns)
    if found is None:
        return False
    used, inodes = found
    if limits.disk and used > limits.disk:
        sandbox._over_disk(used)
    elif limits.inode_limit() and inodes > limits.inode_limit():
        sandbox._over_inodes(inodes, used)
    return True


def usage(sandbox, by_ns: dict[str, list[int]] | None = None) -> tuple[int, int] | None:
    """(bytes on disk, inodes) the sandbox holds: its writable layers, walked, and the deleted
    files its processes keep open on them; None when that cannot be measured just now."""
    found = sandbox.writable_usage()
    if found is None or sandbox._on_tmpfs:  # a tmpfs's count has them already
        return found
    try:
        dev = os.stat(sandbox.layers).st_dev
    except (OSError, AttributeError):  # gone, or closed meanwhile
        return found
    held, count = held_deleted(activity.processes(sandbox, by_ns) or [], dev)
    return found[0] + held, found[1] + count


def held_deleted(pids: list[int], dev: int) -> tuple[int, int]:
    """(bytes, inodes) of the deleted regular files `pids` hold open on a writable layer: a rw
    mount of the layers' filesystem `dev` or one of our overlays (not a tmpfs: memory, which
    tmp_size bounds). A name that merely ends in " (deleted)" has links, so it is not counted."""
    seen: set[tuple[int, int]] = set()
    total, mounts = 0, None
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            where = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(where).endswith(" (deleted)"):
                    continue
                st = os.stat(where)  # the open file's inode; stat opens nothing
                if not stat.S_ISREG(st.st_mode) or st.st_nlink or (st.st_dev, st.st_ino) in seen:
                    continue
                mounts = _writable_mounts(pid, dev) if mounts is None else mounts
                if _mount_id(pid, fd) in mounts:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
            except (OSError, ValueError):
                continue  # closed or gone meanwhile
    return total, len(seen)


def _writable_mounts(pid: int, dev: int) -> set[str]:
    """Ids of the mounts pid sees that hold writable layers (rw, and overlay or on `dev`)."""
    ours = f"{os.major(dev)}:{os.minor(dev)}"
    found = set()
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fields[5].split(",")[0] == "rw" and (fstype == "overlay" or fields[2] == ours):
                found.add(fields[0])
    return found


def _mount_id(pid: int, fd: str) -> str:
    with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
        for line in info:
            if line.startswith("mnt_id:"):
                return line.split()[1]
    return ""
