"""How many sandboxes this process, user and machine can hold, and a clear refusal before a limit is hit.

Each idle sandbox costs, in the process that holds it, 1 descriptor (the root of its layers'
tmpfs; none with its layers on disk: its pid 1's pidfd and its root are opened per use, and its
zygote's socket is closed once that zygote exits idle); on the machine, 2 processes
(bwrap and pid 1; a command's zygote for a second after it) and one namespace of each kind of
this user's; and about 1.1 MiB of memory idle (0.4 in their processes, the rest the kernel's).
`check_headroom` walks nothing that grows with the number live, and reads /proc at most once a
second, so a start costs the same at 10,000 live.
"""
from __future__ import annotations

import errno
import os
import resource
import threading
import time
from dataclasses import dataclass

from ..spawn import channels_open

FDS_PER_SANDBOX = 1
PIDS_PER_SANDBOX = 2
MIB_PER_SANDBOX = 1.1
START_FDS = 32  # descriptors a start opens for a moment (pipes, memfds, sockets, the Popen's own)
START_PIDS = 8  # processes a start may add for a moment (bwrap, pid 1, the helper's zygote and spare)
MIN_AVAILABLE_MIB = 64  # below this much MemAvailable a start is refused
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")
PROCESS_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)  # never a full scratch
LIMIT_ERRNOS = (*PROCESS_ERRNOS, errno.ENOSPC)

_live = 0  # sandboxes this process holds now
_live_lock = threading.Lock()


def started() -> None:
    global _live
    with _live_lock:
        _live += 1


def closed() -> None:
    global _live
    with _live_lock:
        _live -= 1


def live() -> int:
    return _live


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _int(path: str) -> int | None:
    text = _read(path)
    return int(text) if text and text.lstrip("-").isdigit() else None


def _threads_now() -> int:
    """Tasks on the machine now (the 4th field of /proc/loadavg is running/total)."""
    return int((_read("/proc/loadavg") or "0 0 0 0/0").split()[3].split("/")[1])


def _available_mib() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) >> 10
    return None


_baseline: int | None = None  # descriptors open at this process's first start, sandboxes aside


def _fds_in_use() -> int:
    """About how many descriptors this process has open, without counting them one by one: what
    was open at its first start plus its sandboxes' and their zygotes' channels still open, or the
    lowest free number, whichever is more."""
    global _baseline
    if _baseline is None:
        _baseline = len(os.listdir("/proc/self/fd")) - FDS_PER_SANDBOX * live() - channels_open()
    fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    os.close(fd)
    return max(fd, _baseline + FDS_PER_SANDBOX * live() + channels_open())


def check_headroom() -> None:
    """Raise SandboxError naming the limit, its use and the fix when one more start would pass a
    limit of this process, user or machine."""
    from ..spec import SandboxError  # noqa: PLC0415

    problem = _headroom_problem()
    if problem:
        raise SandboxError(problem)


_machine: tuple[float, int, int | None, dict[str, int | None]] | None = None
"""(when, tasks on the machine, MiB available, the sysctl limits): read at most every REFRESH
seconds, since a /proc read costs 0.1-0.5 ms on a loaded machine, and 11 of them per start would
be 2 ms. Starts since then are counted against the margin as if each took its full share."""
_starts_since = 0
REFRESH = 1.0


def _machine_now() -> tuple[int, int | None, dict[str, int | None], int]:
    global _machine, _starts_since
    now = time.monotonic()
    if _machine is None or now - _machine[0] > REFRESH:
        paths = ["kernel/pid_max", "kernel/threads-max", *(f"user/max_{kind}_namespaces" for kind in NAMESPACES)]
        _machine = (now, _threads_now(), _available_mib(), {path: _int(f"/proc/sys/{path}") for path in paths})
        _starts_since = 0
    _starts_since += 1
    return _machine[1], _machine[2], _machine[3], _starts_since


def _headroom_problem() -> str | None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = _fds_in_use()
    if used + START_FDS > soft:
        return (f"cannot start another sandbox: {used} of this process's {soft} descriptors (RLIMIT_NOFILE) are "
                f"in use, {live()} live sandboxes at {FDS_PER_SANDBOX} each idle and {channels_open()} for zygotes "
                f"used in the last second; raise the limit "
                f"(`ulimit -n {_suggest(soft, hard)}`{_hard_note(hard)}) or close sandboxes")
    threads, available, limits, starts = _machine_now()
    for name, fix in (("kernel/pid_max", "kernel.pid_max=4194304"), ("kernel/threads-max", None)):
        limit = limits[name]
        if limit and threads + PIDS_PER_SANDBOX * starts + START_PIDS > limit:
            sysctl = name.replace("/", ".")
            fix = fix or f"{sysctl}={limit * 2}"
            return (f"cannot start another sandbox: {threads} processes and threads run on this machine of "
                    f"{sysctl} = {limit}, {live()} live sandboxes at {PIDS_PER_SANDBOX} each; raise it "
                    f"(`sudo sysctl -w {fix}`) or close sandboxes")
    for kind in NAMESPACES:
        limit = limits[f"user/max_{kind}_namespaces"]
        if limit is not None and live() + 1 > limit:
            return (f"cannot start another sandbox: {live()} live sandboxes hold {live()} of user.max_{kind}_"
                    f"namespaces = {limit}; raise it (`sudo sysctl -w user.max_{kind}_namespaces="
                    f"{max(limit * 2, 65536)}`) or close sandboxes")
    if available is not None and available - MIB_PER_SANDBOX * starts < MIN_AVAILABLE_MIB:
        return (f"cannot start another sandbox: {available} MiB of memory available (MemAvailable), under "
                f"{MIN_AVAILABLE_MIB} MiB; {live()} live sandboxes use about {MIB_PER_SANDBOX} MiB each idle; close "
                "sandboxes or free memory")
    return None


