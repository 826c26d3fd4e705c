"""cgroup v2 limits per sandbox, where the machine delegates a subtree of the hierarchy to us.

A systemd user session delegates `user@UID.service/...` to its user, and `systemd-run --user
--scope -p Delegate=yes` makes a scope of its own for one command. Within this process's own
cgroup (OWN, from /proc/self/cgroup's `0::` line), lis-tui makes:

    OWN/lis-tui-PID/          memory and pids enabled for its children
    OWN/lis-tui-PID/self      lis-tui itself (and the spawn helper, and their other children)
    OWN/lis-tui-PID/sb-ID     one per sandbox: memory.max, memory.swap.max, pids.max
    OWN/lis-tui-PID/sb-ID/run its processes (a leaf below its limits: see SandboxCgroup.path)

A cgroup whose cgroup.subtree_control enables controllers may hold no process ("no internal
processes"), so before OWN enables memory and pids for its children, lis-tui moves itself and
its children into `self`, as podman does. Where OWN holds processes that are not lis-tui's (the
terminal's shell), that would take them along: lis-tui leaves them and says how to get a scope
of its own. The root cgroup is exempt from the rule, so root there moves nothing.

A sandbox's processes are in its cgroup before they run anything of the sandbox's: pid 1 (bwrap's
child) waits on bwrap's --block-fd until the sandbox's first zygote has moved it, with its rlimits
(spawn/forks.py, _Start.pid_1), and each zygote moves itself before it joins the namespaces;
commands are the zygote's children. At
close the cgroup is killed (cgroup.kill) and removed; what a crash left is removed at the next start.

Found once per process (`delegation`), so a machine without a delegated hierarchy pays one cached
call per sandbox. RLIMITs stay the floor everywhere (sandbox/pid1.py: _rlimits).
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..spec import Limits, SandboxError

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
"""What each sandbox's cgroup must have; read at detection, so a test may narrow it first."""
FIX_MOUNT = ("boot with the unified cgroup v2 hierarchy (systemd.unified_cgroup_hierarchy=1 on the kernel "
             "command line; the default since systemd 247)")
FIX_SCOPE = ("run lis-tui in a scope of its own with memory and pids delegated: "
             "systemd-run --user --scope -p Delegate=yes lis-tui ...  (it needs a login session with "
             "systemd --user; over ssh, `loginctl enable-linger $USER` once)")
FIX_CONTROLLERS = (FIX_SCOPE + "; if the controllers are still missing, delegate them to user sessions: "
                   "`sudo systemctl edit user@.service` with [Service] Delegate=pids memory, then log in again")
REMOVE_WAIT = 2.0  # seconds close() waits for a killed sandbox's cgroup to empty


@dataclass(frozen=True)
class Plan:
    """Where this process may make sandbox cgroups (`base`), or why it may not (`reason`)."""

    base: Path | None = None
    """OWN/lis-tui-PID, to be made; None: no cgroup limits here."""
    own: Path | None = None
    move: tuple[int, ...] = ()
    """Our processes to move into base/self before OWN enables the controllers."""
    enable: tuple[Path, ...] = ()
    """Directories whose cgroup.subtree_control must enable the controllers, in order."""
    controllers: tuple[str, ...] = CONTROLLERS
    reason: str = ""
    """"not mounted", "not delegated" or "controllers missing" (or "could not set up")."""
    detail: str = ""
    fix: str = ""

    @property
    def usable(self) -> bool:
        return self.base is not None

    def describe(self) -> str:
        """doctor's line: which limits apply, and why."""
        if self.usable:
            return f"cgroup v2 delegated at {self.own}: memory.max and pids.max per sandbox"
        return (f"no cgroup v2 ({self.reason}: {self.detail}): rlimits, and a watcher that sums each sandbox's "
                "processes and stops it past its memory limit (memcap.py)")


def _none(reason: str, detail: str, fix: str) -> Plan:
    return Plan(reason=reason, detail=detail, fix=fix)


