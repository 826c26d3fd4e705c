"""The ledger of the memory budget (budget.py): what each lis-tui process's sandboxes hold.

One small JSON file per user, in a folder of the user's own, locked with flock: lis-tui/ in the
runtime directory ($XDG_RUNTIME_DIR, else /run/user/UID where it is the user's: memory, gone at
logout), else lis-tui/ledger/ in the state directory ($XDG_STATE_HOME, ~/.local/state); never a
name in a shared folder such as /tmp, where another local user could make it first and stop
every start. The folder is made 0700 and must be the user's, no link, and writable by no one
else.

Each process writes its own entry (its pid and start time, and what its sandboxes' tmpfs hold) on
every pass of its budget thread and removes it when it has none; an entry whose process is gone
(pid dead, or reused: another start time) is dropped by whoever reads it, so a crashed process's
share is freed at the next read. A file that is not such JSON (a write cut short), or an entry
that is not a share (a negative one), is ignored with a note in the log, and the next write
replaces it: refusing every start over it would stop the user's work for a file that heals
itself within a pass.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat

from ..spec import SandboxError

log = logging.getLogger(__name__)


def ledger_path() -> str:
    """The user's ledger (see the module's doc); LIS_TMPFS_LEDGER names another."""
    if os.environ.get("LIS_TMPFS_LEDGER"):
        return os.environ["LIS_TMPFS_LEDGER"]
    uid = os.geteuid()
    for runtime in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        with contextlib.suppress(OSError):
            if runtime and os.stat(runtime).st_uid == uid:
                folder = os.path.join(runtime, "lis-tui")
                break
    else:
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        folder = os.path.join(state, "lis-tui", "ledger")  # a folder of its own: lis-tui/ has the umask's mode
    with contextlib.suppress(FileExistsError):
        os.makedirs(folder, 0o700)
    st = os.lstat(folder)
    if st.st_uid != uid or st.st_mode & 0o022 or not stat.S_ISDIR(st.st_mode):  # a link is no directory to lstat
        raise SandboxError(f"{folder}, the memory ledger's folder, is not this user's alone (another user's, a link, or "
                           f"writable by others): remove it (rm -r {folder}) or chmod go-w {folder}, or name another "
                           "ledger with LIS_TMPFS_LEDGER=PATH")
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
    included, dropping those of dead processes and what is no process's share (`write` False: only
    read, under a shared lock). SandboxError, in one line, for a folder that is not the user's."""
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
    """The processes' entries; what is not one is left out, with a note (see the module's doc)."""
    try:
        entries = json.loads(data)["processes"]
        if not isinstance(entries, dict):
            raise TypeError("its processes are not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("the sandboxes' memory ledger %s is not readable (%s): ignored; lis-tui processes write their "
                    "shares into it anew within a second", path, exc)
        return {}
    kept = {pid: e for pid, e in entries.items() if isinstance(e, dict) and _count(e.get("use", 0))
            and _count(e.get("sandboxes", 0))}
    if len(kept) < len(entries):
        log.warning("the sandboxes' memory ledger %s has entries that are no process's share (%s): ignored", path,
                    ", ".join(sorted(set(entries) - set(kept))))
    return kept


def _count(value) -> bool:
    return type(value) is int and value >= 0


def held(entries: dict[str, dict]) -> int:
    return sum(entry.get("use", 0) for entry in entries.values())
