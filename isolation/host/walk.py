"""Host-side work on trees a sandbox made: walked through directory descriptors, never by path.

Everything in a sandbox's writable layers and under its /testbed was chosen by a hostile model:
names, depth, links, fifos, and changes made while we read. One mechanism serves review, apply,
export, copy-out and scratch removal:
- A `Cursor` is one directory descriptor that moves down by a single name, opened with
  O_NOFOLLOW|O_DIRECTORY (a link is never followed, a fifo never opened), and back up by `..`,
  checked against the (st_dev, st_ino) the level had on the way down: a directory the sandbox
  moves meanwhile stops the walk (TreeChanged) instead of leading somewhere else.
- A `Walk` is a loop over a list of names per level: no recursion limit, and as it carries
  descriptors down rather than path strings, no depth gives ENAMETOOLONG. A cursor holds one
  descriptor however deep it is, so no tree runs into the open-files limit either.
- Only single names are opened below a root, so openat2's RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
  would add nothing that O_NOFOLLOW on one component does not give, and this needs no openat2.
- Regular files are opened O_NONBLOCK|O_NOFOLLOW|O_NOCTTY and checked with fstat before a byte
  is read; callers open only what lstat called a regular file, so fifos, sockets and devices
  are never opened at all.
- Writes go relative to the parent's descriptor at the moment of writing (O_EXCL creates,
  mkdirat, symlinkat, renameat, unlinkat): nothing is checked by path and then done by path.
"""
from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path

from ..spec import SandboxError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_ZEROS = memoryview(bytes(_CHUNK))


class RefusedPaths(SandboxError):
    """Some paths were refused, each with why (`refused`, as "path (why)"); the rest was done."""

    def __init__(self, done: str, refused: list[str], outside_links: dict[str, str] | None = None,
                 held_back: dict[str, str] | None = None) -> None:
        self.done, self.refused = done, refused
        self.outside_links = outside_links or {}
        """{path: target} of links refused only because they leave the workspace (ask, then
        apply them by name with allow_outside_links=True)."""
        self.held_back = held_back or {}
        """{path: why} of changes refused only because they were not named (workspace.Change.held)."""
        super().__init__(f"{done}; refused {len(refused)}:\n" + "\n".join(f"  {line}" for line in refused))


class ContentChanged(SandboxError):
    """The bytes about to be written are not the ones expected (reviewed); nothing was written."""


class TreeChanged(SandboxError):
    """A directory moved while it was walked; the walk stopped rather than go where it now leads."""