def plan(root: Path, self_cgroup: str, uid: int, pid: int, ours: Callable[[int], bool],
         controllers: tuple[str, ...] = CONTROLLERS) -> Plan:
    """What to make, from the hierarchy at `root` and `self_cgroup` (the text of
    /proc/self/cgroup); `ours(pid)`: whether a process is this one or its descendant. Reads
    files only, so a directory tree of plain files stands for the hierarchy."""
    if not (root / "cgroup.controllers").is_file():
        hybrid = " (a hybrid hierarchy: memory and pids belong to cgroup v1)" \
            if (root / "unified" / "cgroup.controllers").is_file() else ""
        return _none("not mounted", f"no cgroup2 mount at {root}{hybrid}", FIX_MOUNT)
    rel = next((line[3:].strip("/") for line in self_cgroup.splitlines() if line.startswith("0::")), None)
    if rel is None:
        return _none("not mounted", "this process is in no cgroup v2 (/proc/self/cgroup has no 0:: line)", FIX_MOUNT)
    own = root / rel
    if rel.startswith("..") or not (own / "cgroup.procs").is_file():
        return _none("not delegated", f"this process's cgroup /{rel} is not under {root} (a cgroup namespace "
                     "of another root)", FIX_SCOPE)
    missing = [name for name in controllers if name not in _words(own / "cgroup.controllers")]
    if missing:
        return _none("controllers missing", f"{' and '.join(missing)} not available in {own} "
                     "(its cgroup.controllers)", FIX_CONTROLLERS)
    if any(_owner(path) != uid for path in (own, own / "cgroup.procs", own / "cgroup.subtree_control")):
        return _none("not delegated", f"subtree not delegated to uid {uid}: {own} belongs to uid {_owner(own)}",
                     FIX_SCOPE)
    if uid == 0 and rel and not _marked_delegated(own):  # root owns every cgroup: systemd marks the ones it hands over
        return _none("not delegated", f"{own} is systemd's, not delegated (no trusted.delegate mark)", FIX_SCOPE)
    base, move = own / f"lis-tui-{pid}", ()
    enable = (base,)
    if set(controllers) <= set(_words(own / "cgroup.subtree_control")):
        pass
    elif not rel:  # the root cgroup may hold processes and enable controllers at once
        enable = (own, base)
    else:
        procs = [int(word) for word in _words(own / "cgroup.procs")]
        others = [p for p in procs if not ours(p)]
        if others:
            return _none("not delegated", f"{own} also holds processes that are not lis-tui's (pid "
                         f"{', '.join(map(str, others[:3]))}), and controllers can be enabled only in a "
                         "cgroup that holds none", FIX_SCOPE)
        move, enable = tuple(procs), (own, base)
    return Plan(base, own, move, enable, tuple(controllers))


