"""Process trees from /proc, for tests and benchmarks that count what a run left or what it costs."""
from __future__ import annotations

import time
from pathlib import Path


def descendants(root: int, *more: int) -> list[int]:
    """Every live process below `root` (and `more`): children, theirs, ..., from each process's ppid."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid for top in (root, *more) for pid in children.get(top, [])]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def sandbox_processes(root: int) -> list[int]:
    """`root`'s descendants, and those of the spawn helper it started (isolation.spawn: no child
    of its owner's, which it names last in its argv), but the helper and its zygotes."""
    def helper(cmdline: list[bytes]) -> bool:
        return any(word.endswith(b"spawn/helper.py") for word in cmdline)
    cmdlines = {int(p.name): _cmdline(int(p.name)) for p in Path("/proc").glob("[0-9]*")}
    helpers = [pid for pid, cmdline in cmdlines.items() if helper(cmdline) and cmdline[-2:-1] == [str(root).encode()]]
    # a zygote is below its helper; a process born since the look is no helper
    return [p for p in dict.fromkeys(descendants(root, *helpers)) if not helper(cmdlines.get(p) or _cmdline(p))]


def left_behind(root: int, timeout: float = 10.0) -> list[tuple[int, list[str], list[bytes]]]:
    """sandbox_processes(root) still there after `timeout` (none: []), each with its state and
    parent, and its argv: a process killed as a sandbox closed can take a moment to go, and one
    that is done is a zombie (argv empty) until its parent, the spawn helper or a zygote, reaps it."""
    deadline = time.monotonic() + timeout
    while (left := sandbox_processes(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [(pid, _stat(pid)[:2], _cmdline(pid)) for pid in left]


def pss_kib(pid: int) -> int:
    """A process's proportional set size in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (its state, then its parent...); []
    once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _ppid(pid: int) -> int:
    try:
        return int(_stat(pid)[1])
    except (ValueError, IndexError):
        return -1


def _live(pid: int) -> bool:
    """Running, or at least not a zombie."""
    return _stat(pid)[:1] not in ([], ["Z"])


def fork_servers(root: int) -> list[int]:
    """The multiprocessing fork servers `root` started (the parents of its worker processes)."""
    return [p for p in descendants(root) if _ppid(p) == root and b"forkserver" in b" ".join(_cmdline(p))]


def worker_processes(root: int) -> list[int]:
    """The worker processes of `root` (bench, rollout or env serve --workers): the children of
    the fork servers it started."""
    servers = set(fork_servers(root))
    return sorted(p for p in descendants(root) if _ppid(p) in servers)


def run_sandboxes(root: int) -> list[int]:
    """The sandbox processes of `root` and of each of its worker processes (under their spawn
    helpers), without the workers and multiprocessing's own (fork server, resource tracker)."""
    workers = worker_processes(root)
    skip = set(workers) | set(fork_servers(root))
    found = [p for owner in (root, *workers) for p in sandbox_processes(owner)]
    return [p for p in dict.fromkeys(found) if p not in skip
            and b"multiprocessing.resource_tracker" not in b" ".join(_cmdline(p))]


def spawn_helpers(*owners: int) -> list[int]:
    """The spawn helpers (and their zygotes) that name one of `owners` as theirs."""
    names = {str(o).encode() for o in owners}
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        cmdline = _cmdline(int(proc.name))
        if any(w.endswith(b"spawn/helper.py") for w in cmdline) and cmdline[-2:-1] and cmdline[-2] in names:
            found.append(int(proc.name))
    return found


def markers_in(scratch: Path) -> set[bytes]:
    """The markers (`lis-sandbox-ID`, in bwrap's and pid 1's argv) of the sandboxes whose records
    are in `scratch` now: how a run's sandboxes are found, since no host path is in their argv."""
    try:
        return {f"lis-sandbox-{path.name[:-5]}".encode() for path in scratch.glob("*.lock")}
    except OSError:
        return set()


def marked(markers: set[bytes]) -> list[int]:
    """Live processes (zombies left out) whose argv holds one of `markers`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if markers.intersection(_cmdline(int(proc.name))) and _live(int(proc.name)):
            found.append(int(proc.name))
    return found


def other_sandboxes(root: int) -> list[int]:
    """Live processes of sandboxes (a marker in their argv: bwrap and pid 1) that `root` did not
    start itself (bwrap is its child, pid 1 bwrap's): a child's of `root`'s, another process's, or
    a dead owner's left behind."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if any(word.startswith(b"lis-sandbox-") for word in _cmdline(pid)) and _live(pid) and \
                root not in (_ppid(pid), _ppid(_ppid(pid))):
            found.append(pid)
    return found


def keeper_runs(sb) -> None:
    """Wait until a sandbox's pid 1 is the keeper: it execs once the sandbox's first request is
    served (spawn/forks.py, _Start.let_go), and until then is bwrap's child, with the same one
    capability, and its filter not loaded yet."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{sb.pid}/cmdline").read_bytes().startswith(b"sh\0-c\0"):
        assert time.monotonic() < deadline, "pid 1 never ran the keeper"
        time.sleep(0.01)
