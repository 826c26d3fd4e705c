"""What runs in the sandboxes, and which of them cannot have changed since a watcher last looked:
the watchers' passes (the disk walk, the memory cap, the memory budget) follow the sandboxes that
run something, not every live one.

Processes: one look at /proc a pass, by pid namespace (`processes_by_ns`). A namespace nested in
a sandbox's counts as the sandbox's: with nested_userns a command may make one, and what runs
there outlives its parent (the sandbox's pid 1 adopts it). The kernel names each namespace's
parent (NS_GET_PARENT), so the nesting is the kernel's word, not the sandbox's.

Quiet: a sandbox whose pid namespace, nested ones included, holds its pid 1 alone (the keeper, sh
reading a pipe, which forks nothing and writes nothing), with no host-side file operation under
way. Nothing runs or writes in a quiet sandbox until something starts there, and all that starts
there comes from this process: a command (commands.popen) or a host-side file operation
(files._file_op), each of which counts a stir of the sandbox when it ends. So a watcher that found
a sandbox quiet at N stirs skips it while the count is still N (`Looks`): what it measured then
still holds. A pass beside thousands of idle sandboxes then reads no /proc at all.
"""
from __future__ import annotations

import fcntl
import os
import weakref
from collections import defaultdict

NS_GET_PARENT = 0xB702  # _IO(0xb7, 0x2), linux/nsfs.h


def pid_ns(sandbox) -> str | None:
    """Its pid namespace ("pid:[N]"), None when it has no pid 1 just now (gone, or closing)."""
    pid = sandbox.pid
    if pid is None:
        return None
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def processes(sandbox, by_ns: dict[str, list[int]] | None = None) -> list[int] | None:
    """Host pids of the sandbox's processes, those of namespaces nested in its own included; None
    when it has no pid 1 just now. `by_ns`: `processes_by_ns(...)` when one look serves several."""
    ns = pid_ns(sandbox)
    if ns is None:
        return None
    return (by_ns if by_ns is not None else processes_by_ns({ns})).get(ns, [])


def processes_by_ns(known: set[str] = frozenset()) -> dict[str, list[int]]:
    """Host pids of the processes we may look at, by pid namespace ("pid:[N]"); a namespace in
    `known` lists those of the namespaces nested in it too."""
    found: dict[str, list[int]] = defaultdict(list)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                found[os.readlink(f"/proc/{entry.name}/ns/pid")].append(int(entry.name))
            except OSError:
                pass  # gone, or not ours
    if known:
        own = os.readlink("/proc/self/ns/pid")
        for ns, pids in list(found.items()):
            if ns not in known and ns != own:
                outer = _known_ancestor(ns, pids, known | {own})
                if outer is not None and outer != own:
                    found[outer].extend(pids)
    return found


def _known_ancestor(ns: str, pids: list[int], known: set[str]) -> str | None:
    """The nearest namespace in `known` that `ns` (the namespace of `pids`) is nested in; None when
    none is, or when every one of them is gone."""
    for pid in pids:
        try:
            fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # gone: the next one
        try:
            if f"pid:[{os.fstat(fd).st_ino}]" != ns:  # the pid was taken again meanwhile
                continue
            while True:
                try:
                    parent = fcntl.ioctl(fd, NS_GET_PARENT)
                except OSError:  # above our own namespace
                    return None
                os.close(fd)
                fd = parent
                name = f"pid:[{os.fstat(fd).st_ino}]"
                if name in known:
                    return name
        finally:
            os.close(fd)
    return None


class Looks:
    """One watcher's memory of the sandboxes it found quiet, and at how many stirs."""

    def __init__(self) -> None:
        self._quiet: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def pass_over(self, sandboxes, measure) -> list:
        """One pass: `measure(sandbox, by_ns)` (False: it could not just now) for each running
        sandbox that may have changed since it was found quiet, from one look at /proc for them
        all (none when each was never stirred: nothing was started there, so its pid 1 is alone).
        One measured and found quiet is skipped from then on while its stirs, read before the look,
        stay the same. Returns the sandboxes it measured."""
        pending = []
        for sandbox in sandboxes:
            stirs = sandbox._stirs_now()
            if (stirs is None or self._quiet.get(sandbox) != stirs) and sandbox.running:
                pending.append((sandbox, pid_ns(sandbox), stirs))
        known = {ns for _, ns, stirs in pending if ns is not None and stirs != 0}
        by_ns = processes_by_ns(known) if known else {}
        for sandbox, ns, stirs in pending:
            quiet = stirs == 0 or (stirs is not None and ns is not None and by_ns.get(ns) == [sandbox.pid])
            if measure(sandbox, by_ns) and quiet:
                self._quiet[sandbox] = stirs
            else:
                self._quiet.pop(sandbox, None)
        return [sandbox for sandbox, _, _ in pending]
