"""What a saved patch (isolation.changes.gitpatch) keeps beside itself, in a folder of files each
named by its git blob id:
- the new content of a large file (over KEEP_LIMIT): as a `GIT binary patch` it cost zlib at level 9
  and base85 (a 450 MB file touched by two bytes: 45 s and a 608 MB patch), so it is copied as it
  is, left out of the patch, and recorded as a `Kept` (the path, its size and mode, the blob it
  replaces); `place` writes it into a project under the patch's rules;
- the old content of each modified text file (a base, BASES_LIMIT bytes in all), so that a 3-way
  apply (isolation.changes.threeway) can merge a file the project changed since.

A run saves its changes after every step, so keeping costs nothing for a large file whose sandbox
copy still has the identity (inode, size, mtime_ns, ctime_ns) it had at the last save, nor for the
host file it replaces; `exact` (the save at the run's end) reads both again. A sandbox file that
changes while it is copied is not kept (said, as the patch says it).
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..host.walk import Cursor, open_file
from ..spec import SandboxError
from .gitpatch import LINK, ZERO_ID, _is_git, git_mode

if TYPE_CHECKING:
    from .workspace import _Site

KEEP_LIMIT = 8 << 20
"""Bytes: a changed file larger than this is kept beside the patch instead of in it."""
BASES_LIMIT = 32 << 20
"""Bytes of old text contents (bases for a 3-way apply) kept beside one patch at most."""
CHANGED = "it changed while it was being read; run lis-tui again on it"
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ID = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


@dataclass(frozen=True)
class Kept:
    """A large file kept beside the patch: its new content is the folder's file `new_id`."""

    path: str
    size: int
    mode: str
    """Its git mode (100644 or 100755)."""
    new_id: str
    old_mode: str | None
    """What it replaces: None when the file is new, else the git mode and blob id (`old_id`)."""
    old_id: str
    ident: tuple[int, ...]
    """(inode, size, mtime_ns, ctime_ns) of the sandbox's file when it was read."""
    old_ident: tuple[int, ...] | None = None
    """The same of the host's file when it was hashed (None: none, or a link)."""

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, data: object) -> Kept:
        """A Kept from changes.json; ValueError when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("a kept file's record is not an object")
        try:
            kept = cls(str(data["path"]), int(data["size"]), str(data["mode"]), str(data["new_id"]),
                       None if data["old_mode"] is None else str(data["old_mode"]), str(data["old_id"]),
                       tuple(int(n) for n in data["ident"]),
                       None if data.get("old_ident") is None else tuple(int(n) for n in data["old_ident"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a kept file's record lacks {exc}") from None
        if not _ID.match(kept.new_id) or not _ID.match(kept.old_id) or kept.size < 0:
            raise ValueError(f"the record of the kept file {kept.path!r} is not one lis-tui wrote")
        return kept


class Beside:
    """Keeps a patch's large files and bases in `folder` while gitpatch.write_patch walks the
    changes; `earlier`: what the last save kept (reused where the files' identities match)."""

    def __init__(self, folder: Path, earlier: Iterable[Kept] = (), exact: bool = True) -> None:
        self.folder = Path(folder)
        self.earlier = {kept.path: kept for kept in earlier}
        self.exact = exact
        self.kept: list[Kept] = []
        self.bases: list[str] = []
        self._base_bytes = 0

    def takes(self, kind: str, st: os.stat_result) -> bool:
        """Whether a change to a file like `st` is kept here (a mode alone is no new content)."""
        return kind != "mode" and stat.S_ISREG(st.st_mode) and st.st_size > KEEP_LIMIT

    def keep(self, path: str, site: _Site, old_present: bool) -> str:
        """Keep the sandbox's file at `site` as `path`'s new content (the host's file there, when
        `old_present`, is what it replaces); '' when it is kept, else why not."""
        prior = self.earlier.get(path)
        try:
            old = self._old_side(site, prior) if old_present else (None, ZERO_ID, None)
            fd = open_file(site.new_dir, site.name) if old is not None else None
            if fd is None:
                return CHANGED
            try:
                st = os.fstat(fd)
                if prior is not None and not self.exact and prior.ident == _ident(st) and self._has(prior):
                    new_id = prior.new_id  # as it was at the last save: nothing read
                else:
                    new_id = self._copy(fd, st, prior)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"it could not be kept beside the patch: {exc.strerror or exc}"
        if new_id is None:
            return CHANGED
        self.kept.append(Kept(path, st.st_size, git_mode(st), new_id, old[0], old[1], _ident(st), old[2]))
        return ""

    def _old_side(self, site: _Site, prior: Kept | None) -> tuple[str, str, tuple | None] | None:
        """(git mode, blob id, identity) of the host's file or link the new content replaces."""
        if stat.S_ISLNK(site.old.st_mode):
            return LINK, _blob(os.fsencode(os.readlink(site.name, dir_fd=site.host.fd))), None
        ident = _ident(site.old)
        if prior is not None and not self.exact and prior.old_ident == ident:
            return prior.old_mode, prior.old_id, ident
        fd = open_file(site.host.fd, site.name)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            blob_id = _hash(fd, st.st_size)
            return (git_mode(st), blob_id, _ident(st)) if blob_id and _ident(os.fstat(fd)) == _ident(st) else None
        finally:
            os.close(fd)

    def _has(self, prior: Kept) -> bool:
        try:
            return os.stat(self.folder / prior.new_id).st_size == prior.size
        except OSError:
            return False

    def _copy(self, fd: int, st: os.stat_result, prior: Kept | None) -> str | None:
        """The file copied into the folder as its blob id (None: it changed meanwhile). Content the last
        save kept is read, not written again."""
        if prior is not None and self._has(prior) and _hash(fd, st.st_size) == prior.new_id \
                and _ident(os.fstat(fd)) == _ident(st):
            return prior.new_id
        self.folder.mkdir(exist_ok=True)
        folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        temp = f".{secrets.token_hex(6)}.tmp"
        try:
            out = os.open(temp, _NEW, 0o600, dir_fd=folder)
            try:
                blob_id = _copy_hashing(fd, out, st.st_size)
                os.fsync(out)  # on the disk before a record names it: a power cut leaves the last save whole
            finally:
                os.close(out)
            if blob_id is None or _ident(os.fstat(fd)) != _ident(st):
                os.unlink(temp, dir_fd=folder)
                return None
            os.rename(temp, blob_id, src_dir_fd=folder, dst_dir_fd=folder)
            return blob_id
        except BaseException:
            try:
                os.unlink(temp, dir_fd=folder)
            except OSError:
                pass
            raise
        finally:
            os.close(folder)

    def base(self, blob_id: str, data: bytes) -> None:
        """Keep `data` (a modified text file's old content, blob `blob_id`) while the budget lasts."""
        if blob_id in self.bases or self._base_bytes + len(data) > BASES_LIMIT:
            return
        try:
            self.folder.mkdir(exist_ok=True)
            if not (self.folder / blob_id).exists():
                temp = self.folder / f".{blob_id}.{secrets.token_hex(4)}.tmp"
                with open(temp, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temp, self.folder / blob_id)
        except OSError:  # a full disk: that file cannot be merged later, and the patch is whole
            return
        self.bases.append(blob_id)
        self._base_bytes += len(data)

    def tidy(self) -> None:
        """Remove what no longer belongs (after the record naming what does is written)."""
        wanted = {kept.new_id for kept in self.kept} | set(self.bases)
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        for name in names:
            if name not in wanted:
                try:
                    os.unlink(self.folder / name)
                except OSError:
                    pass


# ---- writing a kept file (or any checked content) into a project ------------------------------

def place(project: Path, path: str, source: Path, executable: bool, expect: tuple[str, str] | None,
          blob_id: str) -> None:
    """Write kept file `source` (blob `blob_id`, checked as it is copied) into `project` at `path`,
    only while the project's entry there is `expect` (see write_checked; SandboxError says why not)."""
    fd = open_file_at(source)
    if fd is None:
        raise SandboxError(f"its content, {source}, is missing")
    try:
        def fill(out: int) -> None:
            if _copy_hashing(fd, out, os.fstat(fd).st_size) != blob_id:
                raise SandboxError(f"{source} is not the file the run kept (its blob id differs)")

        write_checked(project, path, fill, executable, expect)
    finally:
        os.close(fd)


def write_checked(project: Path, path: str, fill: Callable[[int], None], executable: bool,
                  expect: tuple[str, str] | None) -> None:
    """Write `path` in `project` as what `fill(fd)` writes into a new file: through directory
    descriptors (no link followed, missing folders made), renamed over the old entry (which is
    replaced, never written through), with no mode wider than the umask, and only while the entry
    there is `expect` ((git mode, blob id); None: nothing), checked before and again at the rename."""
    names = safe_names(path)
    with Cursor.open(project) as cursor:
        for name in names[:-1]:
            cursor.follow(name)
        parent = cursor.make_missing()
        name = names[-1]
        now, ident = _entry(parent, name)
        if now != expect:
            raise SandboxError("it is not as it was when the run saved it")
        temp = f".lis-tui-{secrets.token_hex(6)}.tmp"
        out = os.open(temp, _NEW, 0o777 if executable else 0o666, dir_fd=parent)
        try:
            fill(out)
            os.close(out)
            out = -1
            if _lstat_ident(parent, name) != ident:
                raise SandboxError("it changed while it was being written; apply it again")
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            if out >= 0:
                os.close(out)
            os.unlink(temp, dir_fd=parent)
            raise


def open_file_at(path: Path) -> int | None:
    """A regular file of ours (a run's folder) opened for reading, not through a link; None if none."""
    with Cursor.open(path.parent) as cursor:
        return open_file(cursor.fd, path.name)


def safe_names(path: str) -> list[str]:
    """The names of a patch's relative path; SandboxError for one no patch may write (`..`, a `.git`)."""
    names = path.split("/")
    if any(name in ("", ".", "..") or _is_git(name) for name in names):
        raise SandboxError(f"{path!r} is no path a patch may write")
    return names


def _entry(dir_fd: int, name: str) -> tuple[tuple[str, str] | str | None, tuple | None]:
    """(git mode, blob id) of `name` in `dir_fd` ("other" for a folder or a special file, None when
    absent), and its identity."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    if stat.S_ISLNK(st.st_mode):
        return (LINK, _blob(os.fsencode(os.readlink(name, dir_fd=dir_fd)))), _ident(st)
    fd = open_file(dir_fd, name) if stat.S_ISREG(st.st_mode) else None
    if fd is None:
        return "other", _ident(st)
    try:
        opened = os.fstat(fd)
        blob_id = _hash(fd, opened.st_size)
        return ((git_mode(opened), blob_id) if blob_id else "other"), _ident(opened)
    finally:
        os.close(fd)


def _lstat_ident(dir_fd: int, name: str) -> tuple | None:
    try:
        return _ident(os.lstat(name, dir_fd=dir_fd))
    except FileNotFoundError:
        return None


def _ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _hash(fd: int, size: int) -> str | None:
    """The blob id of open file `fd` of `size` bytes; None if it is not that size (any more)."""
    return _copy_hashing(fd, None, size)


def _copy_hashing(src: int, out: int | None, size: int) -> str | None:
    """Copy `size` bytes of `src` into empty file `out` (runs of zeros left as holes; None: only
    read); the blob id of what was read, None if `src` is not that size (any more)."""
    digest, pos = hashlib.sha1(b"blob %d\0" % size), 0
    while pos < size:
        chunk = os.pread(src, min(_CHUNK, size - pos), pos)
        if not chunk:
            return None
        digest.update(chunk)
        if out is not None and chunk != _ZEROS[:len(chunk)]:
            view = memoryview(chunk)
            at = pos
            while view:
                done = os.pwrite(out, view, at)
                view, at = view[done:], at + done
        pos += len(chunk)
    if out is not None:
        os.ftruncate(out, size)
    return None if os.pread(src, 1, size) else digest.hexdigest()
