"""Whether the host changed a path of its workspace since a sandbox started: asked only of the paths
the sandbox changed, when it matters (apply's conflict check, a saved patch's `moved`, a review, a
kept session's close), from what the kernel records, never from a table of every file.

- The kernel stamps an entry's ctime at every change of its content, mode, links or place, and
  nothing can set it back: a host entry whose ctime is later than the start (`since`, as starting.py
  takes it) was made or changed since; one whose is not is as it was.
- A path the host lacks now was not there at the start either if the folder that would hold it has
  not changed since (a folder's ctime moves with every entry made, removed or renamed in it). If
  that folder did change, the sandbox's copy tells: overlayfs marks what it copies up from the host
  (an origin xattr the sandbox can neither set nor forge), so a marked copy was the host's file
  after the start, deleted since; one the sandbox made itself is new.
- What is told is remembered (`known`: there, from which ctime; or not there), from the first time it
  is asked (a run's save after each step, any review, a kept session's close), so that the person's
  later work in a folder (an editor's swap file, a save by rename) does not turn the sandbox's new
  file there into a conflict, and a deletion of a file seen there is one whatever the sandbox did.
- What apply writes is the new start of those paths, and of the folders it wrote into that the
  host had not changed first.

The kernel stamps ctimes from its coarse clock, a tick (1-10 ms) behind the time: an edit made in the
start's tick may read as made before it. No command of the sandbox's runs before that tick is over
(starting.py; the start takes longer than a tick, so it rarely waits), so such an edit came before
the sandbox could read anything; apply likewise returns past the tick of what it wrote (`past`).
Where the kernel does not stamp ctimes with its own clock (network filesystems and FUSE stamp with
another machine's clock or none; FAT keeps no ctime), the start notes every entry (type, size,
mtime, mode) as it always did, and that table decides.

Memory and time follow the change: `known` holds the changed paths only, and each question is a
lookup from the folder descriptors kept for the last path (sorted paths share them), entered by one
name each with O_NOFOLLOW: no link on the host is followed.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from pathlib import Path
from typing import Iterable

from ..host.walk import Cursor, Walk
from ..spec import SandboxError

CLOCK_REALTIME_COARSE = 5  # Linux's: the clock the kernel stamps times from
# statfs magics of the filesystems whose ctimes this machine's kernel stamps from its own clock (an
# allow list: a filesystem not named here keeps the table)
STAMPED_HERE = frozenset({
    0xEF53,  # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x858458F6,  # ramfs
    0xF2F52010,  # f2fs
    0x2FC12FC1,  # zfs
    0xCA451A4E,  # bcachefs
    0x794C7630,  # overlay (the upper's or lower's own)
    0x3153464A,  # jfs
    0x52654973,  # reiserfs
    0x3434,  # nilfs2
})
ORIGIN = ("user.overlay.origin", "trusted.overlay.origin")  # overlayfs's mark on what it copied up
_libc: ctypes.CDLL | None = None
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def coarse_now() -> int:
    """The time the kernel would stamp on an entry changed now, in ns."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)


def past(stamp: int) -> None:
    """Return once the kernel would stamp a change later than `stamp` (a tick at most)."""
    while (now := coarse_now()) <= stamp:
        time.sleep((stamp - now) / 1e9 + 0.0002)


