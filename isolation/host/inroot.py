"""Read and write files of a running sandbox from the host, resolving paths as the sandbox would.

`openat2(RESOLVE_IN_ROOT)` on the sandbox's `/proc/PID/root` treats that directory as `/` for the
whole walk: absolute symlinks and `..` stay inside, and the sandbox's own mounts are crossed as
it sees them. RESOLVE_NO_MAGICLINKS refuses `/proc/N/root` and `/proc/N/fd/M` style links, the
only ones that could point out. Permissions are checked on the mode bits as for the sandbox's
root, which holds no capabilities: a host root reading or writing for it lends it nothing. No
process starts, where a joined `cat` costs ~6 ms of CPU.

The kernel needs openat2 (Linux 5.6); where it is missing or filtered (ENOSYS, EPERM from a
seccomp profile), these raise `InRootUnavailable` and the caller goes through a process.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import posixpath
import stat
import struct

from ..idmap import as_sandbox_root, sandbox_owner
from ..output import write_all

_SYS_OPENAT2 = 437  # the same number on every architecture (it is in the shared syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]


class InRootUnavailable(Exception):
    """This kernel (or its seccomp filter) has no openat2."""


class NotARegularFile(OSError):
    """A fifo, socket or device: never read or written for the sandbox (it could block forever)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


def read_in_root(root_fd: int, path: str, limit: int) -> bytes:
    """The bytes of regular file `path` under `root_fd`, at most `limit`."""
    fd = _open(root_fd, path, os.O_RDONLY)
    try:
        _check_file(fd, path, stat.S_IRUSR)
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_ends_in_root(root_fd: int, path: str, head: int, tail: int) -> tuple[bytes, int, bytes]:
    """The first `head` and last `tail` bytes of regular file `path` under `root_fd`, and how many
    lie between them (0: the first part is the whole file, and the last part is empty)."""
    fd = _open(root_fd, path, os.O_RDONLY)
    try:
        _check_file(fd, path, stat.S_IRUSR)
        size = os.fstat(fd).st_size
        if size <= head + tail:
            return os.pread(fd, head + tail, 0), 0, b""
        return os.pread(fd, head, 0), size - head - tail, os.pread(fd, tail, size - tail)
    finally:
        os.close(fd)


def write_in_root(root_fd: int, path: str, data: bytes, mode: int, exclusive: bool) -> None:
    """Write `data` to `path` under `root_fd`, creating missing parent directories. An existing
    regular file is rewritten in place (its mode, owner and hard links stay); a new one gets `mode`;
    `exclusive` refuses any existing path (FileExistsError), a symlink too."""
    with as_sandbox_root():
        _write_in_root(root_fd, path, data, mode, exclusive)


def _write_in_root(root_fd: int, path: str, data: bytes, mode: int, exclusive: bool) -> None:
    fd = None if exclusive else _open_existing(root_fd, path)
    created = fd is None
    if created:
        parent = _make_dirs(root_fd, posixpath.dirname(path) or "/")
        try:
            _check_dir(parent, path)
        finally:
            os.close(parent)
        # Without O_EXCL a dangling symlink is followed (inside the root) and its target made. A
        # file the sandbox slips in meanwhile is its own, so skipping the write check costs nothing.
        excl = os.O_EXCL if exclusive else 0
        fd = _open(root_fd, path, os.O_WRONLY | os.O_CREAT | excl, 0o600)
    try:
        _check_file(fd, path, 0 if created else stat.S_IWUSR)
        os.ftruncate(fd, 0)
        write_all(fd, data)
        if created:
            os.fchmod(fd, mode)  # after the write, so a read-only mode can be asked for
    finally:
        os.close(fd)


PTMX = (5, 2)  # major, minor of /dev/ptmx and of a devpts instance's ptmx
_TIOCSPTLCK, _TIOCGPTPEER = 0x40045431, 0x5441


def open_pty_in_root(root_fd: int) -> tuple[int, int]:
    """(master, slave) of a new pty from the sandbox's own devpts, so that the sandbox finds its
    terminal under /dev/pts (ttyname works). The sandbox cannot make device nodes, so a /dev/ptmx
    it replaced is a link or a plain file, refused by the device check."""
    with as_sandbox_root():  # the pty is the sandbox root's, as if it had opened it
        master = _open(root_fd, "/dev/ptmx", os.O_RDWR)
    try:
        st = os.fstat(master)
        if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != PTMX:
            raise NotARegularFile("/dev/ptmx")
        os.set_blocking(master, True)
        fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))  # unlockpt
        slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)  # no path walked
    except BaseException:
        os.close(master)
        raise
    return master, slave


def _open_existing(root_fd: int, path: str) -> int | None:
    try:
        return _open(root_fd, path, os.O_WRONLY)
    except FileNotFoundError:
        return None


