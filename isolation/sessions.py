"""Kept sandboxes: their writable layers and spec live on under $XDG_STATE_HOME/lis-tui/sessions/ID.

A session is locked while a sandbox uses it (two sandboxes writing one overlay upper would corrupt it).
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from . import records
from .rootfs.safe import tree_size
from .spec import Limits, SandboxError, SandboxSpec

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HOST = "host.json"  # what a session knows of its workspace as it started (isolation.changes.baseline)


def sessions_root() -> Path:
    if os.environ.get("LIS_SESSIONS"):
        return Path(os.environ["LIS_SESSIONS"])
    return records.state_dir() / "sessions"


def new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def check_id(session: str) -> str:
    if not _ID.fullmatch(session):
        raise SandboxError(f"session id {session!r} is not valid: use letters, digits, '.', '_' and '-' "
                           "(at most 64), starting with a letter or digit")
    return session


@dataclass(frozen=True)
class SessionInfo:
    """One kept session, as `lis-tui sessions list` shows it."""

    id: str
    path: Path
    rootfs: str
    workspace: str | None
    created: float
    last_used: float
    size: int
    in_use: bool


class Session:
    """A session directory opened, and locked, by one sandbox."""

    def __init__(self, session: str, root: Path | None = None) -> None:
        self.id = check_id(session)
        self.dir = (root or sessions_root()) / self.id
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise SandboxError(f"session {self.id} is in use by another sandbox; close that one first, "
                               "or start a new session") from None

    def load_spec(self) -> SandboxSpec | None:
        return load_spec(self.dir)

    def created_ns(self) -> int:
        """When this session was first opened, as the kernel stamps ctimes: its lock file's, made then
        and never changed since."""
        return os.fstat(self._fd).st_ctime_ns

    def save(self, spec: SandboxSpec, host: dict | None = None) -> None:
        """Its spec, and at its first start what it knows of its workspace (`host`: a
        changes.baseline.Baseline's record, saved again at each close: save_host)."""
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(spec).items()}
        _write_json(self.dir / "spec.json", data)
        if host is not None and not (self.dir / HOST).exists():
            self.save_host(host)

    def save_host(self, host: dict) -> None:
        _write_json(self.dir / HOST, host)

    def host(self) -> dict | None:
        """What it knows of its workspace (Baseline.record); a session an earlier version kept has
        the table of every entry it noted at its start instead."""
        try:
            return json.loads((self.dir / HOST).read_text())
        except FileNotFoundError:
            pass
        try:
            return {"table": json.loads((self.dir / "snapshot.json").read_text())}
        except FileNotFoundError:
            return None

    def release(self) -> None:
        os.utime(self.dir)
        os.close(self._fd)


def load_spec(directory: Path) -> SandboxSpec | None:
    try:
        data = json.loads((directory / "spec.json").read_text())
    except FileNotFoundError:
        return None
    data["limits"] = Limits(**data.get("limits", {}))
    data.pop("credentials", None)  # read from the config at every start, not kept with the session
    data.pop("held_back", None)  # likewise
    for key in ("allow_hosts", "deny_hosts"):  # JSON has lists; the spec holds tuples
        data[key] = tuple(data.get(key, ()))
    return SandboxSpec(**{k: v for k, v in data.items() if k in SandboxSpec.__dataclass_fields__})


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _in_use(directory: Path) -> bool:
    try:
        fd = os.open(directory / "lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def list_sessions(root: Path | None = None) -> list[SessionInfo]:
    root = root or sessions_root()
    found = []
    for entry in sorted(root.iterdir() if root.is_dir() else []):
        spec = load_spec(entry) if entry.is_dir() else None
        if spec is None:
            continue
        stat = entry.stat()
        created = (entry / "spec.json").stat().st_mtime
        found.append(SessionInfo(entry.name, entry, spec.rootfs, str(spec.workspace) if spec.workspace else None,
                                 created, stat.st_mtime, tree_size(entry), _in_use(entry)))
    return found


def remove(session: str, root: Path | None = None) -> None:
    directory = (root or sessions_root()) / check_id(session)
    if not directory.is_dir():
        known = ", ".join(s.id for s in list_sessions(root)) or "none"
        raise SandboxError(f"no session {session!r} (sessions: {known})")
    if _in_use(directory):
        raise SandboxError(f"session {session} is in use by a running sandbox; close it first")
    records.wait_released()  # this process's thread may be removing an old copy of its layers in it
    records.remove_tree(directory)


def gc(older_than: float, root: Path | None = None) -> tuple[list[str], int]:
    """Remove sessions unused for `older_than` seconds and sweep crash leftovers."""
    cutoff = time.time() - older_than
    removed = [s.id for s in list_sessions(root) if not s.in_use and s.last_used < cutoff]
    records.wait_released()
    for session in removed:
        records.remove_tree((root or sessions_root()) / session)
    return removed, records.sweep()