def _suggest(soft: int, hard: int) -> int:
    return max(soft * 2, 65536) if hard == resource.RLIM_INFINITY else max(hard, soft * 2)


def _hard_note(hard: int) -> str:
    if hard == resource.RLIM_INFINITY:
        return ""
    return f"; above the hard limit {hard}, root raises it: `nofile` in /etc/security/limits.conf, or LimitNOFILE="


def explain(exc: OSError) -> str:
    """One line for a start that a limit stopped after all (the preflight guessed; the kernel decides)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if exc.errno == errno.EMFILE:
        return (f"cannot start another sandbox: this process ran out of descriptors (RLIMIT_NOFILE {soft}), "
                f"{live()} live sandboxes at {FDS_PER_SANDBOX} each; raise the limit "
                f"(`ulimit -n {_suggest(soft, hard)}`{_hard_note(hard)}) or close sandboxes")
    if exc.errno == errno.ENFILE:
        return ("cannot start another sandbox: the machine ran out of open files (fs.file-max = "
                f"{_read('/proc/sys/fs/file-max')}); raise it (`sudo sysctl -w fs.file-max=...`) or close sandboxes")
    if exc.errno == errno.EAGAIN:
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        return (f"cannot start another sandbox: no process could be made (this user's RLIMIT_NPROC {nproc}, "
                f"kernel.pid_max {_read('/proc/sys/kernel/pid_max')}, {_threads_now()} tasks now); raise them "
                "(`ulimit -u`, `sudo sysctl -w kernel.pid_max=4194304`) or close sandboxes")
    if exc.errno == errno.ENOSPC:
        return ("cannot start another sandbox: a namespace limit of this user was reached "
                f"(user.max_user_namespaces = {_read('/proc/sys/user/max_user_namespaces')}); raise it "
                "(`sudo sysctl -w user.max_user_namespaces=65536`) or close sandboxes")
    return (f"cannot start another sandbox: out of memory ({_available_mib()} MiB available); close sandboxes "
            "or free memory")


def explain_log(log: str) -> str | None:
    """explain() for what bwrap printed when a limit stopped it; None when none did."""
    for text, code in (("No space left on device", errno.ENOSPC), ("Resource temporarily unavailable", errno.EAGAIN),
                       ("Too many open files", errno.EMFILE), ("Cannot allocate memory", errno.ENOMEM)):
        if text in log:
            return f"{explain(OSError(code, text))} (bwrap: {log.strip().splitlines()[-1]})"
    return None


@dataclass(frozen=True)
class Bound:
    """How many more sandboxes one limit lets this user hold, and what raises it."""

    limit: str
    value: int
    used: int
    per_sandbox: float
    fix: str

    @property
    def room(self) -> int:
        return max(0, int((self.value - self.used) / self.per_sandbox))


def bounds() -> list[Bound]:
    """Every limit on live sandboxes in one lis-tui process here, each with the room it leaves
    (the first, the smallest, binds first). Counts this user's processes: for doctor, not a start."""
    found = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = soft if hard == resource.RLIM_INFINITY else hard  # lis-tui raises its soft limit to the hard one
    found.append(Bound("RLIMIT_NOFILE (descriptors of one process)", nofile, 64, FDS_PER_SANDBOX,
                       "`ulimit -n`; past the hard limit, `nofile` in /etc/security/limits.conf"))
    threads = _threads_now()
    for name in ("pid_max", "threads-max"):
        value = _int(f"/proc/sys/kernel/{name}")
        if value:
            found.append(Bound(f"kernel.{name} (tasks on the machine)", value, threads, PIDS_PER_SANDBOX,
                               f"sudo sysctl -w kernel.{name}={max(value * 4, 4194304) if name == 'pid_max' else value * 2}"))
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if nproc != resource.RLIM_INFINITY and os.geteuid() != 0:
        found.append(Bound("RLIMIT_NPROC (this user's processes)", nproc, _user_tasks(), PIDS_PER_SANDBOX,
                           "`ulimit -u`; past the hard limit, `nproc` in /etc/security/limits.conf"))
    for kind in NAMESPACES:
        value = _int(f"/proc/sys/user/max_{kind}_namespaces")
        if value is not None:
            found.append(Bound(f"user.max_{kind}_namespaces", value, 0, 1,
                               f"sudo sysctl -w user.max_{kind}_namespaces={max(value * 2, 65536)}"))
    available = _available_mib()
    if available is not None:
        found.append(Bound("memory (MemAvailable)", available, MIN_AVAILABLE_MIB, MIB_PER_SANDBOX,
                           "more memory, or fewer other programs"))
    return sorted(found, key=lambda b: b.room)


def _user_tasks() -> int:
    """Tasks (threads) of this user now: what RLIMIT_NPROC counts."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return count
