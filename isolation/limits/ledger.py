"""The ledger of the memory budget (budget.py): what each lis-tui process's sandboxes hold.

One small JSON file per user, in the runtime directory, locked with flock. Each process writes
its own entry (its pid and start time, and what its sandboxes' tmpfs hold) on every pass of its
budget thread and removes it when it has none; an entry whose process is gone (pid dead, or
reused: another start time) is dropped by whoever reads it, so a crashed process's share is freed
at the next read. A file that is not such JSON is refused in one line with the fix.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os

from ..spec import SandboxError


def ledger_path() -> str:
    """The user's ledger: in the runtime directory ($XDG_RUNTIME_DIR, /run/user/UID), else in a
    folder of the user's own under /tmp; LIS_TMPFS_LEDGER names another."""
    if os.environ.get("LIS_TMPFS_LEDGER"):
        return os.environ["LIS_TMPFS_LEDGER"]
    uid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    if os.path.isdir(runtime) and os.stat(runtime).st_uid == uid:
        folder = os.path.join(runtime, "lis-tui")
    else:
        folder = f"/tmp/lis-tui-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    st = os.lstat(folder)
    if st.st_uid != uid or st.st_mode & 0o077 or not os.path.isdir(folder) or os.path.islink(folder):
        raise SandboxError(f"{folder} is not a private folder of this user's (another user's, a link, or open to "
                           f"others): remove it (rm -r {folder}), or name another with LIS_TMPFS_LEDGER=PATH")
    return os.path.join(folder, "tmpfs-budget.json")


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): a pid reused later has another."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: str, entry: dict) -> bool:
    return pid.isdigit() and start_time(int(pid)) == entry.get("start")


def exchange(mine: dict | None, path: str | None = None, write: bool = True) -> dict[str, dict]:
    """Write this process's entry (None: remove it) and return every live process's, ours
    included, dropping those of dead processes (`write` False: only read, under a shared lock).
    SandboxError, in one line, for a corrupt ledger."""
    path = path or ledger_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        data = os.pread(fd, 1 << 20, 0)
        entries = _parse(data, path) if data.strip() else {}
        entries = {pid: entry for pid, entry in entries.items() if _alive(pid, entry)}
        if not write:
            return entries
        me = str(os.getpid())
        if mine is None:
            entries.pop(me, None)
        else:
            entries[me] = {**mine, "start": start_time(os.getpid())}
        text = json.dumps({"version": 1, "processes": entries}).encode()
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
        return entries
    finally:
        os.close(fd)


def _parse(data: bytes, path: str) -> dict[str, dict]:
    try:
        entries = json.loads(data)["processes"]
        if not all(isinstance(e, dict) and isinstance(e.get("use", 0), int) for e in entries.values()):
            raise ValueError("an entry is not a process's")
        return entries
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SandboxError(f"the sandboxes' memory ledger {path} is corrupt ({exc}): remove it (rm {path}); "
                           "running lis-tui processes write their share into a new one within a second") from None


def held(entries: dict[str, dict]) -> int:
    return sum(entry.get("use", 0) for entry in entries.values())
