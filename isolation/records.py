"""Per-sandbox scratch directories and the records that let a later start sweep up after a crash.

Each process that starts sandboxes owns one `<scratch>/<owner>.owner` file, flocked for as long as
it lives (one descriptor per process, none per sandbox). Each sandbox has a record,
`<scratch>/<id>.lock`, that holds the bwrap process group and names its owner. A record whose
owner's lock can be taken belongs to a dead owner: its process group is killed, and so is every
process that carries the record's marker (`lis-sandbox-<id>`) in its argv, as bwrap and pid 1 do
from their start: an owner killed before it wrote the group down left them unrecorded. Then the
scratch goes. A sweeper holds the dead owner's lock while it sweeps, so two never sweep one owner.

A closed sandbox's scratch is renamed to `.<id>.gone` at once and removed by a reaper thread, off
the caller's path (rmdir on a busy ext4 waits for its journal); the record stays until that is
done, so an owner that dies meanwhile leaves a record the sweep takes, `.gone` included. At
interpreter exit the reaper is waited for.

A process sweeps once, at its first start (sandbox/starting.py), and again when a start fails:
never per start, so a start costs the same with 10,000 sandboxes live as with none.
"""
from __future__ import annotations

import atexit
import contextlib
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
from typing import Iterator

from .idmap import sandbox_owner
from .rootfs.safe import remove_tree
from .spec import SandboxError

log = logging.getLogger(__name__)
NEW_RECORD_GRACE = 30.0
"""Seconds an unnamed record (`.ID.new`) is left to its maker before a sweep takes it as dead."""
# The directories a start makes in a scratch (layout.plan's folders, or the mount point of their
# tmpfs, which holds them), deepest first. Most sandboxes leave them empty, and removing one by
# name is one rmdir, where the walk costs a dozen calls.
_USUAL_LAYERS = ("rw", "testbed/output", "testbed/input", "testbed/documents", "testbed", "agent/output",
                 "agent/input", "agent/documents", "agent/scratch", "agent", "root/.local", "root", "upper",
                 "work/work", "work", "ws-upper", "ws-work/work", "ws-work", "empty")