def _marked_delegated(path: Path) -> bool:
    try:
        return os.getxattr(path, "trusted.delegate") == b"1"
    except OSError:
        return False


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    """One write, as the kernel takes it (a cgroup file is never created or truncated)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _ours(pid: int, me: int | None = None) -> bool:
    """Whether `pid` is this process or one of its descendants (by /proc's parent links)."""
    me = me or os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def detect() -> Plan:
    """The plan for this process on this machine (nothing is written)."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        text = ""
    return plan(ROOT, text, os.geteuid(), os.getpid(), _ours, tuple(CONTROLLERS))


def establish(p: Plan) -> Plan:
    """Make the plan's subtree and move our processes into its `self` leaf; the plan, or one that
    says why it could not be done (the sandboxes then have rlimits only)."""
    if not p.usable:
        return p
    try:
        sweep(p.own, p.base.name)
        p.base.mkdir(exist_ok=True)
        if p.move:
            (p.base / "self").mkdir(exist_ok=True)
        for attempt in range(3):
            for pid in _words(p.own / "cgroup.procs") if p.move else ():
                if _ours(int(pid)):  # a child forked since the plan was made goes along
                    try:
                        _write(p.base / "self" / "cgroup.procs", pid)
                    except ProcessLookupError:
                        pass
            try:
                for directory in p.enable if p.controllers else ():
                    _write(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in p.controllers))
                return p
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == 2:
                    raise
    except OSError as exc:
        log.warning("cgroup v2 limits are off: could not set up %s: %s", p.base, exc)
        return _none("could not set up", f"{p.base}: {exc.strerror or exc}", FIX_SCOPE)
    return p


_established: Plan | None = None
_establishing = threading.Lock()


def delegation() -> Plan:
    """This process's subtree, set up on first use and kept (once per process, whatever the threads)."""
    global _established
    if _established is None:
        with _establishing:
            if _established is None:
                _established = establish(detect())
    return _established


def leftovers(own: Path, keep: str, alive: Callable[[int, Path], bool]) -> list[Path]:
    """Subtrees `lis-tui-PID` in `own` whose owner is gone (`alive(pid, path)` says it is not)."""
    found = []
    try:
        entries = list(os.scandir(own))
    except OSError:
        return []
    for entry in entries:
        name = entry.name
        if name != keep and name.startswith("lis-tui-") and name[8:].isdigit() and entry.is_dir(follow_symlinks=False):
            if not alive(int(name[8:]), Path(entry.path)):
                found.append(Path(entry.path))
    return found


def _owner_alive(pid: int, base: Path) -> bool:
    """Whether `pid` still runs where its owner would be: in `base` (moved to its `self`), or
    where `base` was made (it moved nothing). A pid reused elsewhere is taken for gone."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    where = next((line[3:].rstrip("/") for line in text.splitlines() if line.startswith("0::")), None)
    if where is None:
        return False
    try:
        made = "/" + str(base.relative_to(ROOT))
    except ValueError:
        return True  # not under our hierarchy: leave it
    return where == made.rsplit("/", 1)[0] or (where + "/").startswith(made + "/")


def sweep(own: Path, keep: str) -> int:
    """Kill what is left in the subtrees of lis-tui processes gone from `own`, and remove them."""
    swept = 0
    for base in leftovers(own, keep, _owner_alive):
        swept += _kill_and_remove(base)
    return swept


def _kill_and_remove(path: Path, wait: float = REMOVE_WAIT) -> bool:
    try:
        _write(path / "cgroup.kill", "1")  # Linux 5.14+; before it, what close() killed must leave by itself
    except FileNotFoundError:
        if not path.exists():
            return True
    except OSError:
        pass
    deadline = time.monotonic() + wait
    return all(_remove(directory, deadline) for directory in _deepest_first(path))


def _deepest_first(path: Path) -> list[Path]:
    try:
        below = [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        below = []
    return [d for child in below for d in _deepest_first(child)] + [path]


def _remove(path: Path, deadline: float) -> bool:
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:  # EBUSY: a killed process is still leaving
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("could not remove the cgroup %s: %s (the next start removes it)", path, exc)
                return False
            time.sleep(0.002)


def limit_files(limits: Limits, controllers: tuple[str, ...] = CONTROLLERS) -> dict[str, str]:
    """What a sandbox's cgroup holds: its whole memory (tmpfs pages included, no swap) and tasks."""
    files = {}
    if limits.memory and "memory" in controllers:
        files.update({"memory.max": str(limits.memory), "memory.swap.max": "0"})
    if limits.processes and "pids" in controllers:
        files["pids.max"] = str(limits.processes)
    return files


@dataclass
class SandboxCgroup:
    """One sandbox's cgroup: made with its limits, its processes admitted, removed at close."""

    path: Path
    """sb-ID, which holds the limits; its processes are in its leaf `run`, so that none of them,
    even with a cgroup mount of its own (nested user namespaces), can reach the limits' files:
    a cgroup namespace made inside is rooted at the leaf."""
    _ooms: tuple[int, int] = (0, 0)  # memory.events' oom and oom_kill when last told

    @classmethod
    def make(cls, base: Path, name: str, limits: Limits, controllers: tuple[str, ...] = CONTROLLERS) -> SandboxCgroup:
        path = base / f"sb-{name}"
        try:
            path.mkdir()
            (path / "run").mkdir()
            for filename, value in limit_files(limits, controllers).items():
                try:
                    _write(path / filename, value)
                except FileNotFoundError:
                    if filename != "memory.swap.max":  # absent without swap accounting: nothing to cap
                        raise
        except OSError as exc:
            _kill_and_remove(path, 0)
            raise SandboxError(f"could not make the sandbox's cgroup {path}: {exc.strerror or exc}. "
                               "Run `lis-tui doctor`.") from None
        return cls(path)

    @property
    def procs(self) -> str:
        """Its leaf's cgroup.procs: a zygote moves itself there (spawn/forks.py)."""
        return str(self.path / "run" / "cgroup.procs")

    def memory_note(self, limit: int | None) -> str:
        """Once per new event: the memory limit refused memory or killed a process (else "")."""
        try:
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            seen = (int(events.get("oom", 0)), int(events.get("oom_kill", 0)))
        except (OSError, ValueError):
            return ""
        if seen == self._ooms:  # counters only grow
            return ""
        killed, self._ooms = seen[1] > self._ooms[1], seen
        size = f"{limit / (1 << 30):.1f} GiB" if limit and limit >= 1 << 30 else f"{(limit or 0) >> 20} MiB"
        return (f"the sandbox's memory limit of {size} (its processes and its files in /tmp, /dev/shm and "
                f"other in-memory directories, together) was reached"
                f"{': the kernel killed a process' if killed else ''}. Delete files there or end processes "
                "to go on; the person running lis-tui can raise it (--memory, or memory in [sandbox]).")

    def remove(self) -> None:
        """Kill whatever is left in it (a zygote on its way out) and remove it."""
        _kill_and_remove(self.path)


def for_sandbox(name: str, limits: Limits) -> SandboxCgroup | None:
    """A cgroup for the sandbox `name` with its limits; None where this machine delegates none."""
    p = delegation()
    return SandboxCgroup.make(p.base, name, limits, p.controllers) if p.usable else None
