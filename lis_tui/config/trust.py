"""Project config trust: a folder's `lis-tui.toml` is read only once the user has trusted it.

A sandbox over a project can write `lis-tui.toml` into it, and applying its changes puts the file
on the host; read as is, it could send the user's API key to a server of the sandbox's choosing or
widen the next sandbox. So `lis-tui trust DIR` records the file's real path and the sha256 of its
bytes in `$XDG_STATE_HOME/lis-tui/trusted.json` (0600, replaced atomically), and a file whose path
or bytes differ from every record is ignored whole (`check`). The bytes hashed are the bytes parsed.
The user's own `~/.config/lis-tui/config.toml` needs no trust: a sandbox never sees it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import stat
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from lis_tui.config.toml_text import ConfigError

PROJECT_FILE = "lis-tui.toml"
"""The per-folder config file; lis-tui reads it from the directory it starts in, never a parent's."""
MAX_BYTES = 1 << 20
"""A config file larger than this is refused rather than read."""
STORE_NAME = "trusted.json"


@dataclass(frozen=True)
class FileTrust:
    """What lis-tui makes of one project config file."""

    path: Path
    """The file as found (the directory as given, plus `lis-tui.toml`)."""
    real: str
    """Its real path: the directory resolved, the file itself never a link."""
    state: str
    """"trusted", or why not: "new", "changed", "moved", "symlink", "not a regular file",
    "too large", "not UTF-8", "not yours", "writable by others", or an OS error's words."""
    sha256: str = ""
    text: str = ""
    """The bytes read and hashed, as text; parse these, never the file again."""
    was: str = ""
    """For "moved": where the same bytes were trusted."""

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"

    def why(self) -> str:
        """Why the file is not used, in words."""
        return {
            "new": "not trusted; it may come from a sandbox",
            "changed": "changed since it was trusted",
            "moved": f"trusted at {self.was}, not here",
            "symlink": "a symlink; lis-tui reads only a regular file",
            "not a regular file": "not a regular file",
            "too large": f"larger than {MAX_BYTES >> 10} KiB",
            "not yours": "owned by another user",
            "writable by others": "writable by other users",
        }.get(self.state, self.state)

    def fix(self) -> str:
        """What to do so the file is used (paths quoted for a shell)."""
        directory, path = shlex.quote(os.path.dirname(self.real)), shlex.quote(self.real)
        then = f"then: lis-tui trust {directory}"
        if self.state == "symlink":
            return f"replace it with a regular file (cp --remove-destination \"$(readlink -f {path})\" {path}), " \
                   f"review it, {then}"
        if self.state == "not yours":
            return f"copy it into a file of your own, review it, {then}"
        if self.state == "writable by others":
            return f"run chmod go-w {path}, review it, {then}"
        if self.state in ("new", "changed", "moved"):
            return f"review it, {then}"
        return f"make it a small UTF-8 regular file of your own (or remove it), {then}"

    def warning(self) -> str:
        """The one line shown when the file is ignored."""
        return f"lis-tui: ignoring {self.path} ({self.why()}). {self.fix()[:1].upper()}{self.fix()[1:]}"


