"""A kept session's writable layers: in the sandbox's budgeted tmpfs while it runs, on disk between runs.

While a kept session runs, its layers are in the layers' tmpfs like every other sandbox's
(diskcap.on_tmpfs): a write past --disk fails with ENOSPC from the kernel, and the memory budget
counts them (budget.py). They are copied in (`restore`) while bwrap's child waits for its layers,
before any overlay is mounted on them, and copied out (`save`) at close, once every process of the
sandbox is gone, into SAVED in the session's folder. With `disk_on` "disk" (or no tmpfs for the
layers) they stay in the session's folder itself, under the walk, as before (`to_disk`).

What overlayfs needs survives both copies: whiteouts (character devices 0/0, which overlayfs makes
in the sandbox's user namespace, and which Linux 5.8+ lets any user make), opaque directories and
overlayfs's other marks (user.overlay.* attributes: bwrap's overlay in a user namespace is mounted
with userxattr, so never trusted.*), modes, access and modification times, symlinks, fifos, and
hard links (up to MAX_LINKED linked files per copy; past that, copies). Set-uid and set-gid bits
are dropped, both ways: overlayfs needs neither, and for a root caller a saved file is root's
on disk, so a sandbox's `chmod u+s` on its own shell became a set-uid root copy of `sh` in the
session's folder (behind one 0700 folder); inside, no_new_privs makes them mean nothing anyway.
Owners: the sandbox maps one id, its uid 0, so every file of its layers is that id outside: ours,
or for a root caller its subordinate id in the tmpfs (`idmap.as_sandbox_root` makes each file) and
root's on disk, as the idmapped folders of a root caller's other sandboxes are (idmap.py).
Sockets are left out: nothing listens on them once the sandbox is gone.

Crash-safe: a close copies into NEW, syncs that file system and swaps NEW with SAVED in one
rename (RENAME_EXCHANGE), then moves the old copy aside for the scratch's removal thread
(records.remove_later); an interrupted or failed close leaves SAVED as it was, and the next open
removes what it left (`recover`). USAGE in SAVED holds the tmpfs's own count at close, so a
resume can refuse, before it starts, a session that its disk limit cannot hold any more.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import secrets
import stat
from pathlib import Path

from . import idmap, records
from .host.walk import chmod_at, data_extents, remove_tree, tree_usage
from .spec import DISK_PER_INODE, SandboxError

LAYERS = ("root", "testbed", "upper", "ws-upper", "agent")  # the writable layers, as layout.plan names them
WORK_DIRS = ("work", "ws-work")  # overlayfs's scratch: never kept (it empties them at each mount)
SAVED, NEW, OLD = "layers", "layers.new", "layers.old"  # in the session's folder
TRASH = "layers.gone-"  # + a token: a replaced copy, removed on another thread
USAGE = ".usage.json"  # in SAVED: no layer's name starts with a dot
MAX_LINKED = 256  # hard-linked files remembered per copy (a descriptor each)
_RENAME_EXCHANGE = 2
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_libc = ctypes.CDLL(None, use_errno=True)
_SET_ID = stat.S_ISUID | stat.S_ISGID
_trashed: set[str] = set()  # old copies this process is removing: not `recover`'s to take


def saved_layer(session_dir: Path, name: str) -> Path:
    """Where layer `name` of a closed session is on disk: in SAVED, or (kept on disk, or saved
    before the layers went to a tmpfs) in the session's folder itself."""
    return session_dir / SAVED / name if (session_dir / SAVED).is_dir() else session_dir / name


def prepare(session_dir: Path, on_tmpfs: bool) -> None:
    """At open, the session locked: what an interrupted close left is removed; then, for the disk,
    the saved layers go back where the walk and the mounts expect them. (For a tmpfs, the start
    refuses a session larger than its disk limit, check_fits, once the memory budget has spoken.)"""
    recover(session_dir)
    if not on_tmpfs:
        to_disk(session_dir)