def _open(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    # openat2 refuses any flag an O_PATH open ignores; others must not block on a fifo
    extra = os.O_CLOEXEC if flags & os.O_PATH else os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    how = struct.pack("QQQ", flags | extra, mode if flags & os.O_CREAT else 0,
                      _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall(_SYS_OPENAT2, root_fd, os.fsencode(path), how, len(how))
    if fd < 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM) and _unsupported(root_fd):
            raise InRootUnavailable(os.strerror(err))
        if err == errno.ENXIO:  # a fifo with no reader, or a socket, opened for writing
            raise NotARegularFile(path)
        if err == errno.EROFS:
            raise PermissionError(err, os.strerror(err), path)
        raise OSError(err, os.strerror(err), path)  # FileNotFoundError and friends by errno
    return fd


def _make_dirs(root_fd: int, path: str) -> int:
    """An O_PATH descriptor of directory `path`, made (mode 755) with its missing parents."""
    try:
        return _open(root_fd, path, os.O_PATH | os.O_DIRECTORY)
    except FileNotFoundError:
        if path in ("/", ""):
            raise
    parent = _make_dirs(root_fd, posixpath.dirname(path.rstrip("/")) or "/")
    try:
        _check_dir(parent, path)
        os.mkdir(posixpath.basename(path.rstrip("/")), 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile: fine, if it is a directory (the open below tells)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise PermissionError(exc.errno, exc.strerror, path) from None
        raise
    finally:
        os.close(parent)
    return _open(root_fd, path, os.O_PATH | os.O_DIRECTORY)


def _check_file(fd: int, path: str, bit: int) -> None:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(path)
    if bit and not _sandbox_may(st, bit):
        raise PermissionError(errno.EACCES, "Permission denied", path)


def _check_dir(dir_fd: int, path: str) -> None:
    """The sandbox may make entries in this directory: write and search permission."""
    st = os.fstat(dir_fd)
    if not (_sandbox_may(st, stat.S_IWUSR) and _sandbox_may(st, stat.S_IXUSR)):
        raise PermissionError(errno.EACCES, "Permission denied", path)


def _unsupported(root_fd: int) -> bool:
    """Whether openat2 itself is refused, rather than this path (EPERM also means "not allowed")."""
    how = struct.pack("QQQ", os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT)
    fd = _syscall(_SYS_OPENAT2, root_fd, b".", how, len(how))
    if fd >= 0:
        os.close(fd)
        return False
    return ctypes.get_errno() in (errno.ENOSYS, errno.EPERM)


def _sandbox_may(st: os.stat_result, user_bit: int) -> bool:
    """Whether the mode bits grant the sandbox's root `user_bit` (S_IRUSR, S_IWUSR or S_IXUSR, or
    the group or other bit of the same kind); its uid and gid 0 are our euid and egid (a root
    caller's subordinate ids: idmap.py)."""
    uid, gid = sandbox_owner()
    if st.st_uid == uid:
        return bool(st.st_mode & user_bit)
    if st.st_gid == gid:
        return bool(st.st_mode & (user_bit >> 3))
    return bool(st.st_mode & (user_bit >> 6))


# Where the kernel has no openat2, the sandbox's files are read and written by a command inside
# that follows the same rules; these are its scripts, and how its errors map back.
SHELL_READ = """\
if [ -d "$1" ]; then echo "Is a directory" >&2; exit 1; fi
if [ -e "$1" ] && [ ! -f "$1" ]; then echo "not a regular file" >&2; exit 1; fi
exec head -c "$2" -- "$1"
"""
SHELL_WRITE = """\
if [ "$3" = x ] && { [ -e "$1" ] || [ -L "$1" ]; }; then echo "File exists" >&2; exit 1; fi
if [ -d "$1" ]; then echo "Is a directory" >&2; exit 1; fi
if [ -e "$1" ]; then [ -f "$1" ] || { echo "not a regular file" >&2; exit 1; }; exec cat > "$1"; fi
[ -d "${1%/*}/" ] || mkdir -p -- "${1%/*}/" || exit 1
cat > "$1" && chmod "$2" -- "$1"
"""


def raise_shell_file_error(err: bytes, path: str) -> None:
    text = err.decode(errors="replace").strip()
    if "File exists" in text:
        raise FileExistsError(errno.EEXIST, "File exists", path)
    if "not a regular file" in text:
        raise NotARegularFile(path)
    if "No such file" in text:
        raise FileNotFoundError(2, "No such file or directory", path)
    if "Is a directory" in text:
        raise IsADirectoryError(21, "Is a directory", path)
    if "Permission denied" in text or "Read-only" in text:
        raise PermissionError(13, text or "Permission denied", path)
    raise OSError(5, text or "could not access file in sandbox", path)