def stamped_here(fd: int) -> bool:
    """Whether the filesystem of `fd` stamps ctimes with this kernel's clock (STAMPED_HERE)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(512)  # struct statfs; f_type, a long, comes first
    if _libc.fstatfs(fd, buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF in STAMPED_HERE


class Baseline:
    """The host workspace as a sandbox started on it: `since` (its start, as the kernel stamps ctimes),
    `known` ({path: the ctime from which its state counts as the start, or None: not there}), or,
    where the kernel's stamps cannot tell, `table` (every entry's (type, size, mtime_ns, mode))."""

    def __init__(self, since: int, known: dict[str, int | None] | None = None,
                 table: dict[str, tuple] | None = None) -> None:
        self.since = since
        self.known: dict[str, int | None] = dict(known or {})
        self.table = table

    @classmethod
    def begin(cls, workspace: Path, since: int, known: dict | None = None, table: dict | None = None) -> Baseline:
        """At a sandbox's start: one fstatfs of the workspace; the walk of every entry only where its
        filesystem's ctimes are not this kernel's (or a table kept by a session of an earlier version)."""
        with _open(workspace) as top:
            if table is None and not stamped_here(top.fd):
                table = _table(top)
        return cls(since, known, table)

    def record(self) -> dict:
        """What a kept session saves of it (JSON)."""
        return {"since": self.since, "known": dict(self.known), "table": self.table}

    # ---- asking ------------------------------------------------------------------------------

    def moved(self, lower: Path, paths: Iterable[str], upper: Path | None = None) -> set[str]:
        """Which of `paths` ('/'-separated, under `lower`) the host changed since the start (made,
        edited, deleted, re-moded, replaced); learns what it can of the rest. `upper`: the
        sandbox's layer, whose copy of a path the host no longer has may say it was the host's."""
        found = set()
        with Cursor.open(lower) as top, (Cursor.open(upper) if upper is not None else Cursor(None)) as mine:
            chain = _Chain(top.fd)
            try:
                for path in sorted(paths):
                    if self._moved(chain, path, mine.fd):
                        found.add(path)
            finally:
                chain.close()
        return found

    def _moved(self, chain: _Chain, path: str, upper: int | None) -> bool:
        if self.table is not None:
            return _entry(chain, path) != self.table.get(path)
        if not path:  # the top itself
            return self._later(path, os.fstat(chain.top))
        *parents, last = path.split("/")
        try:
            depth = chain.reach(parents)
            if depth < len(parents):  # a folder on its way is not there, or is a file or a link
                st = _lstat_at(chain.fd, parents[depth])
                if st is None:  # the folder that would hold it says whether it was there
                    return self._gone(path, "/".join(parents[:depth]), os.fstat(chain.fd), upper)
                return self._gone(path, "/".join(parents[:depth + 1]), st, upper)
            st = _lstat_at(chain.fd, last)
            if st is None:
                return self._gone(path, "/".join(parents), os.fstat(chain.fd), upper)
            return self._later(path, st)
        except OSError:  # a folder we may not enter: nothing to tell it by
            return True

    def _later(self, path: str, st: os.stat_result, learn: bool = True) -> bool:
        """Whether the entry at `path` (there now) is not as it was at the start; one that is, is
        remembered as there (so that its deletion by the host later is told too)."""
        if path in self.known:
            base = self.known[path]
            return base is None or st.st_ctime_ns > base  # None: not there at the start
        if st.st_ctime_ns > self.since:
            return True
        if learn:
            self.known.setdefault(path, self.since)
        return False

    def _gone(self, path: str, holder: str, st: os.stat_result, upper: int | None) -> bool:
        """`path` is not on the host; `holder` ("" for the top), the nearest entry on its way that is,
        has `st`: the path was not there at the start either if `holder` did not change since. If it
        did, the sandbox's copy tells: overlayfs marks what it copied up from the host (the host had
        it after the start, and has deleted it since); what the sandbox made itself is taken as new."""
        if path in self.known:
            return self.known[path] is not None  # there at the start (or once apply wrote it), gone now
        if self.known.get(holder, 0) is not None and self._later(holder, st, learn=False):
            if upper is None or _copied_up(upper, path):
                return True
        self.known.setdefault(path, None)
        return False

    # ---- after apply wrote ---------------------------------------------------------------------

    def rebase(self, lower: Path, paths: Iterable[str]) -> None:
        """`paths` as they are now are their new start: what apply wrote, and the folders it wrote
        into that the host had not changed before (the caller asked `moved` first). Returns once the
        kernel's clock is past their stamps, so that an edit of the person's from then on is later."""
        newest = 0
        with Cursor.open(lower) as top:
            chain = _Chain(top.fd)
            try:
                for path in sorted(paths):
                    if self.table is not None:
                        self.table[path] = _entry(chain, path)
                        continue
                    st = _lstat(chain, path)
                    self.known[path] = None if st is None else st.st_ctime_ns
                    newest = max(newest, self.known[path] or 0)
            finally:
                chain.close()
        past(newest)


class _Chain:
    """Descriptors of the folders from the top down to one path's, kept for the next path (sorted
    paths share most of them): a lookup per path, not a walk from the top. Each is entered by one
    name, O_NOFOLLOW|O_DIRECTORY: a link on the host is never followed."""

    def __init__(self, top: int) -> None:
        self.top = top  # the caller's
        self.fds: list[int] = []
        self.names: list[str] = []

    @property
    def fd(self) -> int:
        return self.fds[-1] if self.fds else self.top

    def reach(self, parents: list[str]) -> int:
        """Enter as many of `parents` as are folders on the host; how many that is."""
        same = 0
        while same < min(len(self.names), len(parents)) and self.names[same] == parents[same]:
            same += 1
        while len(self.names) > same:
            os.close(self.fds.pop())
            self.names.pop()
        for name in parents[same:]:
            try:
                fd = os.open(name, _DIR, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    break
                raise
            self.fds.append(fd)
            self.names.append(name)
        return len(self.names)

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())
        self.names.clear()


def folders_above(paths: Iterable[str]) -> set[str]:
    """Every folder above `paths` ("" for the top)."""
    found = set()
    for path in paths:
        while path:
            path = path.rpartition("/")[0]
            if path in found:
                break
            found.add(path)
    return found


def _copied_up(upper: int, path: str) -> bool:
    """Whether the sandbox's `path` in its layer `upper` is a copy overlayfs made of the host's
    (it marks each with an origin; the sandbox can neither set nor forge one)."""
    *parents, name = path.split("/")
    with Cursor(os.dup(upper)) as here:
        if not all(here.down(part) for part in parents):
            return False
        for attr in ORIGIN:
            try:  # the entry itself, never a link's target; its folder through our descriptor
                os.getxattr(f"/proc/self/fd/{here.fd}/{name}", attr, follow_symlinks=False)
                return True
            except OSError:
                continue
    return False


def _lstat_at(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _lstat(chain: _Chain, path: str) -> os.stat_result | None:
    """`path`'s entry under the chain's top, reached without following a link (the top's own for "")."""
    if not path:
        return os.fstat(chain.top)
    *parents, name = path.split("/")
    return _lstat_at(chain.fd, name) if chain.reach(parents) == len(parents) else None


def _entry(chain: _Chain, path: str) -> tuple | None:
    """`path`'s entry as snapshot notes it (type, size, mtime_ns, mode); None: not there."""
    try:
        st = _lstat(chain, path)
    except OSError:  # a folder we may not enter: it cannot be what the sandbox started with
        return ("unreadable",)
    return None if st is None else (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))


# ---- the table of every entry, where the kernel's stamps cannot be trusted -------------------

def _open(workspace: Path) -> Cursor:
    try:
        return Cursor.open(workspace)
    except OSError as exc:  # missing, a file, unreadable: the person's typo, not a crash
        raise SandboxError(f"workspace {str(workspace)!r}: {exc.strerror}; give a folder you can read "
                           "(--workspace DIR)") from None


def snapshot(root: Path) -> dict[str, tuple]:
    """(type, size, mtime_ns, mode) of every entry under `root`, links not followed."""
    with _open(root) as top:
        return _table(top)


def _table(top: Cursor) -> dict[str, tuple]:
    walk = _Snapshot(top)
    walk.run()
    return walk.found


class _Snapshot(Walk):
    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.found: dict[str, tuple] = {}

    def entry(self, name: str, st: os.stat_result) -> bool:
        self.found[self.rel(name)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
        return True

    def refuse(self, name: str, why: str) -> None:
        pass  # a host directory we cannot read: nothing below it can be applied either