def recover(session_dir: Path) -> None:
    """Finish or undo a close that was cut short: SAVED is the last complete copy."""
    if not (session_dir / SAVED).is_dir() and (session_dir / OLD).is_dir():
        os.rename(session_dir / OLD, session_dir / SAVED)  # the fallback swap stopped half-way
    remove_tree(session_dir / NEW)
    remove_tree(session_dir / OLD)
    for name in os.listdir(session_dir):
        if name.startswith(TRASH) and str(session_dir / name) not in _trashed:
            with contextlib.suppress(OSError):  # another process may be removing it just now
                remove_tree(session_dir / name)


def usage(session_dir: Path) -> tuple[int, int]:
    """(bytes, inodes) the session's layers take in a tmpfs: as counted at its last close, else
    (kept on disk until now) measured on disk, where a directory costs a block it does not in a tmpfs."""
    try:
        found = json.loads((session_dir / SAVED / USAGE).read_text())
        return int(found["bytes"]), int(found["inodes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = [tree_usage(session_dir / name) for name in LAYERS if (session_dir / name).is_dir()]
    return sum(used for used, _ in found), sum(count for _, count in found)


def check_fits(session_dir: Path, session: str, limits) -> None:
    """SandboxError, in one line with the fix, when the session holds more than `limits` give it."""
    used, inodes = usage(session_dir)
    cap = limits.inode_limit()
    if not limits.disk or (used <= limits.disk and (cap is None or inodes <= cap)):
        return
    need = max(used, inodes * DISK_PER_INODE if cap and inodes > cap else 0) * 5 // 4
    raise SandboxError(f"session {session} holds {_size(used)} in {inodes:,} files, more than this sandbox's disk "
                       f"({_size(limits.disk)}, {cap:,} files; less than asked when the memory budget is short): "
                       f"resume it with --disk {_size(need, up=True)} (or disk in [sandbox] of the config), or keep "
                       "its layers on disk (--disk-on disk)")


def to_disk(session_dir: Path) -> None:
    """Move the saved layers into the session's folder, where a sandbox with its layers on disk
    uses them (and the walk counts them). A layer there already is older than SAVED's: replaced."""
    saved = session_dir / SAVED
    if not saved.is_dir():
        return
    for name in os.listdir(saved):
        if not name.startswith("."):
            remove_tree(session_dir / name)
            os.rename(saved / name, session_dir / name)
    remove_tree(saved)


def restore(session_dir: Path, rw_fd: int) -> None:
    """Copy the session's layers into the empty tmpfs `rw_fd` (bwrap's child waits: nothing has
    mounted them yet). SandboxError, in one line, if they do not fit."""
    source = session_dir / SAVED if (session_dir / SAVED).is_dir() else session_dir
    names = [n for n in os.listdir(source) if not n.startswith(".")] if source != session_dir else \
        [n for n in LAYERS if (session_dir / n).is_dir()]
    if not names:
        return
    src, dst = os.open(source, _DIR), os.open(".", _DIR, dir_fd=rw_fd)
    try:
        _Copy(idmap.as_sandbox_root).run(src, dst, names)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise SandboxError(f"session {session_dir.name} does not fit in this sandbox's disk: resume it with a larger "
                           "--disk, or keep its layers on disk (--disk-on disk)") from None
    finally:
        os.close(src)
        os.close(dst)


def save(session_dir: Path, rw_fd: int) -> None:
    """Copy the layers out of tmpfs `rw_fd` into NEW, sync it, and swap it with SAVED; on any
    failure SAVED stays as it was (and NEW is removed)."""
    fs = os.fstatvfs(rw_fd)
    counted = {"bytes": (fs.f_blocks - fs.f_bfree) * fs.f_frsize, "inodes": fs.f_files - fs.f_ffree}
    new = session_dir / NEW
    remove_tree(new)
    os.mkdir(new, 0o700)
    try:
        src, dst = os.open(".", _DIR, dir_fd=rw_fd), os.open(new, _DIR)
        try:
            _Copy(contextlib.nullcontext).run(src, dst, [n for n in os.listdir(src) if n not in WORK_DIRS])
            out = os.open(USAGE, _NEW, 0o600, dir_fd=dst)
            try:
                os.write(out, json.dumps(counted).encode())
            finally:
                os.close(out)
            # One sync of the file system, not an fsync per file: a session holds thousands.
            if _libc.syncfs(dst) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"syncfs: {os.strerror(code)}")
        finally:
            os.close(src)
            os.close(dst)
    except BaseException:
        remove_tree(new)
        raise
    _swap(session_dir)
    for name in LAYERS + WORK_DIRS:  # the layout before SAVED, now superseded
        remove_tree(session_dir / name)


def unsaved(session_dir: Path, exc: Exception) -> str:
    """Why a close could not save the session, and the fix, in one line."""
    where = session_dir.parent
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = f"make room on the disk that holds {where} (or set LIS_SESSIONS to a folder elsewhere)"
    else:  # ENOTSUP: a file system without user xattrs (overlayfs's marks) or whiteouts
        fix = (f"keep sessions on a local disk that holds user xattrs (LIS_SESSIONS=DIR; now {where}), or resume "
               "it with its layers on disk (--disk-on disk)")
    return f"session {session_dir.name} was not saved ({exc}); it resumes as it was before this run. Fix: {fix}"


def _swap(session_dir: Path) -> None:
    """NEW becomes SAVED in one step; the old copy is removed after."""
    folder = os.open(session_dir, _DIR)
    try:
        if not (session_dir / SAVED).is_dir():
            os.rename(NEW, SAVED, src_dir_fd=folder, dst_dir_fd=folder)
        elif _libc.renameat2(folder, NEW.encode(), folder, SAVED.encode(), _RENAME_EXCHANGE) != 0:
            if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS):
                code = ctypes.get_errno()
                raise OSError(code, f"renameat2: {os.strerror(code)}")
            os.rename(SAVED, OLD, src_dir_fd=folder, dst_dir_fd=folder)  # a file system without the exchange:
            os.rename(NEW, SAVED, src_dir_fd=folder, dst_dir_fd=folder)  # `recover` finishes it after a crash
        os.fsync(folder)
        for name in (NEW, OLD):  # the old copy: out of the way now, removed on another thread (seconds for
            trash = TRASH + secrets.token_hex(4)  # thousands of files, which the close need not wait for)
            with contextlib.suppress(FileNotFoundError):
                os.rename(name, trash, src_dir_fd=folder, dst_dir_fd=folder)
                _trashed.add(str(session_dir / trash))
                records.remove_later(session_dir / trash)
    finally:
        os.close(folder)


