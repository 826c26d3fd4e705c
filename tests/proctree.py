"""Process trees from /proc, for tests and benchmarks that count what a run left or what it costs."""
from __future__ import annotations

from pathlib import Path


def descendants(root: int) -> list[int]:
    """Every live process below `root` (children, theirs, ...), from each process's ppid."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def sandbox_processes(root: int) -> list[int]:
    """`root`'s descendants but the one spawn helper a lis-tui process starts (isolation.spawn)."""
    def helper(pid: int) -> bool:
        try:
            return b"spawn/helper.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    return [p for p in descendants(root) if not helper(p)]


def pss_kib(pid: int) -> int:
    """A process's proportional set size in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
