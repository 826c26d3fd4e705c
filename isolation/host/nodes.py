"""The host's device nodes, read-only in every sandbox of a caller that owns them (root).

bwrap's `--dev` binds the host's /dev/null, zero, full, random, urandom and tty into the sandbox,
and our masks bind /dev/null over files. The binds share the host's inodes, and the sandbox's
uid 0 is the caller's uid outside: when that is root, the owner of those nodes, a sandbox could
chmod, chown or touch them (the owner needs no capability for that), e.g. leave the host a
/dev/null that only root may open. A read-only mount stops all of that with EROFS and still lets
a device be opened, read and written. But bwrap can make no such mount: each of its remounts
adds `nodev`, which makes a device unopenable.

So the thread that starts bwrap gets a mount namespace of its own (a slave of the host's: host
mounts still come in, ours never go out) in which those nodes are read-only binds; bwrap copies
that namespace, binds from it, and keeps the read-only flag. Only a caller with CAP_SYS_ADMIN can
do this, and only a caller that owns the nodes (root) needs it: for anyone else it is a no-op.
"""
from __future__ import annotations

import os
import threading

from ..spawn import linux
from ..spec import SandboxError

NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""bwrap's `--dev` nodes (the same list in 0.8 and 0.11); /dev/null is also the source of every mask."""

_done = threading.local()


def exposed() -> list[str]:
    """The nodes a sandbox of ours could change on the host: those that exist and that we own."""
    uid = os.getuid()  # bwrap maps the sandbox's uid 0 to our real uid
    found = []
    for path in NODES:
        try:
            if os.stat(path).st_uid == uid:
                found.append(path)
        except OSError:  # a host without /dev/tty: bwrap skips it too
            pass
    return found


def protect_this_thread() -> None:
    """Make the exposed nodes read-only for every process this thread starts from now on.

    Once per thread. Raises SandboxError, naming the fix, where that cannot be done."""
    if getattr(_done, "yes", False):
        return
    nodes = exposed()
    if nodes:
        try:
            linux.unshare(linux.CLONE_NEWNS)
            linux.mount(None, "/", linux.MS_REC | linux.MS_SLAVE)
            for path in nodes:
                linux.mount(path, path, linux.MS_BIND)
                linux.mount(None, path, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID)
        except OSError as error:
            raise SandboxError(
                f"lis-tui runs as uid {os.getuid()}, the owner of the host's {', '.join(nodes)}, and cannot make them "
                f"read-only for its sandboxes ({error}): a sandbox could change their modes on the host. Fix: "
                "run lis-tui as an unprivileged user (rootless is how it is meant to run), or give it "
                "CAP_SYS_ADMIN (a root that may unshare a mount namespace).") from None
    _done.yes = True