class _Copy:
    """One tree copy between two directory descriptors, without recursion (a tree may be deep),
    following no link; `creating` wraps each call that makes a file (as whom it is made)."""

    def __init__(self, creating) -> None:
        self.creating = creating
        self.linked: dict[tuple[int, int], int] = {}  # (dev, ino) of a hard-linked source -> its copy (O_PATH)
        self.stack: list[list] = []  # [src fd, dst fd, names left, the directory's stat, its mode to give back]

    def run(self, src: int, dst: int, names: list[str]) -> None:
        self.stack.append([os.dup(src), os.dup(dst), sorted(names, reverse=True), None, None])
        try:
            while self.stack:
                frame = self.stack[-1]
                if frame[2]:
                    self.entry(frame[0], frame[1], frame[2].pop())
                else:
                    self.leave(*self.stack.pop())
        finally:
            for frame in self.stack:
                os.close(frame[0])
                os.close(frame[1])
            for fd in self.linked.values():
                os.close(fd)

    def entry(self, src: int, dst: int, name: str) -> None:
        st = os.lstat(name, dir_fd=src)
        mode, times = stat.S_IMODE(st.st_mode) & ~_SET_ID, (st.st_atime_ns, st.st_mtime_ns)
        if stat.S_ISDIR(st.st_mode):
            shut = self.open_up(src, name, st, 0o500)
            sub = os.open(name, _DIR, dir_fd=src)
            try:
                with self.creating():
                    os.mkdir(name, 0o700, dir_fd=dst)  # its own mode once it is filled
                    out = os.open(name, _DIR, dir_fd=dst)
            except BaseException:
                os.close(sub)
                raise
            self.stack.append([sub, out, sorted(os.listdir(sub), reverse=True), st, shut])
            _copy_xattrs(sub, out)
        elif stat.S_ISREG(st.st_mode):
            self.file(src, dst, name, st)
        else:
            with self.creating():
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
                elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # overlayfs's whiteout
                    os.mknod(name, stat.S_IFCHR | mode, 0, dir_fd=dst)
                elif stat.S_ISFIFO(st.st_mode):
                    os.mkfifo(name, 0o600, dir_fd=dst)
                else:
                    return  # a socket: nothing listens on it any more; no other device can be made inside
            if stat.S_ISFIFO(st.st_mode):
                os.chmod(name, mode, dir_fd=dst)
            os.utime(name, ns=times, dir_fd=dst, follow_symlinks=False)

    def file(self, src: int, dst: int, name: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key in self.linked:
            with self.creating():
                os.link(f"/proc/self/fd/{self.linked[key]}", name, dst_dir_fd=dst)
            return
        shut = self.open_up(src, name, st, 0o400)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
        try:
            if shut is not None:
                os.fchmod(fd, shut)
            with self.creating():
                out = os.open(name, _NEW, 0o600, dir_fd=dst)
            try:
                _copy_data(fd, out)
                _copy_xattrs(fd, out)
                os.fchmod(out, stat.S_IMODE(st.st_mode) & ~_SET_ID)
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(out)
        finally:
            os.close(fd)
        if st.st_nlink > 1 and len(self.linked) < MAX_LINKED:
            self.linked[key] = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst)

    def leave(self, src: int, dst: int, _names, st: os.stat_result | None, shut: int | None) -> None:
        try:
            if shut is not None:
                os.fchmod(src, shut)
            if st is not None:  # not the top, which is the tmpfs's root or NEW
                os.fchmod(dst, stat.S_IMODE(st.st_mode) & ~_SET_ID)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(src)
            os.close(dst)

    @staticmethod
    def open_up(src: int, name: str, st: os.stat_result, need: int) -> int | None:
        """A file or directory whose mode shuts its owner out (a sandbox's chmod 000) is opened up
        for the copy (ours: the sandbox's files are our uid's); its mode, to give back, else None.
        Root reads it as it is."""
        if st.st_mode & need == need or os.geteuid() == 0:
            return None
        chmod_at(src, name, stat.S_IMODE(st.st_mode) | need)
        return stat.S_IMODE(st.st_mode)


def _copy_data(src: int, out: int) -> None:
    """The data of `src` into empty `out` by the kernel (sendfile, no copy through Python), each
    extent of data at its offset, holes left holes."""
    size = os.fstat(src).st_size
    for start, end in data_extents(src, size):
        os.lseek(out, start, os.SEEK_SET)
        while start < end:
            sent = os.sendfile(out, src, start, end - start)
            if not sent:  # it shrank meanwhile (nothing writes to it: the sandbox is gone)
                break
            start += sent
    os.ftruncate(out, size)


def _copy_xattrs(src: int, dst: int) -> None:
    """user.* attributes: overlayfs's marks (opaque, origin, impure) and whatever the sandbox set."""
    for key in os.listxattr(src):
        if key.startswith("user."):
            os.setxattr(dst, key, os.getxattr(src, key))


def _size(n: int, up: bool = False) -> str:
    """"20M", "1.5G"; `up`: rounded up to a whole MiB, as --disk takes it."""
    mib = -(-n // (1 << 20)) if up else n / (1 << 20)
    return f"{mib / 1024:.1f}G" if mib >= 1024 else f"{mib:.0f}M"
