"""The memory cap of a whole sandbox where no cgroup holds it: a watcher that sums its processes.

Without a delegated cgroup v2 (cgroup.py: there memory.max is the sandbox's, the kernel's wall, and
no watcher runs), the kernel caps memory per process only (RLIMIT_DATA): three processes of one
sandbox under `--memory 1G` held 2.85 GiB. So one thread per lis-tui process sums, for every such
sandbox, what the processes in its pid namespace and the namespaces nested in it hold (activity.py),
and stops the sandbox whole past its memory limit (`Sandbox._stop`, as the disk walk does): the
command under way is told, every later one fails naming the limit and `--memory`, and a run ends
as `sandbox_limit`. What it counts, memory whatever holds it:
- anonymous memory and shared memory mapped in, resident or (anonymous) swapped: smaps_rollup's
  Pss_Anon, SwapPss and Pss_Shmem, a page shared by several processes counted once over them.
  RLIMIT_DATA covers none of MAP_SHARED: a `mmap(-1, SIZE)` (Python's default), a SysV segment
  attached, a memfd mapped, a tmpfs file mapped (as memory.max would);
- memfd files held open, by their blocks, each once (`memfds`): a memfd written with write() and
  never mapped is held by its descriptor alone, in the kernel's own tmpfs, which no size bounds and
  RLIMIT_FSIZE only per file. A memfd both open and mapped counts twice (its file and its pages):
  the sum errs toward the limit. The memory budget counts them too (budget.py).
File pages of disk files, which the kernel can drop, do not count, nor do the sandbox's own tmpfs
files unmapped, which tmp_size, the disk limit and the budget bound. SysV shared memory is bounded
by the kernel in the sandbox's IPC namespace at the memory limit (shmall, shmmax: pid1._sysctls).

Not seen without privileges (containment.md says what is left, and that a cgroup is the wall):
pages of a shared-memory file that no descriptor holds and no mapping has resident just now (a
memfd written, mapped and closed; a `mmap(-1, ...)` after MADV_DONTNEED or a partial munmap), a
descriptor in flight in a unix socket, and an unattached SysV segment (bounded by shmall).

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
COUNTED = (b"Pss_Anon:", b"SwapPss:", b"Pss_Shmem:")
MEMFD = "/memfd:"  # how the kernel names every memfd's file, whatever name it was given


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
    used = sum(_held(p) for p in pids) + memfds(pids)
    if used <= limit:
        return True
    sandbox._stop(f"its memory limit of {_size(limit)} was reached ({_size(used)} held by its {len(pids)} processes "
                  "together, shared memory and memfd files included): every process in it was killed and nothing "
                  "more can run there. For more, start it with a larger limit: --memory SIZE (or memory in "
                  "[sandbox] of the config)")
    return True


def usage(sandbox, by_ns: dict[str, list[int]] | None = None) -> tuple[int, int] | None:
    """(bytes, processes): the memory the sandbox's processes hold together, as `check` counts it;
    None when it cannot be measured just now (gone, or closing)."""
    pids = activity.processes(sandbox, by_ns)
    return None if pids is None else (sum(_held(p) for p in pids) + memfds(pids), len(pids))


def memfds(pids: list[int]) -> int:
    """Bytes the memfd files that `pids` hold open take (their blocks), each file once: a readlink
    of each descriptor, and a stat of each memfd among them."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        folder = f"/proc/{pid}/fd/"
        try:
            names = os.listdir(folder)
        except OSError:  # gone meanwhile
            continue
        for name in names:
            try:
                if os.readlink(folder + name).startswith(MEMFD):
                    st = os.stat(folder + name)
                    seen[st.st_dev, st.st_ino] = st.st_blocks * 512
            except OSError:  # closed meanwhile
                continue
    return sum(seen.values())


def _held(pid: int) -> int:
    """Bytes of memory `pid` has mapped in (anonymous, resident or swapped, and shared memory
    resident), pages shared with other processes in proportion."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            lines = rollup.read().splitlines()
    except OSError:  # gone meanwhile
        return 0
    return sum(int(line.split()[1]) << 10 for line in lines if line.startswith(COUNTED))


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


_watcher = Watcher("lis-memory-cap", lambda sandbox, by_ns: check(sandbox, by_ns), MIN_PAUSE)
