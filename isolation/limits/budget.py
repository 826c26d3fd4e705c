"""One memory budget for every writable tmpfs of the user's sandboxes, in all lis-tui processes.

A sandbox's writable layers (diskcap.on_tmpfs), /tmp, /run and /dev/shm are tmpfs: memory. So are
the memfd files its processes hold open (memcap.memfds), which the budget counts with them, though
only the sandbox's memory limit stops their writer. Each tmpfs is sized to its own limit, and
those sizes are overcommitted (six default sandboxes ask for 66 GiB), so their sum is bounded
here, against the budget (default: BUDGET_SHARE of MemAvailable plus free swap plus what the
sandboxes hold now; [sandbox] tmpfs_budget, LIS_TMPFS_BUDGET) and against the floor (MemAvailable
must stay above it).

- The ledger (ledger.py): one small file per user, where each lis-tui process writes what its
  sandboxes' tmpfs and memfd files hold (used blocks, and INODE_COST a file: tmpfs.py) on every
  pass; a crashed process's share is freed.
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
  sandboxes write and the nearer the bound is, at most DUTY of a core; a sandbox quiet since the
  last pass is not measured again (activity.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from . import activity, memcap
from .ledger import exchange, held, ledger_path
from ..spawn import SpawnError
from ..spec import SandboxError
from .tmpfs import INODE_COST, SLACK, cost, pick, resize, usage  # noqa: F401 (INODE_COST: the doc's)

log = logging.getLogger(__name__)
MiB, GiB = 1 << 20, 1 << 30
BUDGET_SHARE = 0.5
"""Of MemAvailable plus free swap (plus what the sandboxes hold already): the default budget. Half
leaves the other half to the sandboxes' processes (pip, a compiler, a test suite) and the user's."""
MARGIN_SHARE = 1 / 32  # of the budget: the band below it where the sizes are shrunk
MIN_MARGIN = 32 * MiB
MIN_DISK = 16 * MiB  # a start left less than this for its layers is refused
PAUSE = (0.005, 1.0)  # seconds between two passes: the fastest (near the bound, as fast writers need) and the slowest
NOTICE = 0.1  # seconds: the band is at least what the sandboxes write in this long, at the last pass's rate
NEAR = 8  # within this many bands of the bound, a growing sandbox's contexts are picked ahead
MAX_HELD = 256  # sandboxes whose contexts are held at once (descriptors: one per tmpfs)
WRITE_RATE = 4 * GiB  # bytes a second the sandboxes together may write into tmpfs: a pass comes before they cross
DUTY = 0.1
FULL_MARGIN = 64 << 10  # a tmpfs with less free than this is full


_MEMINFO = (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree")


def meminfo() -> dict[str, int]:
    """MemTotal, MemAvailable, SwapTotal and SwapFree, in bytes (read on every start: kept cheap)."""
    fd = os.open("/proc/meminfo", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 14)
    finally:
        os.close(fd)
    found = {}
    for line in data.splitlines():  # no regular expression: compiling one costs a start 15 ms
        name, _, value = line.partition(b":")
        if name in _MEMINFO:
            found[name.decode()] = int(value.split()[0]) << 10
    return found


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


# ---- admission -------------------------------------------------------------------------------

def admit(limits, on_tmpfs: bool, default_disk: int | None):
    """The limits a new sandbox gets: `limits`, or with a smaller disk when the budget has less
    room left; SandboxError in one line when it has none, or when the disk limit asked for is
    larger than the whole budget (`default_disk`: the default's, which shrinks instead)."""
    mem = meminfo()
    entries = exchange(None, write=False)
    tracker = _here()
    if tracker is not None:  # ours as they are now, not as the last pass wrote them
        entries[str(os.getpid())] = tracker.entry()
    use = held(entries)
    budget = budget_now(mem, use)
    room = min(budget - margin(budget) - use, mem.get("MemAvailable", 0) - floor_now(mem) - margin(budget))
    if on_tmpfs and limits.disk and limits.disk > budget and limits.disk != default_disk:
        raise SandboxError(f"a disk limit of {_size(limits.disk)} is more than the memory budget of all sandboxes' "
                           f"files ({_size(budget)}): ask for less (--disk), raise tmpfs_budget in [sandbox] of the "
                           "config, or keep the layers on disk (--disk-on disk)")
    if tracker is not None and room < NEAR * margin(budget):  # near the bound: measured at once, not in a second
        tracker.wake.set()
    if room < (MIN_DISK if on_tmpfs else SLACK):
        raise SandboxError(f"cannot start another sandbox: the memory budget of all sandboxes' files "
                           f"({_size(budget)}) is in use ({_size(use)} by {_sandboxes(entries)}, "
                           f"{_size(mem.get('MemAvailable', 0))} of memory available): close some, raise tmpfs_budget "
                           "in [sandbox] of the config, or keep the layers on disk (--disk-on disk)")
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
        # Their sum, kept as they change: a start reads it, and a walk over every live sandbox, under
        # the lock the pass takes for each, grew with them. One dropped unclosed keeps its last cost.
        self.total = 0
        self.tight = False
        self.tight_band = 0  # the band when the sizes were shrunk: they come back past twice it
        self.last: tuple[float, int, int] | None = None  # (time, the user's whole use, MemAvailable) of the last pass
        self.contexts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # sandbox -> its picked contexts
        self.state: dict = {}  # the last pass's budget, use and floor, for doctor and the notes
        self.wake = threading.Event()  # a start near the bound: measured at once
        self.pid = os.getpid()
        self.looks = activity.Looks()  # a sandbox quiet since its last pass is not measured again
        threading.Thread(target=self._loop, name="lis-tmpfs-budget", daemon=True).start()

    @property
    def use(self) -> int:
        return self.total

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
        with self.lock:  # whether each runs is asked of those looked at, or resized, alone
            sandboxes = list(self.sandboxes)
        growth = {}

        def measure(sandbox, by_ns) -> bool:
            measured = usage(sandbox)
            found = sum(cost(fs) for fs in measured.values())
            found += memcap.memfds(activity.processes(sandbox, by_ns) or [])
            with self.lock:
                if sandbox in self.sandboxes:  # not closed meanwhile
                    growth[sandbox] = found - self.costs.get(sandbox, found)
                    self.total += found - self.costs.get(sandbox, 0)
                    self.costs[sandbox] = found
            return bool(measured)

        self.looks.pass_over(sandboxes, measure)
        mem = meminfo()
        try:
            entries = exchange(self.entry() if sandboxes else None)
        except (OSError, SandboxError) as exc:  # an unusable ledger: the floor and our own use still bound us
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
        widest = max(margin(budget), budget // 8)  # the way back stays reachable
        band = min(max(margin(budget), int(rate * NOTICE)), widest)
        left = min(budget - use, free - floor)
        self.state = {"budget": budget, "use": use, "floor": floor, "sandboxes": _count(entries), "available": free,
                      "by": "floor" if free - floor < budget - use else "budget"}
        if not self.tight and left < band:
            self.tight, self.tight_band = True, band
        # Not as soon as the writers stop; and the band of a larger budget than now (the config's
        # changed, or MemAvailable fell) counts only up to this one's widest, or the sizes never came back.
        elif self.tight and left > 2 * max(band, min(self.tight_band, widest)):
            self.tight = False
        # The writers first: the shrink reaches the fastest before the others.
        for sandbox in sorted(sandboxes, key=lambda s: -growth.get(s, 0)):
            if self.tight != (sandbox in self.shrunk):
                if sandbox.running:
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
        if _tracker is None or _tracker.pid != os.getpid():  # a forked child has no thread of its parent's
            _tracker = _Tracker()
    with _tracker.lock:
        _tracker.sandboxes.add(sandbox)


def untrack(sandbox) -> None:
    tracker = _here()
    if tracker is not None:
        with tracker.lock:
            tracker.sandboxes.discard(sandbox)
            tracker.shrunk.discard(sandbox)
            tracker.total -= tracker.costs.pop(sandbox, 0)
            tracker._release(sandbox)


def _here() -> _Tracker | None:
    """This process's tracker, if it made one (a forked child has no thread of its parent's)."""
    tracker = _tracker
    return tracker if tracker is not None and tracker.pid == os.getpid() else None


def note(sandbox) -> str:
    """While the budget holds the sandbox's tmpfs shrunk and one of them is full: what the model
    is told after each command (else "")."""
    tracker = _here()
    if tracker is None or sandbox not in tracker.shrunk:
        return ""
    full = [path or "/testbed" for path, fs in usage(sandbox).items() if fs.f_bavail * fs.f_frsize < FULL_MARGIN]
    if not full:
        return ""
    state = tracker.state
    if state.get("by") == "floor":
        why, more = (f"this machine's free memory is near the floor the sandboxes leave it ({_size(state['available'])} "
                     f"available, floor {_size(state['floor'])})", "free memory on the host, lower tmpfs_floor")
    else:
        why, more = (f"the memory budget of all sandboxes' files ({_size(state.get('budget', 0))}) is reached "
                     f"({_size(state.get('use', 0))} in use by {state.get('sandboxes', 0)} of them)", "raise tmpfs_budget")
    return (f"{why}: writing more to {', '.join(full)} fails with \"No space left on device\" until files are "
            f"removed or other sandboxes end. For more, {more} in [sandbox] of the config, or keep the layers on "
            "disk (--disk-on disk)")


def status() -> dict:
    """The budget, the floor and what the user's sandboxes hold now, for doctor."""
    mem = meminfo()
    try:
        tracker = _here()
        entries, error = exchange(tracker.entry() if tracker and tracker.sandboxes else None), ""
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
