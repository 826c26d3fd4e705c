"""Per-sandbox scratch directories and the lock records that let a later start sweep up after a crash.

Each sandbox owns `<scratch>/<id>.lock`, flocked by the owning process for as long as it lives and
holding the bwrap process group. A lock that can be taken belongs to a dead owner: its process group
is killed, and so is every process that carries the record's marker (`lis-sandbox-<id>`) in its
argv, as bwrap and pid 1 do from their start: an owner killed before it wrote the group down left
them unrecorded. Then the scratch goes.
"""
from __future__ import annotations

import fcntl
import logging
import os
import secrets
import signal
from pathlib import Path

from .rootfs.safe import remove_tree
from .spec import SandboxError

log = logging.getLogger(__name__)



def state_dir() -> Path:
    """$XDG_STATE_HOME/lis-tui (else ~/.local/state/lis-tui): scratch, sessions and logs live here."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "lis-tui"


def scratch_root() -> Path:
    """Where sandboxes keep their writable layers: on disk, not in a RAM-backed runtime dir."""
    if os.environ.get("LIS_SCRATCH"):
        return Path(os.environ["LIS_SCRATCH"])
    return state_dir() / "scratch"


class Record:
    """The lock file and scratch directory of one live sandbox."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or scratch_root()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.id = secrets.token_hex(6)
        self.lock_path = self.root / f"{self.id}.lock"
        # Locked before it has its name, so a sweep never finds it unlocked while we live.
        making = self.root / f".{self.id}.new"
        self._fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.rename(making, self.lock_path)
        self.dir = self.root / self.id
        self.dir.mkdir(mode=0o700)

    @property
    def marker(self) -> str:
        """A word for the argv of this sandbox's processes, by which a sweep finds them."""
        return f"lis-sandbox-{self.id}"

    def set_pgid(self, pgid: int) -> None:
        os.pwrite(self._fd, f"{pgid}\n".encode(), 0)

    def release(self) -> None:
        """Remove the scratch and the record; the sandbox is already dead."""
        remove_tree(self.dir)
        self.lock_path.unlink(missing_ok=True)
        os.close(self._fd)


def sweep(root: Path | None = None) -> int:
    """Kill and remove what crashed owners left behind; returns how many records were swept."""
    root = root or scratch_root()
    swept = 0
    # ".ID.new": an owner that died between making its record and naming it; nothing ran yet.
    for lock_path in [*root.glob("*.lock"), *root.glob(".*.new")]:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its owner is alive
        try:
            text = os.pread(fd, 64, 0).decode().strip()
            if text.isdigit():
                _kill_group(int(text))
            record_id = lock_path.name.strip(".").split(".")[0]
            _kill_marked(f"lis-sandbox-{record_id}".encode())
            try:
                remove_tree(root / record_id)
            except (OSError, SandboxError) as exc:  # one bad leftover must not stop every later start
                log.warning("could not remove the leftover scratch %s: %s", root / record_id, exc)
                continue
            lock_path.unlink(missing_ok=True)
            swept += 1
        finally:
            os.close(fd)
    return swept


def _kill_marked(marker: bytes) -> None:
    """SIGKILL every process of ours with `marker` as a whole word of its argv."""
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if marker in f.read().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass  # gone meanwhile


def _kill_group(pgid: int) -> None:
    # The pgid could have been reused by an unrelated group: only kill a bwrap-led one.
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as f:
            if b"bwrap" not in f.read().split(b"\0")[0]:
                return
        os.killpg(pgid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
