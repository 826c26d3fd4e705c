"""The sandbox's disk: how much its writable layers hold, the note a command's caller gets when
they are full, and the stop when a watched limit is passed (diskcap.py watches; budget.py bounds).
The size's words (_size) live here too, so that the launch takes them from the module that owns
the disk."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..limits import budget, diskcap
from .. import session_layers
from ..rootfs.safe import tree_usage
from ..spec import SandboxError

if TYPE_CHECKING:
    from . import Sandbox

WRITABLE_LAYERS = session_layers.LAYERS  # under `layers`, as layout.plan makes them
FULL_MARGIN = 64 << 10  # the layers' tmpfs with less free than this is full (the kernel's last pages)


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def writable_size(sandbox: Sandbox) -> int | None:
    """Bytes on disk in this sandbox's writable layers (its files, /root, the rootfs's upper),
    the deleted files its processes hold open there included; None when they cannot be
    measured just now."""
    found = diskcap.usage(sandbox)
    return None if found is None else found[0]


def writable_usage(sandbox: Sandbox) -> tuple[int, int] | None:
    """(bytes on disk, inodes) of the writable layers' trees (diskcap.usage adds the deleted
    files held open); None when they cannot be measured just now."""
    if sandbox._on_tmpfs:  # the kernel's count, deleted files held open included
        fs = sandbox._layers_fs()
        return None if fs is None else ((fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree)
    try:  # not overlayfs's work dirs: they hold nothing, and unreadable ones (mode 000)
        layers = sandbox.layers
    except AttributeError:  # closed meanwhile (the disk-cap thread can ask while close() runs)
        return None
    try:
        found = [tree_usage(layers / name) for name in WRITABLE_LAYERS if (layers / name).is_dir()]
    except (OSError, SandboxError):
        return None
    return sum(used for used, _ in found), sum(inodes for _, inodes in found)


def _layers_fs(sandbox: Sandbox) -> os.statvfs_result | None:
    """The layers' tmpfs's counts (None when closing)."""
    try:
        with sandbox._file_op(sandbox._dup_rw, writes=False) as fd:
            return os.fstatvfs(fd)
    except (OSError, SandboxError):
        return None


def _full_note(sandbox: Sandbox) -> str:
    """What to say when the layers' tmpfs is full: the kernel refuses the writes (ENOSPC), the
    sandbox runs on, and the model can make room."""
    shrunk = budget.note(sandbox)  # the budget's bound, which comes before the limit's
    if shrunk:
        return shrunk
    fs = sandbox._layers_fs() if sandbox._on_tmpfs else None
    if fs is None:
        return ""
    limits = sandbox.spec.limits
    if fs.f_bfree * fs.f_frsize < FULL_MARGIN:
        return (f"the sandbox's disk is full: its limit of {_size(limits.disk)} is reached, and writing more "
                "fails with \"No space left on device\" until files are removed. For more room, start it with "
                "a larger limit: --disk SIZE (or disk in [sandbox] of the config)")
    if fs.f_ffree == 0:
        return (f"the sandbox's disk is full: its limit of {limits.inode_limit():,} files and directories is reached, "
                "and making more fails with \"No space left on device\" until some are removed. For more, "
                "start it with a larger limit: inodes in [sandbox] of the config")
    return ""


def _over_inodes(sandbox: Sandbox, count: int, used: int) -> None:
    sandbox._stop(f"its limit of {sandbox.spec.limits.inode_limit():,} files and directories was reached ({count:,} in use): "
               "every process in it was killed and nothing more can run there. For more, start it with a "
               "larger limit: inodes in [sandbox] of the config")


def _over_disk(sandbox: Sandbox, used: int) -> None:
    sandbox._stop(f"its disk limit of {_size(sandbox.spec.limits.disk)} was reached ({_size(used)} in use): every "
               "process in it was killed and nothing more can run there. For more room, start it with a "
               "larger limit: --disk SIZE (or disk in [sandbox] of the config)")


def disk_note(sandbox: Sandbox) -> str:
    """Once, after the disk limit (or a cgroup's memory limit) was reached: what happened and
    what to do (else ""). While the layers' tmpfs is full: that, after each command."""
    note, sandbox._disk_note, group = sandbox._disk_note, "", sandbox._cgroup
    return note or sandbox._full_note() or (group.memory_note(sandbox.spec.limits.memory) if group is not None else "")