def store_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/lis-tui/trusted.json`: the same state directory as scratch and sessions."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "lis-tui" / STORE_NAME


def read_store(env: Mapping[str, str] | None = None) -> dict[str, dict]:
    """Real path -> {"sha256", "trusted_at"}; {} when there is no store; ConfigError if it is unreadable."""
    path = store_path(env)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise _corrupt(path, exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _corrupt(path, "not a regular file")
        raw = f.read(MAX_BYTES + 1)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _corrupt(path, f"not JSON: {exc}") from None
    records = data.get("trusted") if isinstance(data, dict) else None
    if not isinstance(records, dict) or not all(
            isinstance(r, dict) and isinstance(r.get("sha256"), str) for r in records.values()):
        raise _corrupt(path, 'not a {"trusted": {PATH: {"sha256": ...}}} table')
    return records


def _corrupt(path: Path, why: str) -> ConfigError:
    return ConfigError(f"the trust store is unreadable ({why}); no project config is used until it is "
                       f"fixed: move it away (mv {path} {path}.bad), then trust your folders again with "
                       "lis-tui trust DIR", path=path)


def check(directory: Path | str, env: Mapping[str, str] | None = None) -> FileTrust | None:
    """The project config file in `directory` and whether it may be used; None when there is none."""
    found = _read(Path(directory))
    if found is None or found.state != "read":
        return found
    records = read_store(env)
    record = records.get(found.real)
    if record and record["sha256"] == found.sha256:
        state, was = "trusted", ""
    elif record:
        state, was = "changed", ""
    else:
        was = next((p for p, r in records.items() if r["sha256"] == found.sha256), "")
        state = "moved" if was else "new"
    return FileTrust(found.path, found.real, state, found.sha256, found.text, was)


def _read(directory: Path) -> FileTrust | None:
    """Open `directory`/lis-tui.toml without following a link or blocking on a fifo, and hash it."""
    path = directory / PROJECT_FILE
    real = os.path.join(os.path.realpath(directory), PROJECT_FILE)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(real):
            return FileTrust(path, real, "symlink")
        return FileTrust(path, real, exc.strerror or "unreadable")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return FileTrust(path, real, "not a regular file")
        if st.st_uid != os.geteuid():
            return FileTrust(path, real, "not yours")
        if st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != os.getegid()):
            return FileTrust(path, real, "writable by others")
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        return FileTrust(path, real, "too large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return FileTrust(path, real, "not UTF-8")
    return FileTrust(path, real, "read", hashlib.sha256(raw).hexdigest(), text)


_warned: set[tuple[str, str, str]] = set()


def warn(found: FileTrust) -> None:
    """Say once per process, on stderr, that `found` is ignored and how to accept it."""
    key = (found.real, found.state, found.sha256)
    if key not in _warned:
        _warned.add(key)
        from tools.terminal_text import safe_terminal_text  # noqa: PLC0415 (a path the sandbox may have named)

        print(safe_terminal_text(found.warning()), file=sys.stderr, flush=True)


# -- changing the store ----------------------------------------------------------------------------

def trust(directory: Path | str, env: Mapping[str, str] | None = None,
          validate: Callable[[FileTrust], None] | None = None) -> FileTrust:
    """Record `directory`'s config file as trusted; ConfigError (with the fix) if it cannot be.
    `validate` sees the bytes that will be recorded first, and may refuse them by raising."""
    found = _read(Path(directory))
    if found is None:
        note = parent_note(Path(directory))
        raise ConfigError(f"no {PROJECT_FILE} in {directory}" + (f"; {note}" if note else ""))
    if found.state != "read":
        raise ConfigError(f"cannot trust it ({found.why()}): {found.fix()}", path=found.path)
    if validate is not None:
        validate(found)
    import datetime  # noqa: PLC0415 (only when a folder is trusted)

    with _store_locked(env) as records:
        records[found.real] = {"sha256": found.sha256,
                               "trusted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                                   timespec="seconds")}
    return FileTrust(found.path, found.real, "trusted", found.sha256, found.text)


def revoke(directory: Path | str, env: Mapping[str, str] | None = None) -> str | None:
    """Forget `directory`'s config file; the real path forgotten, or None if it was not trusted."""
    real = os.path.join(os.path.realpath(directory), PROJECT_FILE)
    with _store_locked(env) as records:
        return real if records.pop(real, None) is not None else None


@contextmanager
def _store_locked(env: Mapping[str, str] | None) -> Iterator[dict[str, dict]]:
    """The records, for changing under a lock; written back atomically (0600) when the block ends."""
    path = store_path(env)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = os.open(path.with_name(".trusted.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = read_store(env)
        yield records
        fd, tmp = tempfile.mkstemp(prefix=".trusted.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "trusted": records}, f, indent=1, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        os.close(lock)


def parent_note(directory: Path) -> str:
    """A note naming the nearest parent's lis-tui.toml, which lis-tui never reads, or ''."""
    for parent in Path(os.path.realpath(directory)).parents:
        if os.path.lexists(parent / PROJECT_FILE):
            return (f"{parent / PROJECT_FILE} is in a parent folder and lis-tui never reads a parent's "
                    f"file: run lis-tui from {parent}, or copy the file here and trust it")
    return ""
