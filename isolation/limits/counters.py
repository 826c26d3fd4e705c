"""Each sandbox's share of the per-user kernel counters it charges to the host's user.

A sandbox's processes run as the user's own uid outside, so what they hold of these counts against
the user's allowance on the host as well as against the sandbox's own cap:
- POSIX message queues (RLIMIT_MSGQUEUE, bytes) and queued signals (RLIMIT_SIGPENDING): since
  Linux 5.14 the kernel charges both to the user in every user namespace from the sandbox's up to
  the host's (ucounts); in the sandbox's against the process's own rlimit (which we set), on the
  host against the rlimit bwrap had when it made the namespace, which is the user's: so each
  sandbox's queues and signals take from the same pool as the user's other programs.
- inotify instances and watches: per user namespace, each level against its own
  max_inotify_* (a new namespace starts unlimited; the first zygote writes the sandbox's), and the
  host's is fs.inotify.max_user_*.
- ptys: every devpts but the host's own shares kernel.pty.max less kernel.pty.reserve; the
  sandbox's devpts is mounted with max= its share.

A share is the host's limit divided by 2 * SANDBOXES, read once per process: SANDBOXES live
sandboxes together leave the user at least half of each, and a host whose limits are higher gives
each sandbox more. Where the host sets no limit (an unlimited rlimit), FALLBACK.
"""
from __future__ import annotations

import functools
import resource
from dataclasses import dataclass

SANDBOXES = 16
"""Live sandboxes that together may take half of each of the user's counters."""
FALLBACK = {"message_queues": 128 << 10, "pending_signals": 1024, "inotify_instances": 32,
            "inotify_watches": 16384, "ptys": 64}
"""Each sandbox's cap where the host's limit cannot be read or is unlimited."""


@dataclass(frozen=True)
class Counter:
    """One per-user kernel counter: the host's limit, a sandbox's share, and how to raise the host's."""

    name: str
    """The `Limits` field it sets."""
    what: str
    """What it counts, as people say it."""
    host: int | None
    """The host's limit (None: unlimited, or unreadable)."""
    raise_with: str
    """The command that raises the host's limit."""

    @property
    def share(self) -> int:
        """A sandbox's cap: host // (2 * SANDBOXES), at least 1; FALLBACK where the host has none."""
        if self.host is None:
            return FALLBACK[self.name]
        return max(1, self.host // (2 * SANDBOXES))


@functools.lru_cache(maxsize=1)
def host_counters() -> tuple[Counter, ...]:
    """The host's limits on each counter, as this process's user has them (read once)."""
    ptys = _sysctl("kernel/pty/max"), _sysctl("kernel/pty/reserve")
    return (
        Counter("message_queues", "of POSIX message queues", _rlimit(resource.RLIMIT_MSGQUEUE),
                "`msgqueue` in /etc/security/limits.conf (ulimit -q)"),
        Counter("pending_signals", "queued signals", _rlimit(resource.RLIMIT_SIGPENDING),
                "`sigpending` in /etc/security/limits.conf (ulimit -i)"),
        Counter("inotify_instances", "inotify instances", _sysctl("fs/inotify/max_user_instances"),
                "sudo sysctl -w fs.inotify.max_user_instances=1024"),
        Counter("inotify_watches", "inotify watches", _sysctl("fs/inotify/max_user_watches"),
                "sudo sysctl -w fs.inotify.max_user_watches=1048576"),
        Counter("ptys", "ptys (those every container shares)",
                None if None in ptys else max(0, ptys[0] - ptys[1]), "sudo sysctl -w kernel.pty.max=16384"),
    )


def share(name: str) -> int:
    """A sandbox's share of the counter that sets the `Limits` field `name`."""
    return next(counter.share for counter in host_counters() if counter.name == name)


def _rlimit(which: int) -> int | None:
    """Our soft limit: the one the kernel checks the user's total against, on the host."""
    soft, _ = resource.getrlimit(which)
    return None if soft == resource.RLIM_INFINITY else soft


def _sysctl(name: str) -> int | None:
    try:
        with open(f"/proc/sys/{name}") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