def state_dir() -> Path:
    """$XDG_STATE_HOME/lis-tui (else ~/.local/state/lis-tui): scratch, sessions and logs live here."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "lis-tui"


def scratch_root() -> Path:
    """Where sandboxes keep their writable layers: on disk, not in a RAM-backed runtime dir."""
    if os.environ.get("LIS_SCRATCH"):
        return Path(os.environ["LIS_SCRATCH"])
    return state_dir() / "scratch"


_PGID = 16  # bytes at the start of a record for the process group; the owner's name follows


class Record:
    """The record and scratch directory of one live sandbox; it holds no descriptor. The directory
    is made only where something goes there (layers on disk, a CA bundle): a tmpfs holds the
    writable layers otherwise, mounted on one folder for all (layers_mount_point)."""

    def __init__(self, root: Path | None = None, made: bool = True) -> None:
        """`made`: on disk at once, the record and its directory; else its id and paths only,
        until make() and make_dir()."""
        self.root = root or scratch_root()
        self.id = secrets.token_hex(6)
        self.lock_path = self.root / f"{self.id}.lock"
        self.dir = self.root / self.id
        self.made = self.dir_made = False
        self._pgid: int | None = None  # as written
        if made:
            self.make_dir()

    def make(self, pgid: int | None = None) -> None:
        """The record, naming its owner and `pgid` (the sandbox's bwrap, once it runs), on disk;
        made already, the group is written into it."""
        if self.made:
            if pgid is not None and pgid != self._pgid:
                self._write_pgid(str(pgid))
                self._pgid = pgid
            return
        # Written before it has its name, so a sweep never finds it without its owner.
        making = self.root / f".{self.id}.new"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        owner = _owner(self.root)
        fd = os.open(making, flags, 0o600)
        try:
            os.write(fd, ("" if pgid is None else str(pgid)).ljust(_PGID - 1).encode() + b"\n" + owner.encode())
            os.rename(making, self.lock_path)
        except BaseException:  # a full disk: nothing of ours is left behind
            making.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.made, self._pgid = True, pgid

    def make_dir(self) -> Path:
        """The scratch directory, after the record that a sweep finds it by."""
        if not self.dir_made:
            self.make()
            self.dir.mkdir(mode=0o700)
            self.dir_made = True
        return self.dir

    @property
    def marker(self) -> str:
        """A word for the argv of this sandbox's processes, by which a sweep finds them."""
        return f"lis-sandbox-{self.id}"

    def _write_pgid(self, text: str) -> None:
        fd = os.open(self.lock_path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, text.ljust(_PGID - 1).encode(), 0)
        finally:
            os.close(fd)

    def release(self) -> None:
        """Remove the scratch and the record; the sandbox is already dead. The scratch leaves its
        name now and the disk soon after (see wait_released)."""
        if not self.made:
            return
        try:
            self._write_pgid("")  # no group to kill any more, should its number be reused
        except OSError:  # a full disk: the record is removed below all the same
            pass
        if not self.dir_made:  # nothing to remove but the record: at once
            self.lock_path.unlink(missing_ok=True)
            return
        gone = self.root / f".{self.id}.gone"
        try:
            os.rename(self.dir, gone)
        except FileNotFoundError:
            gone = None
        except OSError:  # cannot happen in a scratch of ours; remove it here, as it always was
            _remove_scratch(self.dir)
            gone = None
        _reaper().put((gone, self.lock_path))


_mount_points: set[Path] = set()  # layers_mount_point's, made


def layers_mount_point(root: Path | None = None) -> Path:
    """The folder every sandbox's writable layers' tmpfs is mounted on, each in its own mount
    namespace (the zygote mounts it there before bwrap builds anything, diskcap.on_tmpfs): one,
    empty on the host, made once, so that a start and a close make and remove no folder."""
    path = (root or scratch_root()) / "layers"
    if path not in _mount_points:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        _mount_points.add(path)
    return path


_owners: dict[Path, tuple[int, str, int]] = {}  # scratch root -> (pid, owner name, locked descriptor)
_owners_lock = threading.Lock()


def owner_file(root: Path | None = None) -> Path | None:
    """This process's owner lock in `root`, once it has started a sandbox there."""
    root = root or scratch_root()
    pid, name, _ = _owners.get(root, (0, "", -1))
    return root / f"{name}.owner" if pid == os.getpid() else None


def _owner(root: Path) -> str:
    """This process's owner name in `root`, its lock made and taken on first use (a forked child
    takes its own: the parent's lock, inherited, is the parent's)."""
    with _owners_lock:
        pid, name, _ = _owners.get(root, (0, "", -1))
        if pid == os.getpid():
            return name
        name = secrets.token_hex(6)
        making = root / f".{name}.owning"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(making, flags, 0o600)
        except FileNotFoundError:  # the first sandbox here (made on demand: one call less per start)
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(making, flags, 0o600)
        # Locked before it has its name, so a sweep never finds it unlocked while we live.
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(making, root / f"{name}.owner")
        if not _owners:  # registered before wait_released is, so it runs after it
            atexit.register(_drop_owner_files)
        _owners[root] = (os.getpid(), name, fd)
        return name


def _drop_owner_files() -> None:
    """At exit, once our scratches are removed: our owner files go too (a crash leaves them to a sweep)."""
    for root, (pid, name, _) in list(_owners.items()):
        if pid == os.getpid():
            with contextlib.suppress(OSError):
                if not any(_records_of(root, name)):
                    (root / f"{name}.owner").unlink()


def _records_of(root: Path, owner: str):
    for path in root.glob("*.lock"):
        with contextlib.suppress(OSError):
            if path.read_bytes()[_PGID:].decode(errors="replace").strip() == owner:
                yield path


def scratch_error(exc: OSError, making: bool = False) -> SandboxError | None:
    """The error a person sees when the scratch cannot be written (full disk, quota, read-only;
    any error while `making` the record: not a folder, not ours), with the fix; None otherwise."""
    if not making and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return None
    return SandboxError(f"cannot write the sandbox scratch in {scratch_root()}: {exc.strerror}. Fix: free "
                        "space there, or set LIS_SCRATCH to a folder of yours on a disk with room")


def _reap(jobs: queue.Queue) -> None:
    while True:
        gone, lock_path = jobs.get()
        try:
            if gone is not None:
                _remove_scratch(gone)
            if lock_path is not None:
                lock_path.unlink(missing_ok=True)
        except Exception as exc:  # noqa: BLE001 (the record stays: a sweep after our death takes it)
            log.warning("could not remove the scratch %s: %s", gone, exc)
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


def remove_later(path: Path) -> None:
    """remove_tree(path) on the thread that removes closed sandboxes' scratch (wait_released waits
    for it too): a kept session's old copy, which no one uses any more."""
    _reaper().put((path, None))


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
    owners: dict[str, int | None] = {}  # owner -> its lock, now ours (dead), or None (alive, or swept by another)
    kept: set[str] = set()  # dead owners with a leftover that could not be removed: their file stays
    # ".ID.new", ".NAME.owning": a maker that died before naming it; nothing ran yet. A young
    # one may be another process starting right now: taking it would pull it from under its maker.
    young = time.time() - NEW_RECORD_GRACE
    try:
        for path in [*root.glob("*.lock"), *root.glob(".*.new")]:
            try:
                with open(path, "rb") as f:
                    if path.suffix == ".new" and os.fstat(f.fileno()).st_mtime > young:
                        continue
                    text = f.read(_PGID + 64).decode(errors="replace")
                    owner = text[_PGID:].strip()
                    if not owner:  # a record of an older lis-tui, flocked by its owner itself
                        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # gone meanwhile, or an older owner that is alive
            if owner not in owners:
                owners[owner] = _take_if_dead(root, owner)
            if owners[owner] is None:
                continue  # its owner is alive
            if _sweep_record(root, path, text[:_PGID].strip()):
                swept += 1
            else:
                kept.add(owner)
        for path in root.glob("*.owner"):  # dead owners whose records are all gone
            if path.stem not in owners:
                owners[path.stem] = _take_if_dead(root, path.stem)
        for path in root.glob(".*.owning"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < young:
                    path.unlink()
    finally:
        for owner, fd in owners.items():
            if fd is not None and fd >= 0:
                if owner not in kept:
                    (root / f"{owner}.owner").unlink(missing_ok=True)
                os.close(fd)
    return swept


def _take_if_dead(root: Path, owner: str) -> int | None:
    """The owner's lock, taken (it is dead: ours to sweep), -1 when it left no lock (dead before
    it had one), or None when it lives or another sweep holds it."""
    if not owner:
        return -1
    try:
        fd = os.open(root / f"{owner}.owner", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _sweep_record(root: Path, path: Path, pgid: str) -> bool:
    """Kill what a dead owner's record names and remove its scratch and the record; False when a
    leftover could not be removed (one bad leftover must not stop every later start)."""
    if pgid.isdigit():
        _kill_group(int(pgid))
    record_id = path.name.strip(".").split(".")[0]
    _kill_marked(f"lis-sandbox-{record_id}".encode())
    try:
        remove_tree(root / record_id)
        remove_tree(root / f".{record_id}.gone")  # closed, its removal cut short
    except (OSError, SandboxError) as exc:
        log.warning("could not remove the leftover scratch %s: %s", root / record_id, exc)
        return False
    path.unlink(missing_ok=True)
    return True


def _kill_marked(marker: bytes) -> None:
    """SIGKILL every process of ours with `marker` as a whole word of its argv (a root caller's
    sandboxes run as its subordinate id: idmap.py)."""
    for pid, cmdline in processes_of({os.getuid(), sandbox_owner()[0]}):
        if marker in cmdline.split(b"\0"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # gone meanwhile


def processes_of(uids: set[int]) -> Iterator[tuple[int, bytes]]:
    """(pid, raw /proc/PID/cmdline) of every process whose uid is in `uids`; those gone meanwhile
    are left out."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid not in uids:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        yield int(entry.name), cmdline


def _kill_group(pgid: int) -> None:
    # The pgid could have been reused by an unrelated group: only kill a bwrap-led one.
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as f:
            if b"bwrap" not in f.read().split(b"\0")[0]:
                return
        os.killpg(pgid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
