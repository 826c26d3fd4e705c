"""Process trees from /proc, for tests and benchmarks that count what a run left or what it costs."""
from __future__ import annotations

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


def pss_kib(pid: int) -> int:
    """A process's proportional set size in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
