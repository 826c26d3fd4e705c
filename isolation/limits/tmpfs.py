"""One sandbox's tmpfs, as the memory budget (budget.py) sees them: measured, and resized.

Its writable layers' tmpfs (reached through the descriptor of its root the sandbox holds), /tmp,
/run, /dev/shm and, under the host rootfs, / (reached from the sandbox's / by their mount points,
which nothing inside can move). A resize goes through fspick contexts that a fork of the spawn
helper, joined to the sandbox and still capable, makes and hands back (spawn.Zygote.pick); the
kernel checks the reconfigure against whoever calls it, and our process, the owner of the
sandbox's user namespace, may.
"""
from __future__ import annotations

import logging
import os

from ..spawn import linux
from ..spec import SandboxError, tmpfs_inodes, tmpfs_sizes

log = logging.getLogger(__name__)
INODE_COST = 1 << 10  # kernel memory of one tmpfs file, its inode and name (about 850 bytes measured)
SLACK = 2 << 20  # a shrunk tmpfs keeps this much room, so that a write racing the shrink cannot fail it


def mounts(sandbox) -> dict[str, tuple[int | None, int | None]]:
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
        with sandbox._file_op(sandbox._open_root, writes=False) as root:
            for path in mounts(sandbox):
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
    paths = [path for path in mounts(sandbox) if path]
    if sandbox._on_tmpfs:
        with sandbox._file_op(sandbox._dup_rw, writes=False) as layers:
            return list(zip(["", *paths], sandbox._zygote.pick(paths, layers)))
    return list(zip(paths, sandbox._zygote.pick(paths)))


def resize(sandbox, contexts: list[tuple[str, int]], shrink: bool) -> list[tuple[str, int]]:
    """Shrink each tmpfs to what it holds now (plus SLACK), or give each its own size back; the
    contexts still usable. One that a write outran (EINVAL, a shrink below what it holds by now)
    is spent: closed here, and left out, so the next pass picks again and resizes once more."""
    sizes, found = mounts(sandbox), usage(sandbox) if shrink else {}
    kept = []
    for path, context in contexts:
        size, inodes = sizes[path]
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
