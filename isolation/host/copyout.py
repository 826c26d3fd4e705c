"""Copy a directory out of a running sandbox onto the host (`Sandbox.export`, a run's `files/`).

The tree is read from the host through the sandbox's root directory (its /proc/PID/root, opened
when it started), not by running `tar` inside and unpacking the stream here: that needs no process
and no tar in the rootfs, puts no archive parser in front of sandbox-made bytes, and is the same
descriptor walk (host/walk.py) that review, apply and scratch removal use. `src` is reached one name
at a time with O_NOFOLLOW from that root, mounts crossed as the sandbox sees them, so a link on
the way, or one the sandbox swaps in while we copy, makes an open fail instead of leading out.

On the host: the destination keeps its own mode (a new one gets 0755 less the umask, never the
sandbox's); directories are made 0755 and files 0644 or 0755 (executable), less the umask; an
existing file is kept (refused) unless `force`, which renames a new file over the old entry, so a
host link in the way is replaced, never written through; a host link or file where a directory
goes is refused. Links are recreated only when their target, read lexically from where they
land, stays inside the destination (unless `allow_outside_links`); special files never.

Sparse files stay sparse (walk.copy_data: SEEK_DATA/SEEK_HOLE, a file of holes only is one
ftruncate), and `limit` caps the bytes of data written, not the files' lengths: three
`truncate -s 1G` files cost nothing, a dense file that would pass the cap is refused before a byte
of it is written (named, with the cap and how to raise it), and the copy goes on with the rest.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from .walk import Cursor, Walk, data_size, kind, link_leaves, open_file, place_file, place_link, read_link
from ..spec import SandboxError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Copied:
    """What a copy made (`files`, '/'-separated under the destination) and what it refused."""

    files: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """One "path (why)" each, the format of a run's `files_skipped`."""
    size: int = 0
    """Bytes of data written (holes not counted: what the cap counts)."""


def copy_out(root_fd: int, src: str, dest: Path, *, force: bool = False, links: bool = True,
             allow_outside_links: bool = False, limit: int | None = None) -> Copied:
    """Copy the sandbox's directory `src` (under root `root_fd`) into host directory `dest`,
    made if missing. `links=False` skips every link; `limit` caps the bytes of data written."""
    parts = [part for part in src.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise SandboxError(f"{src!r} climbs with '..'; name the directory to export plainly")
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)  # an existing one keeps its mode
    with Cursor(os.open(".", _DIR, dir_fd=root_fd)) as source, Cursor.open(dest) as host:
        for part in parts:
            if not source.down(part):
                raise SandboxError(f"{src} is not a directory in the sandbox (or passes through a symlink); "
                                   "nothing was exported")
        walk = _CopyOut(source, host, dest.resolve(), force, links, allow_outside_links, limit)
        walk.run()
        return walk.copied


def stamp(root_fd: int, src: str) -> int:
    """A number that differs once anything a copy of the sandbox's directory `src` would copy has
    changed: each entry's name, type, size, mode and times (links not followed); 0 when `src` is no
    directory. A folder saved again after each step is copied out only when this moved."""
    parts = [part for part in src.split("/") if part not in ("", ".")]
    with Cursor(os.open(".", _DIR, dir_fd=root_fd)) as source:
        for part in parts:
            if ".." == part or not source.down(part):
                return 0
        walk = _Stamp(source)
        walk.run()
        return hash(tuple(walk.seen))


class _Stamp(Walk):
    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.seen: list[tuple] = []

    def entry(self, name: str, st: os.stat_result) -> bool:
        self.seen.append((self.rel(name), st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
        return True

    def refuse(self, name: str, why: str) -> None:
        self.seen.append((self.rel(name), why))


class _CopyOut(Walk):
    def __init__(self, source: Cursor, host: Cursor, root: Path, force: bool, links: bool,
                 allow_outside_links: bool, limit: int | None) -> None:
        super().__init__(source)
        self.host, self.root, self.force, self.links = host, root, force, links
        self.allow, self.limit = allow_outside_links, limit
        self.copied = Copied()

    def entry(self, name: str, st: os.stat_result) -> bool:
        what = kind(st)
        if what == "directory":
            try:
                os.mkdir(name, 0o755, dir_fd=self.host.fd)
            except FileExistsError:
                pass  # merged into, if it is a directory; `entered` finds out without following it
            return True
        why = self._file(name, st) if what == "file" else self._link(name) if what == "symlink" else what
        if why:
            self.copied.refused.append(f"{self.rel(name)} ({why})")
        return False

    def entered(self, name: str, names: list[str]) -> None:
        self.host.follow(name)
        if not self.host.present:
            self.copied.refused.append(f"{'/'.join(self.parts)}/ (a file or a symlink is in the way on the "
                                       "host; nothing below it was copied)")
            self.skip_rest()

    def left(self, name: str) -> None:
        self.host.up()

    def refuse(self, name: str, why: str) -> None:
        self.copied.refused.append(f"{self.rel(name)}/ ({why})")

    def _file(self, name: str, st: os.stat_result) -> str:
        left = None if self.limit is None else self.limit - self.copied.size
        try:
            src = open_file(self.top.fd, name)
        except OSError as exc:
            return f"cannot be read: {exc.strerror}"
        if src is None:
            return "it changed while it was being copied"
        try:
            if left is not None and (data := data_size(src)) > left:
                return self._over(data)
            size = place_file(src, self.host.fd, name, 0o755 if st.st_mode & 0o111 else 0o644,
                              replace=self.force, limit=left)
        except OSError as exc:
            return self._over(None) if exc.errno == errno.EFBIG else _why(exc)
        finally:
            os.close(src)
        self.copied.files.append(self.rel(name))
        self.copied.size += size
        return ""

    def _over(self, data: int | None) -> str:
        held = "it grew while it was copied" if data is None else f"{_size(data)} of data"
        return (f"{held}: over the export cap of {_size(self.limit)}, {_size(self.copied.size)} of it taken "
                "by the files before it; raise the cap with --export-cap SIZE or [sandbox] export_cap "
                "(Limits.export_cap)")

    def _link(self, name: str) -> str:
        if not self.links:
            return "symlink"
        target = read_link(self.top.fd, name)
        if target is None:
            return "it changed while it was being copied"
        if not self.allow and link_leaves(self.root, self.parts, target):
            return f"a symlink to {target}, outside {self.root}; pass allow_outside_links=True to copy it"
        try:
            place_link(target, self.host.fd, name, replace=self.force)
        except OSError as exc:
            return _why(exc)
        return ""


def _why(exc: OSError) -> str:
    if exc.errno == errno.EEXIST:
        return "it exists on the host; pass force=True to overwrite it"
    if exc.errno in (errno.EISDIR, errno.ENOTEMPTY):
        return "a directory is in the way on the host"
    return f"could not be copied: {exc.strerror or exc}"


def _size(n: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
