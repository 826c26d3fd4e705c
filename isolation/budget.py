"""One memory budget for every writable tmpfs of the user's sandboxes, in all lis-tui processes.

A sandbox's writable layers (diskcap.on_tmpfs), /tmp, /run and /dev/shm are tmpfs: memory. Each
is sized to its own limit, and those sizes are overcommitted (six default sandboxes ask for 66
GiB), so their sum is bounded here, against the budget (default: BUDGET_SHARE of MemAvailable
plus free swap plus what the sandboxes hold now; [sandbox] tmpfs_budget, LIS_TMPFS_BUDGET) and
against the floor (MemAvailable must stay above it).

- The ledger: one small file per user (in the runtime directory, `ledger_path`), locked with
  flock, where each lis-tui process writes what its sandboxes hold (their tmpfs's used blocks and
  inodes, INODE_COST each) on every pass. An entry whose process is gone (its pid dead or reused)
  is dropped by whoever reads it: a crashed process's share is freed.
- A start (`admit`) is refused in one line when the budget has no room left, and gets a smaller
  disk when it has less than the disk limit asks for; a disk limit larger than the whole budget
  is refused.
- One thread per process (`track`) measures its sandboxes' tmpfs, and when the user's sandboxes
  together come within MARGIN of the budget, or MemAvailable within MARGIN of the floor, it
  shrinks each of its sandboxes' tmpfs to what it holds now (a remount: `linux.reconfigure`
  through a context that a fork joined to the sandbox makes, spawn.Zygote.pick). From then on the
  kernel refuses their writes with ENOSPC, the commands see "No space left on device", the model
  is told why after each command (`note`), and nothing is OOM-killed. Once use falls back under
  the budget by twice MARGIN, the sizes are given back. The pass runs more often the faster the
  sandboxes write and the nearer the bound is, at most DUTY of a core.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
import time
import weakref

from .spawn import SpawnError, linux
from .spec import SandboxError, tmpfs_inodes, tmpfs_sizes

log = logging.getLogger(__name__)
MiB, GiB = 1 << 20, 1 << 30
BUDGET_SHARE = 0.5
"""Of MemAvailable plus free swap (plus what the sandboxes hold already): the default budget. Half
leaves the other half to the sandboxes' processes (pip, a compiler, a test suite) and the user's."""
INODE_COST = 1 << 10  # kernel memory of one tmpfs file, its inode and name (about 850 bytes measured)
MARGIN_SHARE = 1 / 32  # of the budget: the band below it where the sizes are shrunk
MIN_MARGIN = 32 * MiB
MIN_DISK = 16 * MiB  # a start left less than this for its layers is refused
SLACK = 2 * MiB  # a shrunk tmpfs keeps this much room, so that a write racing the shrink cannot fail it
PAUSE = (0.02, 1.0)  # seconds between two passes: the fastest and the slowest
NOTICE = 0.1  # seconds: the band is at least what the sandboxes write in this long, at the last pass's rate
NEAR = 8  # within this many bands of the bound, a growing sandbox's contexts are picked ahead
MAX_HELD = 256  # sandboxes whose contexts are held at once (descriptors: one per tmpfs)
WRITE_RATE = 4 * GiB  # bytes a second the sandboxes together may write into tmpfs: a pass comes before they cross
DUTY = 0.1
FULL_MARGIN = 64 << 10  # a tmpfs with less free than this is full


_MEMINFO = re.compile(rb"^(MemTotal|MemAvailable|SwapTotal|SwapFree):\s+(\d+)", re.M)


def meminfo() -> dict[str, int]:
    """MemTotal, MemAvailable, SwapTotal and SwapFree, in bytes (read on every start: kept cheap)."""
    fd = os.open("/proc/meminfo", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 14)
    finally:
        os.close(fd)
    return {name.decode(): int(value) << 10 for name, value in _MEMINFO.findall(data)}


def parse_size(text: str | int, what: str) -> int:
    """"256M", "8G", "1048576" -> bytes; SandboxError naming `what` otherwise."""
    text = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}.get(text[-1:], 1)
    try:
        value = int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise SandboxError(f"{what} wants a size like 8G or 512M, not {text!r}") from None
    if value <= 0:
        raise SandboxError(f"{what} wants a size like 8G or 512M, not {text!r}")
    return value


_configured: dict[str, int | None] = {"budget": None, "floor": None}


def configure(budget: str | int | None = None, floor: str | int | None = None) -> None:
    """The budget and floor of [sandbox] (None or "auto": the defaults); the environment's
    LIS_TMPFS_BUDGET and LIS_TMPFS_FLOOR win over both. A budget above the machine's memory and
    swap is refused in one line."""
    for key, value in (("budget", budget), ("floor", floor)):
        auto = value is None or str(value).strip().lower() == "auto"
        _configured[key] = None if auto else _checked(key, parse_size(value, f"tmpfs_{key}"), f"tmpfs_{key}")


def _checked(key: str, value: int, where: str) -> int:
    mem = meminfo()
    total = mem.get("MemTotal", 0) + mem.get("SwapTotal", 0)
    if value > total:
        raise SandboxError(f"{where} {_size(value)} is more than this machine's memory and swap ({_size(total)}): "
                           f"set it below that, or to \"auto\" ({BUDGET_SHARE:.0%} of what is available)")
    return value


def _setting(key: str) -> int | None:
    env = os.environ.get(f"LIS_TMPFS_{key.upper()}", "").strip()
    if env and env.lower() != "auto":
        return _checked(key, parse_size(env, f"LIS_TMPFS_{key.upper()}"), f"LIS_TMPFS_{key.upper()}")
    return _configured[key]


def budget_now(mem: dict[str, int], held: int) -> int:
    """The budget: the configured one, else BUDGET_SHARE of what is available, counting `held`
    (what the sandboxes' tmpfs hold now) as available: it is theirs to use."""
    return _setting("budget") or int(BUDGET_SHARE * (mem.get("MemAvailable", 0) + mem.get("SwapFree", 0) + held))


def floor_now(mem: dict[str, int]) -> int:
    """MemAvailable must stay above this: a 16th of the memory, 2 GiB at most, 128 MiB at least."""
    return _setting("floor") or max(128 * MiB, min(2 * GiB, mem.get("MemTotal", 0) // 16))


def margin(budget: int) -> int:
    return max(MIN_MARGIN, int(budget * MARGIN_SHARE))


# ---- the ledger ------------------------------------------------------------------------------

def ledger_path() -> str:
    """The user's ledger: in the runtime directory ($XDG_RUNTIME_DIR, /run/user/UID), else in a
    folder of the user's own under /tmp; LIS_TMPFS_LEDGER names another."""
    if os.environ.get("LIS_TMPFS_LEDGER"):
        return os.environ["LIS_TMPFS_LEDGER"]
    uid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    if os.path.isdir(runtime) and os.stat(runtime).st_uid == uid:
        folder = os.path.join(runtime, "lis-tui")
    else:
        folder = f"/tmp/lis-tui-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    st = os.lstat(folder)
    if st.st_uid != uid or st.st_mode & 0o077 or not os.path.isdir(folder) or os.path.islink(folder):
        raise SandboxError(f"{folder} is not a private folder of this user's (another user's, a link, or open to "
                           f"others): remove it (rm -r {folder}), or name another with LIS_TMPFS_LEDGER=PATH")
    return os.path.join(folder, "tmpfs-budget.json")


def _start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): a pid reused later has another."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: str, entry: dict) -> bool:
    return pid.isdigit() and _start_time(int(pid)) == entry.get("start")


def exchange(mine: dict | None, path: str | None = None, write: bool = True) -> dict[str, dict]:
    """Write this process's entry (None: remove it) and return every live process's, ours
    included, dropping those of dead processes (`write` False: only read, under a shared lock).
    SandboxError, in one line, for a corrupt ledger."""
    path = path or ledger_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        data = os.pread(fd, 1 << 20, 0)
        entries = _parse(data, path) if data.strip() else {}
        entries = {pid: entry for pid, entry in entries.items() if _alive(pid, entry)}
        if not write:
            return entries
        me = str(os.getpid())
        if mine is None:
            entries.pop(me, None)
        else:
            entries[me] = {**mine, "start": _start_time(os.getpid())}
        text = json.dumps({"version": 1, "processes": entries}).encode()
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
        return entries
    finally:
        os.close(fd)


def _parse(data: bytes, path: str) -> dict[str, dict]:
    try:
        entries = json.loads(data)["processes"]
        if not all(isinstance(e, dict) and isinstance(e.get("use", 0), int) for e in entries.values()):
            raise ValueError("an entry is not a process's")
        return entries
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SandboxError(f"the sandboxes' memory ledger {path} is corrupt ({exc}): remove it (rm {path}); "
                           "running lis-tui processes write their share into a new one within a second") from None


def held(entries: dict[str, dict]) -> int:
    return sum(entry.get("use", 0) for entry in entries.values())


# ---- one sandbox's tmpfs ---------------------------------------------------------------------

def _mounts(sandbox) -> dict[str, tuple[int | None, int | None]]:
    """Each budgeted tmpfs of the sandbox ("" for its layers'; else its mount point inside) and
    its own size and inode count (None: the kernel's default)."""
    limits = sandbox.spec.limits
    found = {}
    if sandbox._on_tmpfs:
        found[""] = (limits.disk, limits.inode_limit() or 0)
    for path, size in tmpfs_sizes(limits, host_root=sandbox._root.host).items():
        if path != "/dev":  # 1 MiB of nodes and mount points
            found[path] = (size, tmpfs_inodes(size) if size else None)
    return found


def usage(sandbox) -> dict[str, os.statvfs_result]:
    """Each budgeted tmpfs's counts, measured now (empty when the sandbox is not running)."""
    found = {}
    try:
        with sandbox._file_op(sandbox._open_root) as root:
            for path in _mounts(sandbox):
                if path == "":
                    fs = sandbox._layers_fs()
                    if fs is not None:
                        found[path] = fs
                    continue
                fd = os.open(path.lstrip("/") or ".", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=root)
                try:
                    found[path] = os.fstatvfs(fd)
                finally:
                    os.close(fd)
    except (OSError, SandboxError, AttributeError):
        return {}
    return found


def cost(fs: os.statvfs_result) -> int:
    """Memory a tmpfs holds: its used blocks and INODE_COST for each file."""
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize + (fs.f_files - fs.f_ffree) * INODE_COST


def pick(sandbox) -> list[tuple[str, int]]:
    """(mount, resize context) for each budgeted tmpfs of the sandbox: made by a fork joined to it
    (spawn.Zygote.pick), so a few milliseconds; the caller closes them."""
    paths = [path for path in _mounts(sandbox) if path]
    if sandbox._on_tmpfs:
        with sandbox._file_op(sandbox._dup_rw) as layers:
            return list(zip(["", *paths], sandbox._zygote.pick(paths, layers)))
    return list(zip(paths, sandbox._zygote.pick(paths)))


def resize(sandbox, contexts: list[tuple[str, int]], shrink: bool) -> list[tuple[str, int]]:
    """Shrink each tmpfs to what it holds now (plus SLACK), or give each its own size back; the
    contexts still usable. One that a write outran (EINVAL, a shrink below what it holds by now)
    is spent: closed here, and left out, so the next pass picks again and resizes once more."""
    mounts, found = _mounts(sandbox), usage(sandbox) if shrink else {}
    kept = []
    for path, context in contexts:
        size, inodes = mounts[path]
        fs = found.get(path)
        if shrink and fs is not None:
            options = {"size": (fs.f_blocks - fs.f_bfree) * fs.f_frsize + SLACK,
                       "nr_inodes": fs.f_files - fs.f_ffree + SLACK // INODE_COST}
        else:
            options = {"size": size or "50%", **({"nr_inodes": inodes} if inodes is not None else {})}
        try:
            linux.reconfigure(context, options)
        except OSError as exc:
            log.info("could not resize %s of sandbox %s: %s", path or "its layers", sandbox.pid, exc)
            os.close(context)
            continue
        kept.append((path, context))
    return kept


# ---- admission -------------------------------------------------------------------------------

def admit(limits, on_tmpfs: bool, default_disk: int | None):
    """The limits a new sandbox gets: `limits`, or with a smaller disk when the budget has less
    room left; SandboxError in one line when it has none, or when the disk limit asked for is
    larger than the whole budget (`default_disk`: the default's, which shrinks instead)."""
    mem = meminfo()
    entries = exchange(None, write=False)
    if _tracker is not None:  # ours as they are now, not as the last pass wrote them
        entries[str(os.getpid())] = _tracker.entry()
    use = held(entries)
    budget = budget_now(mem, use)
    room = min(budget - margin(budget) - use, mem.get("MemAvailable", 0) - floor_now(mem) - margin(budget))
    if on_tmpfs and limits.disk and limits.disk > budget and limits.disk != default_disk:
        raise SandboxError(f"a disk limit of {_size(limits.disk)} is more than the memory budget of all sandboxes' "
                           f"files ({_size(budget)}): ask for less (--disk), raise tmpfs_budget in [sandbox] of the "
                           "config, or keep the layers on disk (--disk-on disk)")
    if room < (MIN_DISK if on_tmpfs else SLACK):
        raise SandboxError(f"cannot start another sandbox: the memory budget of all sandboxes' files "
                           f"({_size(budget)}) is in use ({_size(use)} by {_sandboxes(entries)}, "
                           f"{_size(mem.get('MemAvailable', 0))} of memory available): close some, raise tmpfs_budget "
                           "in [sandbox] of the config, or keep the layers on disk (--disk-on disk)")
    if _tracker is not None and room < NEAR * margin(budget):  # near the bound: measured at once, not in a second
        _tracker.wake.set()
    if on_tmpfs and limits.disk and limits.disk > room:  # overcommitted, but never past the whole budget
        from dataclasses import replace  # noqa: PLC0415

        log.info("the sandbox's disk is %s, not %s: the memory budget has no more room", _size(room), _size(limits.disk))
        limits = replace(limits, disk=room)
    return limits


def _count(entries: dict[str, dict]) -> int:
    return sum(entry.get("sandboxes", 0) for entry in entries.values())


def _sandboxes(entries: dict[str, dict]) -> str:
    count = _count(entries)
    return f"{count} sandbox" if count == 1 else f"{count} sandboxes"


# ---- the pass --------------------------------------------------------------------------------

class _Tracker:
    """This process's sandboxes, measured and, near the bound, shrunk (see the module's doc)."""

    def __init__(self) -> None:
        self.sandboxes: weakref.WeakSet = weakref.WeakSet()
        self.shrunk: weakref.WeakSet = weakref.WeakSet()
        self.lock = threading.Lock()
        self.costs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # sandbox -> what it held at the last pass
        self.tight = False
        self.tight_band = 0  # the band when the sizes were shrunk: they come back past twice it
        self.last: tuple[float, int, int] | None = None  # (time, the user's whole use, MemAvailable) of the last pass
        self.contexts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # sandbox -> its picked contexts
        self.state: dict = {}  # the last pass's budget, use and floor, for doctor and the notes
        self.wake = threading.Event()  # a new sandbox: measured at once
        threading.Thread(target=self._loop, name="lis-tmpfs-budget", daemon=True).start()

    @property
    def use(self) -> int:
        return sum(self.costs.values())

    def entry(self) -> dict:
        return {"use": self.use, "sandboxes": len(self.sandboxes), "budget": self.state.get("budget", 0)}

    def _loop(self) -> None:
        while True:
            start = time.monotonic()
            try:
                pause, near = self.once()
            except Exception as exc:  # noqa: BLE001 (this thread must go on)
                log.warning("the memory budget's pass failed: %s", exc)
                pause, near = PAUSE[1], False
            took = time.monotonic() - start  # near the bound, the bound comes first
            self.wake.wait(pause if near else max(pause, took * (1 - DUTY) / DUTY))
            self.wake.clear()

    def once(self) -> tuple[float, bool]:
        """One pass; returns the pause before the next, and whether the bound is near."""
        with self.lock:
            sandboxes = [s for s in self.sandboxes if s.running]
        growth = {}
        for sandbox in sandboxes:
            found = sum(cost(fs) for fs in usage(sandbox).values())
            with self.lock:
                if sandbox in self.sandboxes:  # not closed meanwhile
                    growth[sandbox] = found - self.costs.get(sandbox, found)
                    self.costs[sandbox] = found
        mem = meminfo()
        try:
            entries = exchange(self.entry() if sandboxes else None)
        except (OSError, SandboxError) as exc:  # a corrupt ledger: the floor and our own use still bound us
            log.warning("%s", exc)
            entries = {"": {"use": self.use, "sandboxes": len(sandboxes)}}
        use, now, free = held(entries), time.monotonic(), mem.get("MemAvailable", 0)
        budget, floor = budget_now(mem, use), floor_now(mem)
        if self.last is None:
            rate = 0.0
        else:  # the faster of the sandboxes' growth and MemAvailable's fall
            took = max(now - self.last[0], 1e-3)
            rate = max(0.0, (use - self.last[1]) / took, (self.last[2] - free) / took)
        self.last = (now, use, free)
        band = max(margin(budget), min(int(rate * NOTICE), budget // 8))  # the way back stays reachable
        left = min(budget - use, free - floor)
        self.state = {"budget": budget, "use": use, "floor": floor, "sandboxes": _count(entries), "available": free}
        if not self.tight and left < band:
            self.tight, self.tight_band = True, band
        elif self.tight and left > 2 * max(band, self.tight_band):  # not as soon as the writers stop
            self.tight = False
        # The writers first: the shrink reaches the fastest before the others.
        for sandbox in sorted(sandboxes, key=lambda s: -growth.get(s, 0)):
            if self.tight != (sandbox in self.shrunk):
                self._resize(sandbox)
            elif left < NEAR * band and growth.get(sandbox, 0) > 0 and sandbox not in self.contexts \
                    and len(self.contexts) < MAX_HELD:
                self._hold(sandbox)  # ready before the bound: its shrink will cost no fork then
        if not self.tight and left > 2 * NEAR * band:
            for sandbox in list(self.contexts):
                self._release(sandbox)
        if not sandboxes:
            return PAUSE[1], False
        # The next pass before the sandboxes, writing as fast as a tmpfs takes it (or as just now,
        # if faster), could cross into the band.
        return min(PAUSE[1], max(PAUSE[0], (left - band) / max(2 * rate, WRITE_RATE))), left < NEAR * band

    def _hold(self, sandbox) -> None:
        try:
            self._keep(sandbox, pick(sandbox))
        except (OSError, SandboxError, SpawnError, AttributeError) as exc:  # closed meanwhile, or a failed fork
            log.info("could not pick sandbox %s's tmpfs: %s", sandbox.pid, exc)

    def _keep(self, sandbox, contexts: list[tuple[str, int]]) -> None:
        """Hold a sandbox's contexts, unless it closed meanwhile: they hold its tmpfs, whose memory
        goes back only once the last of them is closed."""
        with self.lock:
            if sandbox in self.sandboxes and len(self.contexts) < MAX_HELD:
                self.contexts[sandbox], contexts = contexts, []
        for _, context in contexts:
            os.close(context)

    def _release(self, sandbox) -> None:
        for _, context in self.contexts.pop(sandbox, ()):
            os.close(context)

    def _resize(self, sandbox) -> None:
        try:
            contexts = self.contexts.pop(sandbox, None) or pick(sandbox)
            count = len(contexts)
            contexts = resize(sandbox, contexts, shrink=self.tight)
        except (OSError, SandboxError, SpawnError, AttributeError) as exc:  # closed meanwhile, or a failed fork
            log.info("could not resize sandbox %s: %s", sandbox.pid, exc)
            return
        self._keep(sandbox, contexts)  # for the way back, or the next shrink
        if len(contexts) < count:  # one was outrun: all of them again, next pass
            return
        (self.shrunk.add if self.tight else self.shrunk.discard)(sandbox)


_tracker: _Tracker | None = None
_tracker_lock = threading.Lock()


def track(sandbox) -> None:
    """Count a started sandbox's tmpfs in the budget until `untrack`."""
    global _tracker
    with _tracker_lock:
        if _tracker is None:
            _tracker = _Tracker()
    with _tracker.lock:
        _tracker.sandboxes.add(sandbox)


def untrack(sandbox) -> None:
    if _tracker is not None:
        with _tracker.lock:
            _tracker.sandboxes.discard(sandbox)
            _tracker.shrunk.discard(sandbox)
            _tracker.costs.pop(sandbox, None)
            _tracker._release(sandbox)


def note(sandbox) -> str:
    """While the budget holds the sandbox's tmpfs shrunk and one of them is full: what the model
    is told after each command (else "")."""
    if _tracker is None or sandbox not in _tracker.shrunk:
        return ""
    full = [path or "/testbed" for path, fs in usage(sandbox).items() if fs.f_bavail * fs.f_frsize < FULL_MARGIN]
    if not full:
        return ""
    state = _tracker.state
    return (f"the memory budget of all sandboxes' files ({_size(state.get('budget', 0))}) is reached "
            f"({_size(state.get('use', 0))} in use by {state.get('sandboxes', 0)} of them, or the machine's "
            f"free memory is near its floor): writing more to {', '.join(full)} fails with \"No space left on "
            "device\" until files are removed or other sandboxes end. For more, raise tmpfs_budget in [sandbox] "
            "of the config, or keep the layers on disk (--disk-on disk)")


def status() -> dict:
    """The budget, the floor and what the user's sandboxes hold now, for doctor."""
    mem = meminfo()
    try:
        entries, error = exchange(_tracker.entry() if _tracker and _tracker.sandboxes else None), ""
    except (OSError, SandboxError) as exc:
        entries, error = {}, str(exc)
    use = held(entries)
    return {"budget": budget_now(mem, use), "configured": bool(_setting("budget")), "use": use,
            "sandboxes": _count(entries), "processes": len(entries), "floor": floor_now(mem),
            "available": mem.get("MemAvailable", 0), "ledger": ledger_path(), "error": error}


def _size(n: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", GiB), ("M", MiB), ("K", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n}B"