def kind(st: os.stat_result) -> str:
    """'file', 'directory', 'symlink', 'fifo', 'socket' or 'device'."""
    names = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
             (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in names if test(st.st_mode)), "device")


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class Cursor:
    """A directory descriptor that walks down by name and back up, never through a link.

    A follower (`follow`) may go where no directory is (missing, a link, a file): it is then not
    `present` until it comes back up, and `make_missing` can create what it lacks."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self._trail = [_ident(fd)] if fd is not None else []
        self.missing: list[str] = []

    @classmethod
    def open(cls, path: Path | str) -> Cursor:
        """A directory given by path: ours, or the person's (the links in it are their choice)."""
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @property
    def present(self) -> bool:
        return self.fd is not None and not self.missing

    def down(self, name: str) -> bool:
        """Enter directory `name`; False, staying put, if it is missing, a link or not a directory."""
        try:
            fd = os.open(name, _DIR, dir_fd=self.fd)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return False
            raise
        self._trail.append(_ident(fd))
        os.close(self.fd)
        self.fd = fd
        return True

    def follow(self, name: str) -> None:
        """Go down beside a walk: into `name` if it is a directory here, else to nowhere."""
        if not self.present or not self.down(name):
            self.missing.append(name)

    def up(self) -> None:
        if self.missing:
            self.missing.pop()
            return
        fd = os.open("..", _DIR, dir_fd=self.fd)
        if _ident(fd) != self._trail[-2]:
            os.close(fd)
            raise TreeChanged("a directory was moved while it was being read, so the walk stopped there. "
                              "Fix: let the sandbox's processes finish (or stop them), then try again")
        self._trail.pop()
        os.close(self.fd)
        self.fd = fd

    def make_missing(self) -> int:
        """Make the directories a follower lacks (0755 less the umask); the descriptor where it is.
        NotADirectoryError if a file or a link is in the way: it is never followed or replaced."""
        if self.fd is None:
            raise SandboxError("there is no host directory to write to")
        while self.missing:
            name = self.missing[0]
            try:
                os.mkdir(name, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
            if not self.down(name):
                raise NotADirectoryError(errno.ENOTDIR, f"{name!r} on the host is a file or a symlink, not a "
                                         "directory; it is not written through (apply its own change first)")
            self.missing.pop(0)
        return self.fd

    def lstat(self, name: str) -> os.stat_result | None:
        if not self.present:
            return None
        try:
            return os.lstat(name, dir_fd=self.fd)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def names(self) -> list[str]:
        return os.listdir(self.fd) if self.present else []


class Walk:
    """Every entry below `top`'s directory (or just `names` in it), once, pre-order, by name.

    Subclasses get `entry(name, st)` with `top` at the entry's parent (return True to enter a
    directory), `entered(name, names)` once inside it, `left(name)` back at its parent, and
    `refuse(name, why)` for a directory that could not be entered. `parts` names the directories
    from the top down to where `top` is; `rel(name)` joins them for reports, never for a syscall."""

    def __init__(self, top: Cursor, names: list[str] | None = None) -> None:
        self.top = top
        self.parts: list[str] = []
        self._levels = [sorted(top.names() if names is None else names, reverse=True)]

    def run(self) -> None:
        levels = self._levels
        while levels:
            if not levels[-1]:
                levels.pop()
                if levels:
                    name = self.parts.pop()
                    self.top.up()
                    self.left(name)
                continue
            name = levels[-1].pop()
            st = self.top.lstat(name)
            if st is None or not self.entry(name, st) or not stat.S_ISDIR(st.st_mode):
                continue
            try:
                inside = self.top.down(name)
                names = self.top.names() if inside else []
            except OSError as exc:
                self.refuse(name, f"cannot be read: {exc.strerror}")
                continue
            if not inside:
                self.refuse(name, "it changed while it was being read")
                continue
            self.parts.append(name)
            levels.append(sorted(names, reverse=True))
            self.entered(name, names)

    def rel(self, name: str) -> str:
        return "/".join((*self.parts, name))

    def skip_rest(self) -> None:
        """Leave the current directory without visiting what is left in it."""
        self._levels[-1].clear()

    def entry(self, name: str, st: os.stat_result) -> bool:
        return True

    def entered(self, name: str, names: list[str]) -> None:
        pass

    def left(self, name: str) -> None:
        pass

    def refuse(self, name: str, why: str) -> None:
        raise SandboxError(f"{self.rel(name)}/: {why}")


# ---- files ---------------------------------------------------------------------------------

def open_file(dir_fd: int, name: str) -> int | None:
    """`name` opened for reading if it is a regular file; None if it is missing or anything else."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.ENODEV):  # a link; a socket; a whiteout
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_link(dir_fd: int, name: str) -> str | None:
    """Where symlink `name` points; None if it is not a link (any more: the sandbox may swap it)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a link
            return None
        raise


def read_head(dir_fd: int, name: str, limit: int) -> bytes | None:
    """At most `limit` bytes of regular file `name`; None if it is not one (any more)."""
    fd = open_file(dir_fd, name)
    if fd is None:
        return None
    try:
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def same_content(dir_a: int, dir_b: int, name: str) -> bool:
    """Whether `name` is a regular file with the same bytes in both directories."""
    a, b = open_file(dir_a, name), open_file(dir_b, name)
    try:
        if a is None or b is None:
            return False
        while True:
            chunk = os.read(a, _CHUNK)
            if chunk != os.read(b, len(chunk) or 1):
                return False
            if not chunk:
                return True
    finally:
        for fd in (a, b):
            if fd is not None:
                os.close(fd)


def data_extents(fd: int, size: int):
    """The (start, end) byte ranges below `size` of open file `fd` that hold data; the rest are
    holes (SEEK_DATA/SEEK_HOLE). A filesystem that cannot tell calls it all data."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size) if start < size else start
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a hole to the end (or the file shrank meanwhile)
                return
            if exc.errno != errno.EINVAL:
                raise
            start, end = pos, size
        if start >= size:
            return
        if end > start:
            yield start, end
        pos = max(end, start + 1)


def data_size(fd: int) -> int:
    """Bytes of data (holes not counted) in open file `fd`: what a sparse-aware copy writes."""
    return sum(end - start for start, end in data_extents(fd, os.fstat(fd).st_size))


def copy_data(src: int, out: int, limit: int | None = None, digest=None) -> int:
    """Copy open file `src` into empty file `out`, holes kept as holes (a file of holes only becomes
    a sparse file of its size); returns the bytes of data written. More than `limit` raises
    OSError(EFBIG) (a file that grows while it is copied). `digest` (a hashlib object) is fed
    exactly the bytes `out` ends up holding, holes as zeros: what was written, not what was meant."""
    size = os.fstat(src).st_size
    written = hashed = 0
    for start, end in data_extents(src, size):
        while start < end:
            chunk = os.pread(src, min(_CHUNK, end - start), start)
            if not chunk:  # it shrank meanwhile
                break
            written += len(chunk)
            if limit is not None and written > limit:
                raise OSError(errno.EFBIG, f"over the {limit:,}-byte limit")
            if digest is not None:
                _zeros(digest, start - hashed)
                digest.update(chunk)
                hashed = start + len(chunk)
            view = memoryview(chunk)
            while view:
                done = os.pwrite(out, view, start)
                view, start = view[done:], start + done
    os.ftruncate(out, size)
    if digest is not None:
        _zeros(digest, size - hashed)
    return written


def _zeros(digest, count: int) -> None:
    while count > 0:
        digest.update(_ZEROS[:min(count, _CHUNK)])
        count -= _CHUNK


def place_file(src: int, dir_fd: int, name: str, mode: int, *, replace: bool, exact_mode: bool = False,
               limit: int | None = None, expect: bytes | None = None) -> int:
    """Write open file `src` as `name` in `dir_fd`, holes kept (`copy_data`); returns the bytes of
    data written. Without `replace` anything already there (a dangling link too) raises
    FileExistsError; with it, a new file is renamed over the old entry, which is replaced, never
    written through. `mode` goes through the umask unless `exact_mode`. More than `limit` bytes of
    data raises OSError(EFBIG) and leaves nothing. `expect`: the sha256 the written bytes must have,
    checked on what was written, before it takes the name; else ContentChanged, and nothing is left."""
    temp = f".lis-tui-{secrets.token_hex(6)}.tmp" if replace else name
    digest = hashlib.sha256() if expect is not None else None
    out = os.open(temp, _NEW, mode, dir_fd=dir_fd)
    try:
        written = copy_data(src, out, limit, digest)
        if digest is not None and digest.digest() != expect:
            raise ContentChanged(f"{name!r} is not what was expected (its content changed)")
        if exact_mode:
            os.fchmod(out, mode)
        os.close(out)
        out = -1
        if replace:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return written
    except BaseException:
        if out >= 0:
            os.close(out)
        os.unlink(temp, dir_fd=dir_fd)
        raise


def place_link(target: str, dir_fd: int, name: str, *, replace: bool) -> None:
    """Make symlink `name` -> `target` in `dir_fd`, replacing (never following) an old entry."""
    if not replace:
        os.symlink(target, name, dir_fd=dir_fd)
        return
    temp = f".lis-tui-{secrets.token_hex(6)}.tmp"
    os.symlink(target, temp, dir_fd=dir_fd)
    try:
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(temp, dir_fd=dir_fd)
        raise


def chmod_at(dir_fd: int, name: str, mode: int) -> None:
    """chmod `name` itself (not a link's target), even when its mode shuts us out of opening it."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "a symlink has no mode of its own to set", name)
        os.chmod(f"/proc/self/fd/{fd}", mode)  # what glibc's fchmodat(AT_SYMLINK_NOFOLLOW) does
    finally:
        os.close(fd)


def link_leaves(root: Path, where: list[str], target: str) -> bool:
    """Whether a symlink to `target` at root/where/NAME leads out of `root`, read lexically (as the
    path reads, `..` against where the link is; other links on the way are not consulted)."""
    if target.startswith("/"):
        base = [part for part in str(root).split("/") if part]
        found = _lexical([], target)
        return found is None or found[:len(base)] != base
    return _lexical(list(where), target) is None


def _lexical(stack: list[str], target: str) -> list[str] | None:
    for part in target.split("/"):
        if part == "..":
            if not stack:
                return None
            stack.pop()
        elif part not in ("", "."):
            stack.append(part)
    return stack


# ---- whole trees ---------------------------------------------------------------------------

class _Removal(Walk):
    def entry(self, name: str, st: os.stat_result) -> bool:
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(name, dir_fd=self.top.fd)
            except FileNotFoundError:
                pass
            return False
        if st.st_mode & 0o700 != 0o700:  # overlayfs leaves work/work mode 000; a user's rmtree cannot enter it
            chmod_at(self.top.fd, name, 0o700)
        return True

    def left(self, name: str) -> None:
        os.rmdir(name, dir_fd=self.top.fd)


def remove_at(dir_fd: int, name: str) -> None:
    """rm -rf `name` in `dir_fd`: links are removed, never followed; shut directories are opened up."""
    with Cursor(os.dup(dir_fd)) as top:
        _Removal(top, [name]).run()


def remove_tree(path: Path | str) -> None:
    """rm -rf `path` (nothing if it is missing), however deep, whatever modes it holds."""
    path = Path(path)
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        remove_at(parent, path.name)
    finally:
        os.close(parent)


class _Usage(Walk):
    """Blocks and inodes; a directory its mode shuts (0300, 0000: the sandbox chose it, the files
    are our uid's) is opened up (u+rx, through an O_PATH descriptor, never a link) for the time it
    is read and given its mode back when the walk leaves it."""

    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.seen: set[tuple[int, int]] = set()
        self.total = self.inodes = 0
        self.shut: dict[tuple[str, ...], int] = {}

    def entry(self, name: str, st: os.stat_result) -> bool:
        if (st.st_dev, st.st_ino) not in self.seen:
            self.seen.add((st.st_dev, st.st_ino))
            self.total += st.st_blocks * 512
            self.inodes += 1
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o500 != 0o500 and os.geteuid() != 0:
            try:
                chmod_at(self.top.fd, name, stat.S_IMODE(st.st_mode) | 0o500)
                self.shut[(*self.parts, name)] = stat.S_IMODE(st.st_mode)
            except OSError:
                pass  # gone or swapped meanwhile: the next pass sees it
        return True

    def left(self, name: str) -> None:
        self._reshut(name)

    def refuse(self, name: str, why: str) -> None:
        self._reshut(name)  # a directory we cannot read counts as its own entry only

    def _reshut(self, name: str) -> None:
        mode = self.shut.pop((*self.parts, name), None)
        if mode is not None:
            try:
                chmod_at(self.top.fd, name, mode)
            except OSError:
                pass


def tree_usage(path: Path | str) -> tuple[int, int]:
    """(bytes on disk, inodes) under `path`, `path` itself not counted, hard-linked files once, no
    link followed; directories shut by their mode are read too (see _Usage)."""
    with Cursor.open(path) as top:
        walk = _Usage(top)
        walk.run()
        return walk.total, walk.inodes


def tree_size(path: Path | str) -> int:
    """Bytes on disk under `path` (allocated blocks: a sparse file counts what it holds, not its
    length), counting hard-linked files once and following no links."""
    return tree_usage(path)[0]


class _Files(Walk):
    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.found: list[str] = []

    def entry(self, name: str, st: os.stat_result) -> bool:
        if stat.S_ISREG(st.st_mode):
            self.found.append(self.rel(name))
        return True


def files_below(path: Path | str) -> list[str]:
    """The regular files under `path`, '/'-separated and relative to it, in walk order."""
    with Cursor.open(path) as top:
        walk = _Files(top)
        walk.run()
        return walk.found
