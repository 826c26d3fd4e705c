"""Rootfs tarballs: safe extraction into a fresh directory, and export.

Extraction is ours rather than `tarfile.extractall`: every member is written through directory
descriptors opened with O_NOFOLLOW (see rootfs.safe), owners are never restored (the invoking user
owns everything, which the sandbox maps to uid 0), setuid/setgid bits are dropped, device nodes and
fifos are skipped, and an archive without its end-of-archive block counts as truncated.
"""
from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import shutil
import stat
import subprocess
import tarfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import RootfsError, UnsafeArchive
from .safe import SafeRoot, split_member, unlink_entry

_MAGIC = ((b"\x1f\x8b", "gz"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bz2"), (b"\x28\xb5\x2f\xfd", "zst"))
_SUFFIXES = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.xz": "xz", ".txz": "xz",
             ".tar.bz2": "bz2", ".tar.zst": "zst", ".tzst": "zst"}
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ZSTD_MISSING = "no zstd binary was found. Fix: install zstd (apt install zstd)"


@dataclass
class ExtractStats:
    """What an extraction wrote and what it left out."""

    entries: int = 0
    skipped: list[str] = field(default_factory=list)
    """Device nodes, fifos and other special members, which a sandbox cannot use."""


@contextmanager
def open_archive(path: Path) -> Iterator[BinaryIO]:
    """The uncompressed tar stream of `path`; gzip, xz, bzip2 and zstd are told by content."""
    with open(path, "rb") as raw:
        head = raw.read(6)
        kind = next((name for magic, name in _MAGIC if head.startswith(magic)), "")
        raw.seek(0)
        if kind == "zst":
            with _zstd_reader(path) as stream:
                yield stream
            return
        openers = {"gz": lambda f: gzip.GzipFile(fileobj=f), "xz": lzma.LZMAFile, "bz2": bz2.BZ2File}
        yield openers[kind](raw) if kind else raw


@contextmanager
def _zstd_reader(path: Path) -> Iterator[BinaryIO]:
    if not shutil.which("zstd"):
        raise RootfsError(f"{path} is zstd-compressed and {_ZSTD_MISSING}, or unpack it first: zstd -d {path}")
    proc = subprocess.Popen(["zstd", "-dcq", "--", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc.stdout
        while proc.stdout.read(1 << 20):
            pass
        err = proc.stderr.read().decode(errors="replace").strip()
        if proc.wait() != 0:
            raise RootfsError(f"{path} is not a valid zstd file ({err}); it may be truncated. Fix: fetch it again")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def extract(stream: BinaryIO, dest: Path, label: str) -> ExtractStats:
    """Unpack the uncompressed tar `stream` into the empty directory `dest`, never outside it."""
    tail = _TailReader(stream)
    try:
        with SafeRoot(dest) as root, tarfile.open(fileobj=tail, mode="r|") as tar:
            writer = _Writer(root)
            try:
                for member in tar:
                    writer.add(member, tar)
            finally:
                writer.close_parent()
            writer.finish_dirs()
            if tail.block_at(tar.offset) != tarfile.NUL * tarfile.BLOCKSIZE:
                raise RootfsError(f"{label} is truncated (it ends without the end-of-archive block). "
                                  "Fix: fetch or export it again")
            return writer.stats
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise _corrupt(label, exc) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise RootfsError(f"disk full while unpacking {label} into {dest.parent}; nothing was kept. "
                              "Fix: free space there, or move the store with LIS_DATA_HOME") from None
        if exc.errno is None:  # gzip, bz2: bad data
            raise _corrupt(label, exc) from None
        raise


def _corrupt(label: str, exc: Exception) -> RootfsError:
    return RootfsError(f"{label} is not a readable tarball ({exc}); it may be truncated or corrupt. "
                       "Fix: fetch or export it again")


class _TailReader:
    """Passes reads through and keeps the last bytes, so the end-of-archive block can be checked."""

    KEEP = 1 << 16

    def __init__(self, raw: BinaryIO):
        self.raw, self.pos, self.tail = raw, 0, bytearray()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.pos += len(data)
        self.tail += data
        del self.tail[:-self.KEEP]
        return data

    def block_at(self, offset: int) -> bytes:
        start = offset - (self.pos - len(self.tail))
        return bytes(self.tail[start:start + tarfile.BLOCKSIZE]) if start >= 0 else b""


class _Writer:
    """Writes members one by one below a SafeRoot; directory modes are set last."""

    def __init__(self, root: SafeRoot):
        self.root = root
        self.stats = ExtractStats()
        self.dirs: dict[tuple[str, ...], tarfile.TarInfo] = {}
        self._parent: tuple[tuple[str, ...], int] | None = None

    def add(self, member: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        parts = split_member(member.name)
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            self.stats.skipped.append(member.name)
            return
        self.stats.entries += 1
        if not parts:
            if member.isdir():
                self.dirs[()] = member
            return
        parent, name = self._parent_fd(parts[:-1]), parts[-1]
        if member.isdir():
            self._dir(parent, name, parts, member)
        elif member.issym():
            unlink_entry(parent, name)
            os.symlink(member.linkname, name, dir_fd=parent)
        elif member.islnk():
            self._hardlink(parent, name, member)
        else:
            self._file(parent, name, member, tar)

    def _parent_fd(self, parts: tuple[str, ...]) -> int:
        if self._parent and self._parent[0] == parts:
            return self._parent[1]
        self.close_parent()
        fd = self.root.open_dir(parts, create=True)
        self._parent = (parts, fd)
        return fd

    def close_parent(self) -> None:
        if self._parent:
            os.close(self._parent[1])
            self._parent = None

    def _dir(self, parent: int, name: str, parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
        if not _is_dir(parent, name):
            unlink_entry(parent, name)
            os.mkdir(name, 0o700, dir_fd=parent)
        self.dirs[parts] = member

    def _hardlink(self, parent: int, name: str, member: tarfile.TarInfo) -> None:
        try:
            source = split_member(member.linkname)
        except UnsafeArchive:
            raise UnsafeArchive(f"hard link {member.name!r} points outside: {member.linkname!r}") from None
        if not source:
            raise UnsafeArchive(f"hard link {member.name!r} points at the archive root")
        try:
            src_dir = self.root.open_dir(source[:-1])
        except FileNotFoundError:
            raise RootfsError(f"hard link {member.name!r} -> {member.linkname!r}: target not in the archive") from None
        try:
            unlink_entry(parent, name)
            os.link(source[-1], name, src_dir_fd=src_dir, dst_dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, PermissionError) as exc:
            raise RootfsError(f"hard link {member.name!r} -> {member.linkname!r} failed: {exc.strerror}") from None
        finally:
            os.close(src_dir)

    def _file(self, parent: int, name: str, member: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        # The old entry goes first: opening it would write through a link or into a hard-linked file.
        unlink_entry(parent, name)
        fd = os.open(name, _NEW_FILE, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(tar.extractfile(member), out, 1 << 20)
            out.flush()
            os.fchmod(fd, member.mode & 0o777)
            _set_mtime(fd, member)

    def finish_dirs(self) -> None:
        """Set directory modes and times, deepest first, so no directory is closed to us early."""
        for parts in sorted(self.dirs, key=len, reverse=True):
            member = self.dirs[parts]
            try:
                fd = self.root.open_dir(parts)
            except (FileNotFoundError, UnsafeArchive):
                continue  # replaced by a later member
            try:
                os.fchmod(fd, member.mode & 0o1777)
                _set_mtime(fd, member)
            finally:
                os.close(fd)


def _set_mtime(fd: int, member: tarfile.TarInfo) -> None:
    try:
        os.utime(fd, (member.mtime, member.mtime))
    except (OverflowError, ValueError, OSError):
        pass  # a time the filesystem cannot hold is not worth failing the import for


def _is_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def archive_kind(file: Path) -> str:
    """'' for .tar, else the compression its suffix names; an unknown suffix is an error."""
    for suffix, kind in _SUFFIXES.items():
        if file.name.endswith(suffix):
            return kind
    raise RootfsError(f"cannot tell the archive format of {file.name!r}. "
                      f"Fix: end the name with one of {', '.join(_SUFFIXES)}")


def write_archive(src: Path, file: Path) -> None:
    """Pack the tree `src` into `file` (format by suffix), owned by root, written atomically."""
    kind = archive_kind(file)
    partial = file.with_name(f".{file.name}.partial-{os.getpid()}")
    try:
        if kind == "zst":
            _write_zstd(src, partial)
        else:
            options = {"gz": {"compresslevel": 6}, "bz2": {"compresslevel": 6}}.get(kind, {})
            with tarfile.open(partial, f"w:{kind}", format=tarfile.PAX_FORMAT, **options) as tar:
                tar.add(src, arcname=".", filter=_as_root)
        os.replace(partial, file)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _write_zstd(src: Path, partial: Path) -> None:
    if not shutil.which("zstd"):
        raise RootfsError(f"{_ZSTD_MISSING}, or export to .tar.gz / .tar.xz instead")
    proc = subprocess.Popen(["zstd", "-qfT0", "-o", str(partial)], stdin=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.add(src, arcname=".", filter=_as_root)
    finally:
        proc.stdin.close()
        if proc.wait() != 0:
            raise RootfsError(f"zstd failed writing {partial}")


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
