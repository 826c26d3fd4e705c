"""The sandbox's pid 1: the limits it and every command get (rlimits, the user and IPC namespaces'
sysctls), which the sandbox's first zygote sets on it before it execs (spawn/forks.py, _Start);
and how we reach it later, by pid only (no descriptor is kept per idle sandbox), each time checked
to be bwrap's child."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
from typing import TYPE_CHECKING

from ..spec import Limits, SandboxError

if TYPE_CHECKING:
    from . import Sandbox


def _rlimits(limits: Limits) -> list[tuple[int, int]]:
    """(resource, value) pairs for every limit set; soft and hard alike, so nothing inside raises them."""
    pairs = [(resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_DATA, limits.memory),
             (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_NPROC, limits.processes),
             (resource.RLIMIT_SIGPENDING, limits.pending_signals), (resource.RLIMIT_MSGQUEUE, limits.message_queues)]
    return [(res, value) for res, value in pairs if value]


# SysV message queues and semaphores are kernel memory that nothing else bounds: a new IPC
# namespace allows 32,000 queues of 16 KiB (500 MiB) and 32,000 sets of 32,000 semaphores (300 sets
# took 468 MiB here). These allow 256 queues (4 MiB) and 65,536 semaphores in 1,024 sets (4 MiB);
# PostgreSQL, for one, takes a few sets of 17. 1,024 shared-memory segments hold at most 1.5 MiB
# of metadata beside their pages.
SYSV = [("kernel/msgmni", 256), ("kernel/sem", "32000 65536 500 1024"), ("kernel/shmmni", 1024)]


def _sysctls(limits: Limits) -> list[tuple[str, int | str]]:
    """The sandbox's own caps (paths under /proc/sys/): on per-user kernel counters, in its user
    namespace (user/); on SysV IPC, in its IPC namespace (kernel/): shared memory up to its memory
    limit in all (shmall, in pages, and shmmax), the memory the memory limit stands for."""
    pairs = [("user/max_inotify_instances", limits.inotify_instances),
             ("user/max_inotify_watches", limits.inotify_watches), *SYSV]
    if limits.memory:
        pairs += [("kernel/shmmax", limits.memory), ("kernel/shmall", -(-limits.memory // os.sysconf("SC_PAGE_SIZE")))]
    return [(name, value) for name, value in pairs if value]


def _checked_pidfd(pid: int, bwrap: subprocess.Popen) -> int | None:
    """A new pidfd of `pid` if it is bwrap's child (the sandbox's pid 1, or pid 1 to be), else None.

    A pidfd names one process and no later one that reuses its pid, and tells when it is gone.
    Opened by pid, it is checked to name bwrap's child: /proc's parent is bwrap, whose pid is
    still its own (our child, not reaped), which forks no other, and the pidfd's process was
    alive after that read, so the read was its own."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        signal.pidfd_send_signal(pidfd, 0)  # alive now, so the stat read was its own
    except (OSError, ValueError, IndexError):
        parent = None
    if parent != bwrap.pid or bwrap.returncode is not None:
        os.close(pidfd)
        return None
    return pidfd


def _open_pid_1(sandbox: Sandbox) -> tuple[int, int]:
    """New descriptors of the sandbox's pid 1 (a pidfd) and of its /; none is kept between
    uses: one descriptor less per idle sandbox. The pidfd is checked to name bwrap's child
    (_checked_pidfd), and the root, opened by pid, is its own since pid 1 was alive after."""
    pidfd = sandbox._pid_1_fd()
    if pidfd is None:
        raise SandboxError(sandbox._not_running())
    try:
        root = os.open(f"/proc/{sandbox.pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        os.close(pidfd)
        raise SandboxError(sandbox._not_running()) from None
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        os.close(pidfd)
        os.close(root)
        raise SandboxError(sandbox._not_running()) from None
    return pidfd, root


def _pid_1_fd(sandbox: Sandbox) -> int | None:
    """A new pidfd of the sandbox's pid 1, checked (_checked_pidfd); None when it has none (not
    started, or gone)."""
    return _checked_pidfd(sandbox.pid, sandbox._proc) if sandbox.pid is not None and sandbox._proc is not None else None


def _open_root(sandbox: Sandbox) -> int:
    """A new descriptor of the sandbox's / (see _open_pid_1), once its masks are made (the first
    zygote makes them as the sandbox starts: /proc/sys read-only, the host secrets' covers)."""
    try:
        sandbox._zygote.confined()
    except OSError as exc:  # spawn.SpawnError
        raise SandboxError(f"could not start the sandbox's spawner: {exc.strerror}. Run `lis-tui doctor`.") from None
    pidfd, root = sandbox._open_pid_1()
    os.close(pidfd)
    return root
