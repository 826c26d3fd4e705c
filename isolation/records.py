"""Per-sandbox scratch directories and the lock records that let a later start sweep up after a crash.

Each sandbox owns `<scratch>/<id>.lock`, flocked by the owning process for as long as it lives and
holding the bwrap process group. A lock that can be taken belongs to a dead owner: its process group
is killed, and so is every process that carries the record's marker (`lis-sandbox-<id>`) in its
argv, as bwrap and pid 1 do from their start: an owner killed before it wrote the group down left
them unrecorded. Then the scratch goes.

A closed sandbox's scratch is renamed to `.<id>.gone` at once and removed by a reaper thread, off
the caller's path (rmdir on a busy ext4 waits for its journal); the record stays locked until that
is done, so an owner that dies meanwhile leaves a record the sweep takes, `.gone` included. At
interpreter exit the reaper is waited for.
"""
from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import queue
import secrets
import signal
import threading
import time
from pathlib import Path

from .rootfs.safe import remove_tree
from .spec import SandboxError

log = logging.getLogger(__name__)
NEW_RECORD_GRACE = 30.0
"""Seconds an unnamed record (`.ID.new`) is left to its maker before a sweep takes it as dead."""
# The directories a start makes in a scratch (layout.plan), deepest first. Most sandboxes leave
# them empty, and removing one by name is one rmdir, where the walk costs a dozen calls.
_USUAL_LAYERS = ("testbed/output", "testbed/input", "testbed/documents", "testbed", "root", "upper", "work/work",
                 "work", "ws-upper", "ws-work/work", "ws-work", "empty")


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
        self.id = secrets.token_hex(6)
        self.lock_path = self.root / f"{self.id}.lock"
        # Locked before it has its name, so a sweep never finds it unlocked while we live.
        making = self.root / f".{self.id}.new"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            self._fd = os.open(making, flags, 0o600)
        except FileNotFoundError:  # the first sandbox here (made on demand: one call less per start)
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(making, flags, 0o600)
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
        """Remove the scratch and the record; the sandbox is already dead. The scratch leaves its
        name now and the disk soon after (see wait_released)."""
        try:
            os.pwrite(self._fd, b" " * 16, 0)  # no group to kill any more, should its number be reused
        except OSError:  # a full disk: the record is removed below all the same
            pass
        gone = self.root / f".{self.id}.gone"
        try:
            os.rename(self.dir, gone)
        except FileNotFoundError:
            gone = None
        except OSError:  # cannot happen in a scratch of ours; remove it here, as it always was
            _remove_scratch(self.dir)
            gone = None
        _reaper().put((gone, self.lock_path, self._fd))

def scratch_error(exc: OSError, making: bool = False) -> SandboxError | None:
    """The error a person sees when the scratch cannot be written (full disk, quota, read-only;
    any error while `making` the record: not a folder, not ours), with the fix; None otherwise."""
    if not making and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return None
    return SandboxError(f"cannot write the sandbox scratch in {scratch_root()}: {exc.strerror}. Fix: free "
                        "space there, or set LIS_SCRATCH to a folder of yours on a disk with room")


def _reap(jobs: queue.Queue) -> None:
    while True:
        gone, lock_path, fd = jobs.get()
        try:
            if gone is not None:
                _remove_scratch(gone)
            lock_path.unlink(missing_ok=True)
        except Exception as exc:  # noqa: BLE001 (the record stays: the next sweep tries again)
            log.warning("could not remove the scratch %s: %s", gone, exc)
        finally:
            try:
                os.close(fd)  # unlocks the record
            finally:
                jobs.task_done()


_jobs: queue.Queue | None = None
_jobs_pid = 0  # the process whose thread serves _jobs: a forked child inherits both, not the thread
_exit_hook = False
_jobs_lock = threading.Lock()


def _reaper() -> queue.Queue:
    global _jobs, _jobs_pid, _exit_hook
    with _jobs_lock:
        if _jobs is None or _jobs_pid != os.getpid():  # a forked child has no thread of ours
            _jobs, _jobs_pid = queue.Queue(), os.getpid()
            threading.Thread(target=_reap, args=(_jobs,), name="lis-scratch-reaper", daemon=True).start()
            if not _exit_hook:  # once (a child inherits it): wait_released waits only for its own process
                atexit.register(wait_released)
                _exit_hook = True
        return _jobs


def wait_released() -> None:
    """Return once every closed sandbox's scratch of this process is removed from disk."""
    with _jobs_lock:
        jobs = _jobs if _jobs_pid == os.getpid() else None
    if jobs is not None:
        jobs.join()


def _remove_scratch(path: Path) -> None:
    """remove_tree(path), with a fast way for the usual case: the directories the start made, empty.

    Only once every process of the sandbox is dead, so nothing changes the tree meanwhile. Names
    resolve through directories the sandbox never had (the scratch) or could not replace (its
    mount points, testbed and root), and rmdir never follows a link the sandbox left in their place."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError:
        return remove_tree(path)
    try:
        for name in _USUAL_LAYERS:
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                pass  # missing, not empty, not a directory: the walk below takes what is left
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        remove_tree(path)


def sweep(root: Path | None = None) -> int:
    """Kill and remove what crashed owners left behind; returns how many records were swept."""
    root = root or scratch_root()
    swept = 0
    # ".ID.new": an owner that died between making its record and naming it; nothing ran yet.
    # A young one may be an owner between its open and its flock (another process starting a
    # sandbox right now): taking its lock first would pull the record from under it.
    young = time.time() - NEW_RECORD_GRACE
    for lock_path in [*root.glob("*.lock"), *root.glob(".*.new")]:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        if lock_path.suffix == ".new" and os.fstat(fd).st_mtime > young:
            os.close(fd)
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
                remove_tree(root / f".{record_id}.gone")  # closed, its removal cut short
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
