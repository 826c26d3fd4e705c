"""Touch paths under an untrusted root without ever following a link out of it.

A tarball or a built tree may hold `etc -> /etc`; a plain `open(root / "etc/x", "w")` would then
write on the host. Every path here is walked one component at a time from a directory descriptor
with O_NOFOLLOW, so a link met on the way is an error, never a way out.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..host.walk import remove_tree, tree_size, tree_usage  # noqa: F401 (re-exported: one walk for every tree)
from .errors import UnsafeArchive

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def split_member(name: str) -> tuple[str, ...]:
    """'./usr/bin/x' -> ('usr', 'bin', 'x'); absolute names and '..' raise UnsafeArchive."""
    if name.startswith("/"):
        raise UnsafeArchive(f"member {name!r} has an absolute name; refusing the whole archive")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r} climbs out with '..'; refusing the whole archive")
    return parts


class SafeRoot:
    """A directory opened once, with every path below it reached without following links."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.fd = os.open(self.path, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeRoot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open_dir(self, parts: tuple[str, ...], create: bool = False) -> int:
        """A new descriptor of the directory at `parts` (the caller closes it)."""
        fd = os.dup(self.fd)
        try:
            for part in parts:
                nxt = _step(fd, part, create, parts)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def lexists(self, parts: tuple[str, ...]) -> bool:
        """Whether `parts` names something (a dangling link counts), reached without links."""
        try:
            fd = self.open_dir(parts[:-1])
        except (FileNotFoundError, UnsafeArchive):
            return False
        try:
            os.lstat(parts[-1], dir_fd=fd)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)

    def read_file(self, parts: tuple[str, ...], limit: int | None = None) -> bytes | None:
        """The bytes of a regular file (its first `limit`), or None if it is missing, a link or
        not a file."""
        try:
            dir_fd = self.open_dir(parts[:-1])
        except (FileNotFoundError, UnsafeArchive):
            return None
        try:
            # O_NONBLOCK: a fifo opens at once (and is refused below) instead of waiting for a writer
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return handle.read() if limit is None else handle.read(limit)

    def write_file(self, parts: tuple[str, ...], data: bytes, mode: int = 0o644) -> None:
        """Create or replace a regular file, making missing parent directories."""
        dir_fd = self.open_dir(parts[:-1], create=True)
        try:
            unlink_entry(dir_fd, parts[-1])
            fd = os.open(parts[-1], _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                os.fchmod(fd, mode)
        finally:
            os.close(dir_fd)

    def make_dir(self, parts: tuple[str, ...], mode: int = 0o755) -> None:
        """Create a directory (and its parents) if it is missing."""
        fd = self.open_dir(parts, create=True)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def _step(fd: int, part: str, create: bool, parts: tuple[str, ...]) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
        os.mkdir(part, 0o755, dir_fd=fd)
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeArchive(f"the path {'/'.join(parts)!r} passes through {part!r}, which is a symlink "
                                "or a file, not a directory; refusing to write through it") from None
        raise


def unlink_entry(dir_fd: int, name: str) -> None:
    """Remove a non-directory (or an empty directory) so a new entry can take its place."""
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            raise UnsafeArchive(f"{name!r} is a non-empty directory and cannot be replaced by a file") from None
    else:
        os.unlink(name, dir_fd=dir_fd)


def process_alive(pid: int) -> bool:
    """Whether a process of that id exists (leftovers named after a dead one can be swept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
