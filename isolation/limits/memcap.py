"""The memory cap of a whole sandbox where no cgroup holds it: a watcher that sums its processes.

Without a delegated cgroup v2 (cgroup.py: there memory.max is the sandbox's, the kernel's wall, and
no watcher runs), the kernel caps memory per process only (RLIMIT_DATA): three processes of one
sandbox under `--memory 1G` held 2.85 GiB. So one thread per lis-tui process sums, for every such
sandbox, the anonymous memory of the processes in its pid namespace and the namespaces nested in it
(activity.py; smaps_rollup's Pss_Anon and SwapPss: a page shared after a fork counts once over its
sharers; file pages, which the kernel can drop, do not count, nor do its tmpfs files, which tmp_size
and the disk limit bound) and stops the sandbox whole past its memory limit (`Sandbox._stop`, as
the disk walk does): the command under way is told, every later one fails naming the limit and
`--memory`, and a run ends as `sandbox_limit`.

It spends at most DUTY of a core: a pass that took t seconds is followed by a pause of
max(MIN_PAUSE, 9 t), and a sandbox quiet since its last check is not read again (activity.py).
Between two passes a fast allocator can overshoot (each process is still held to the limit by
RLIMIT_DATA): a fallback, not the kernel's wall.
"""
from __future__ import annotations

import os

from . import activity
from .diskcap import Watcher

MIN_PAUSE = 0.5
COUNTED = (b"Pss_Anon:", b"SwapPss:")


def applies(sandbox) -> bool:
    """Whether the watcher holds this sandbox: a memory limit, and no cgroup of its own to hold it."""
    return bool(sandbox.spec.limits.memory) and sandbox._cgroup is None


def watch(sandbox) -> None:
    """Check `usage(sandbox)` against its memory limit until it closes."""
    _watcher.watch(sandbox)


def unwatch(sandbox) -> None:
    _watcher.unwatch(sandbox)


def check(sandbox, by_ns: dict[str, list[int]] | None = None) -> bool:
    """One measure of one sandbox; over its memory limit, it is stopped whole. A sandbox of its
    keeper alone (pid 1: sh reading a pipe, a fixed few hundred KiB under RLIMIT_DATA) is not
    read: most live sandboxes are idle, and their keepers' smaps were most of a pass. False when
    it could not be measured just now (no pid 1)."""
    limit = sandbox.spec.limits.memory
    pids = activity.processes(sandbox, by_ns)
    if not limit or not pids or pids == [sandbox.pid]:
        return pids is not None
    used = sum(_held(p) for p in pids)
    if used <= limit:
        return True
    sandbox._stop(f"its memory limit of {_size(limit)} was reached ({_size(used)} held by its {len(pids)} processes "
                  "together): every process in it was killed and nothing more can run there. For more, start it "
                  "with a larger limit: --memory SIZE (or memory in [sandbox] of the config)")
    return True


def usage(sandbox, by_ns: dict[str, list[int]] | None = None) -> tuple[int, int] | None:
    """(bytes, processes): the anonymous memory the sandbox's processes hold together; None when
    it cannot be measured just now (gone, or closing)."""
    pids = activity.processes(sandbox, by_ns)
    return None if pids is None else (sum(_held(p) for p in pids), len(pids))


def _held(pid: int) -> int:
    """Bytes of anonymous memory `pid` holds, resident or swapped, shared pages in proportion."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            lines = rollup.read().splitlines()
    except OSError:  # gone meanwhile
        return 0
    return sum(int(line.split()[1]) << 10 for line in lines if line.startswith(COUNTED))


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


_watcher = Watcher("lis-memory-cap", lambda sandbox, by_ns: check(sandbox, by_ns), MIN_PAUSE)
