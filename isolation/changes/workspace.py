"""Review what a sandbox changed in a workspace laid over /testbed copy-on-write (writeback.py
applies it).

The overlay's upper directory holds every path the sandbox touched: files and links it wrote,
whiteouts (0:0 character devices) for what it deleted, and directories marked opaque when it
replaced a whole directory. The upper is written by a hostile sandbox, so it is walked beside the
host directory with host/walk.py's descriptor cursors: no link on either side is ever followed (a host
`data -> ~/elsewhere` is a symlink that may be replaced, never a directory to list or write
into), no fifo is opened, no depth is too deep. One walk (`review`) gives the list, the diff made
from the same reads, and the sha256 and mode of each regular file the sandbox wrote as it was
read, so that what is applied is what was shown. Where the sandbox deleted, what the host made
or changed there after the sandbox started (its ctime says so) is the host's, shown as such and
never applied as a deletion.

Some changes are held back (`Change.held` says why): written only when named, never by an "apply
all". They are what would configure or run something on the host once applied, decided once for
the whole change list by isolation.changes.heldback (the hooks and config of every repository in or
above the change, nested repositories, venvs, caches, new dot-files, CI and tool configs, agent
instructions, ignored paths, the user's patterns), links the sandbox made, files that
gain an executable bit, the deletion half of a held-back move (so a move goes whole or not at
all), deleted folders holding a held-back deletion, and added folders holding nothing but
held-back changes (an "apply all" leaves no empty `.github/`).
"""
from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from .heldback import held_kind, hold_reasons, move_reason, pair_moves, without_kind
from ..host.walk import Cursor, Walk, kind, open_file, read_head, read_link, same_content
from ..spec import SandboxError

OPAQUE = ("user.overlay.opaque", "trusted.overlay.opaque")
DIFF_LIMIT = 1 << 20  # files larger than this are named, not diffed
_CHUNK = 1 << 20
HOSTS = "made or changed on the host after the sandbox started: yours, not the model's; kept as it is"
HOSTS_FOLDER = "it holds what the host made or changed after the sandbox started: kept, with that"


class WorkspaceConflict(SandboxError):
    """The host copy changed since the sandbox started; nothing was applied."""


@dataclass(frozen=True)
class Change:
    """One path under /testbed that differs from the host workspace."""

    path: str  # relative to /testbed, '/'-separated; directories end with '/'
    kind: str  # "added", "modified", "deleted", "mode", "type", "refused" (could not be reviewed), or
    # "host" (an entry the sandbox's deletion hides that the host made or changed after the sandbox
    # started: the host's, shown and never applied)
    detail: str = ""  # e.g. "symlink -> TARGET", "644 -> 755", "file -> directory"
    held: str = ""  # why it is applied only when named ("" for most changes)


@dataclass(frozen=True, eq=False)
class Review:
    """What one walk showed: the changes, the diff made from the very bytes that walk read (None
    when only the list was asked for), and for apply() what it read of each regular file the
    sandbox wrote: {path: (sha256, mode)}. apply(reviewed=...) writes those bytes or nothing."""

    changes: list[Change]
    diff: str | None = None
    content: dict[str, tuple[bytes, int]] = field(default_factory=dict, repr=False)


@dataclass
class _Site:
    """Where a change was met, valid during the callback: the sandbox's entry `new` in directory
    `new_dir`, the host's `old` under cursor `host`, and `parts`, the directories above them."""

    name: str
    parts: list[str]
    host: Cursor
    old: os.stat_result | None
    new_dir: int | None = None
    new: os.stat_result | None = None
    target: str | None = None  # where `new` points, when it is a symlink
    digest: bytes | None = None  # sha256 of `new`, a regular file, as read once (when the walk reads)
    head: bytes | None = None  # its first bytes, from that same read, for the diff
    same: bool | None = None  # whether that read found the host's regular file's bytes


Found = Callable[[Change, "_Site | None"], None]


def mount_points(spec) -> frozenset[str]:
    """Directories under /testbed that are our mount points, not the sandbox's work (none beside a
    workspace: the model's own folders are under /agent then)."""
    places = spec.places
    found = {places.input, places.output} if spec.workspace is None else set()
    found |= {path for path, given in ((places.input, spec.input_dir), (places.documents, spec.documents_dir))
              if given}
    return frozenset(f"{path[len('/testbed/'):]}/" for path in found if path.startswith("/testbed/"))


class _Written(Walk):
    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.found: list[str] = []

    def entry(self, name: str, st: os.stat_result) -> bool:
        self.found.append(self.rel(name))
        return True

    def refuse(self, name: str, why: str) -> None:
        pass  # what cannot be read here cannot be applied either


def written_paths(upper: Path) -> list[str]:
    """Every path the sandbox wrote (files, folders, deletions) in its layer `upper`, no file read."""
    with Cursor.open(upper) as top:
        walk = _Written(top)
        walk.run()
        return walk.found


# ---- what the sandbox changed --------------------------------------------------------------

class _Review(Walk):
    """The upper (what the sandbox wrote) walked beside the lower (the host workspace). `since`:
    when the sandbox started (the kernel's ctime clock), to tell the host's own later entries from
    what the sandbox deleted; `read`: None to compare files as cheaply as it can, else read each
    regular file the sandbox wrote once, hashed whole, keeping its first `read` bytes."""

    def __init__(self, upper: Cursor, lower: Cursor, found: Found, since: int | None = None,
                 read: int | None = None) -> None:
        super().__init__(upper)
        self.lower, self.found, self.since, self.read = lower, found, since, read

    def entry(self, name: str, st: os.stat_result) -> bool:
        old = self.lower.lstat(name)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout: deleted
            if old is not None:
                self._deleted(name, old)
            return False
        site = _Site(name, self.parts, self.lower, old, self.top.fd, st)
        if stat.S_ISLNK(st.st_mode):
            site.target = read_link(self.top.fd, name)
            if site.target is None:
                self.found(Change(self.rel(name), "refused", "it changed while it was being read; review it again"),
                           None)
                return False
        change = _compare(self.rel(name), site, self.read)
        if change:
            self.found(change, None if change.kind == "refused" else site)
        return True  # only directories are entered

    def entered(self, name: str, names: list[str]) -> None:
        self.lower.follow(name)
        if self.lower.present and _opaque(self.top.fd):  # replaced wholesale: what only the host has is gone
            for gone in sorted(set(self.lower.names()) - set(names)):
                old = self.lower.lstat(gone)
                if old is not None:
                    self._deleted(gone, old)

    def left(self, name: str) -> None:
        self.lower.up()

    def refuse(self, name: str, why: str) -> None:
        self.found(Change(self.rel(name) + "/", "refused", f"{why}; not reviewed, never applied"), None)

    def _deleted(self, name: str, old: os.stat_result) -> None:
        if not stat.S_ISDIR(old.st_mode):
            if _hosts(old, self.since):
                self.found(Change(self.rel(name), "host", HOSTS), None)
            else:
                self.found(Change(self.rel(name), "deleted"), _Site(name, self.parts, self.lower, old))
            return
        with Cursor(os.dup(self.lower.fd)) as host:
            _Deleted(host, name, self.rel(name), self.found, self.since).run()


class _Deleted(Walk):
    """A host directory the sandbox removed: each non-directory below it, then the directory.
    What the host made or changed there after `since` is the host's ("host"), and so is each
    folder above it: the folder is not deleted, the rest of what was in it is."""

    def __init__(self, host: Cursor, name: str, path: str, found: Found, since: int | None = None) -> None:
        super().__init__(host, [name])
        self.above, self.found, self.since = path[:-len(name)], found, since
        self.kept = [False]  # per level: something of the host's is below
        self.made: list[bool] = []  # per folder entered: an empty one the host made

    def entry(self, name: str, st: os.stat_result) -> bool:
        if stat.S_ISDIR(st.st_mode):
            return True
        if _hosts(st, self.since):
            self.found(Change(self.above + self.rel(name), "host", HOSTS), None)
            self.kept[-1] = True
        else:
            self.found(Change(self.above + self.rel(name), "deleted"), _Site(name, [], self.top, st))
        return True

    def entered(self, name: str, names: list[str]) -> None:
        self.made.append(not names and _hosts(os.fstat(self.top.fd), self.since))
        self.kept.append(self.made[-1])

    def left(self, name: str) -> None:
        kept, made = self.kept.pop(), self.made.pop()
        self.kept[-1] = self.kept[-1] or kept
        path = f"{self.above}{self.rel(name)}/"
        if made or (kept and not self.parts):
            self.found(Change(path, "host", HOSTS if made else HOSTS_FOLDER), None)
        elif not self.parts:  # a folder inside goes with the one the sandbox deleted
            old = self.top.lstat(name)
            if old is not None:
                self.found(Change(path, "deleted"), _Site(name, [], self.top, old))

    def refuse(self, name: str, why: str) -> None:
        self.found(Change(f"{self.above}{self.rel(name)}/", "refused", f"deleted in the sandbox, but {why} "
                          "on the host; not applied"), None)


def _hosts(st: os.stat_result, since: int | None) -> bool:
    """Whether the host made or changed this entry after the sandbox started: its ctime (which the
    kernel sets, and no one can set back) is later."""
    return since is not None and st.st_ctime_ns > since


def _compare(path: str, site: _Site, read: int | None = None) -> Change | None:
    old, new = site.old, site.new
    if stat.S_ISDIR(new.st_mode):
        if old is None:
            return Change(path + "/", "added")
        if not stat.S_ISDIR(old.st_mode):
            return Change(path, "type", f"{kind(old)} -> directory")
        return Change(path + "/", "mode", _modes(old, new)) if _mode(old) != _mode(new) else None
    if stat.S_ISREG(new.st_mode) and read is not None and not _read_new(site, read):
        return Change(path, "refused", "it changed while it was being read; review it again")
    if old is None:
        if stat.S_ISREG(new.st_mode):
            return Change(path, "added", f"mode {_mode(new):o}" if new.st_mode & 0o111 else "")
        return Change(path, "added", _describe(site))
    if stat.S_IFMT(old.st_mode) != stat.S_IFMT(new.st_mode):
        return Change(path, "type", f"{kind(old)} -> {_describe(site)}")
    if stat.S_ISLNK(new.st_mode):
        before = os.readlink(site.name, dir_fd=site.host.fd)
        return Change(path, "modified", f"{_describe(site)} (was -> {before})") if before != site.target else None
    if stat.S_ISREG(new.st_mode) and not (site.same if site.same is not None else (
            old.st_size == new.st_size and same_content(site.host.fd, site.new_dir, site.name))):
        return Change(path, "modified", _modes(old, new) if _mode(old) != _mode(new) else "")
    return Change(path, "mode", _modes(old, new)) if _mode(old) != _mode(new) else None


def _read_new(site: _Site, keep: int) -> bool:
    """Read the sandbox's regular file once: its sha256, its first `keep` bytes and, beside a host
    regular file of its size, whether the bytes are the host's, into `site`; False if it is no
    regular file any more (the sandbox swapped it)."""
    fd = open_file(site.new_dir, site.name)
    if fd is None:
        return False
    old, host = site.old, None
    try:
        if old is not None and stat.S_ISREG(old.st_mode) and old.st_size == os.fstat(fd).st_size:
            host = open_file(site.host.fd, site.name)
        digest, head, same = hashlib.sha256(), bytearray(), host is not None
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
            if len(head) < keep:
                head += chunk[:keep - len(head)]
            if same:
                same = os.read(host, len(chunk)) == chunk
        site.digest, site.head = digest.digest(), bytes(head)
        site.same = same and os.read(host, 1) == b""
        return True
    finally:
        for one in (fd, host):
            if one is not None:
                os.close(one)


def _describe(site: _Site) -> str:
    what = kind(site.new)
    if what == "symlink":
        return f"symlink -> {site.target}"
    return what if what == "file" else f"{what} (special files are never applied)"


def _opaque(fd: int) -> bool:
    for name in OPAQUE:
        try:
            if os.getxattr(fd, name) == b"y":
                return True
        except OSError:
            pass
    return False


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode) & 0o777  # never setuid, setgid or sticky on the host


def _modes(old, new) -> str:
    return f"{_mode(old):o} -> {_mode(new):o}"


def _held(change: Change, site: _Site | None) -> Change:
    """`change` with `held` set where the walk's own data says so: a link or a new executable bit."""
    if site is None or change.kind == "refused":
        return change
    why = _gains_exec(site)
    if not why and site.target is not None:
        why = f"a symlink made in the sandbox, -> {site.target}"
    return replace(change, held=why) if why else change


def _decide(lower: Path, upper: Path, found: list[Change], hold: tuple[str, ...], facts: dict[str, tuple],
            content: dict[str, tuple[bytes, int]]) -> list[Change]:
    """`found` with `held` set, decided once for the whole list (isolation.changes.heldback first),
    then what must go with it: the deletion half of a held-back move, a deleted folder holding a
    held-back deletion, an added folder holding nothing else."""
    reasons = hold_reasons(lower, [(c.path, c.kind) for c in found if c.kind not in ("refused", "host")], hold)
    decided = [replace(c, held=reasons[c.path]) if c.path in reasons else c for c in found]
    decided = _hold_moves(lower, upper, decided, facts, content)
    return _hold_empty_folders(_hold_deleted_folders(decided))


def _identity(change: Change, site: _Site) -> tuple | None:
    """What a file or link the change adds (or deletes) is, to match the halves of a move: a
    file's size and mode (its bytes are compared only then), a link's target."""
    if change.kind == "deleted":
        st, target = site.old, None
        if st is not None and stat.S_ISLNK(st.st_mode):
            target = read_link(site.host.fd, site.name)
    elif change.kind in ("added", "modified", "type"):
        st, target = site.new, site.target
    else:
        return None
    if target is not None:
        return "link", target
    return ("file", st.st_size, _mode(st)) if st is not None and stat.S_ISREG(st.st_mode) else None


def _hold_moves(lower: Path, upper: Path, found: list[Change], facts: dict[str, tuple],
                content: dict[str, tuple[bytes, int]]) -> list[Change]:
    """A deletion that is the other half of a held-back addition (the same bytes and mode, or the
    same link target: a file moved) is held back too, naming it: "apply all" would otherwise take
    the old path away and leave the new one out."""
    made = {c.path: facts[c.path] for c in found if c.held and c.path in facts and c.kind != "deleted"}
    gone = {c.path: facts[c.path] for c in found if not c.held and c.path in facts and c.kind == "deleted"}
    if not made or not gone:
        return found

    def same(old: str, new: str) -> bool:
        if facts[new][0] == "link":
            return True
        mine = content[new][0] if new in content else _hash_at(upper, new)
        return mine is not None and mine == _hash_at(lower, old)

    pairs = pair_moves(made, gone, same)
    why = {c.path: c.held for c in found}
    return [replace(c, held=move_reason(pairs[c.path], why[pairs[c.path]])) if c.path in pairs else c
            for c in found]


def _hash_at(root: Path, path: str) -> bytes | None:
    """sha256 of regular file `path` under `root`, reached without links; None if it is none."""
    *parents, name = path.split("/")
    with Cursor.open(root) as cursor:
        if not all(cursor.down(part) for part in parents):
            return None
        fd = open_file(cursor.fd, name)
    if fd is None:
        return None
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
        return digest.digest()
    finally:
        os.close(fd)


def _hold_deleted_folders(found: list[Change]) -> list[Change]:
    """A deleted folder holding a held-back deletion is held back too: deleting the folder would
    delete that as well."""
    folders = {c.path for c in found if c.kind == "deleted" and c.path.endswith("/") and not c.held}
    inner: dict[str, Change] = {}
    for change in found if folders else ():
        if change.held and change.kind == "deleted":
            path = change.path.rstrip("/")
            while "/" in path:
                path = path.rpartition("/")[0]
                if f"{path}/" in folders:
                    inner.setdefault(f"{path}/", change)
    return [replace(c, held=f"{held_kind(inner[c.path].held)}: deleting it would delete the held-back "
                    f"{inner[c.path].path} ({without_kind(inner[c.path].held)})") if c.path in inner else c
            for c in found]


def _hold_empty_folders(found: list[Change]) -> list[Change]:
    """An added folder whose every change below is held back is held back too, with their kind:
    an "apply all" would make it empty (`.github/` without its workflows)."""
    added = {c.path for c in found if c.kind == "added" and c.path.endswith("/") and not c.held}
    below: dict[str, list[Change]] = {}
    for change in found:
        if change.kind in ("refused", "host") or change.path in added:
            continue
        names = change.path.rstrip("/").split("/")
        for i in range(1, len(names)):
            folder = "/".join(names[:i]) + "/"
            if folder in added:
                below.setdefault(folder, []).append(change)
    empty = {folder: inner[0] for folder, inner in below.items() if all(c.held for c in inner)}
    if not empty:
        return found
    return [replace(c, held=f"{held_kind(empty[c.path].held)}: it holds only held-back changes ("
                    f"{empty[c.path].path}: {without_kind(empty[c.path].held)})") if c.path in empty else c
            for c in found]


def _gains_exec(site: _Site) -> str:
    new, old = site.new, site.old
    if new is None or not stat.S_ISREG(new.st_mode):
        return ""
    was_file = old is not None and stat.S_ISREG(old.st_mode)
    if not new.st_mode & 0o111 & ~(_mode(old) if was_file else 0):
        return ""
    if was_file:
        return f"it gains an executable bit ({_mode(old):o} -> {_mode(new):o})"
    return f"a new executable file (mode {_mode(new):o})"


def _review(lower: Path, upper: Path, found: Found, skip: frozenset[str], since: int | None = None,
            read: int | None = None) -> None:
    """Walk the changes, calling `found(change, site)` for each (see _Review for `since` and `read`)."""
    def seen(change: Change, site: _Site | None) -> None:
        if change.path not in skip:
            found(_held(change, site), site)

    with Cursor.open(upper) as top, Cursor.open(lower) as host:
        _Review(top, host, seen, since, read).run()


def review(lower: Path, upper: Path, skip: frozenset[str] = frozenset(), hold: tuple[str, ...] = (),
           host: bool = True, since: int | None = None, text: bool = True, read: bool = True) -> Review:
    """Every difference between the host workspace and the sandbox's view of /testbed, in one walk:
    the changes, with `held` decided for the whole list, and with `text` their unified diff made from
    the bytes that walk read; with `read`, each regular file the sandbox wrote is read once, whole,
    and its sha256 and mode kept (Review.content) for apply() to write nothing else.
    `skip`: paths that are not the sandbox's work; `hold`: the user's held-back patterns, on top of
    the behavioural rules (isolation.changes.heldback); `host`: False when `lower` is no host
    workspace (an empty folder of ours: nothing can be applied, no repository around it to ask);
    `since`: when the sandbox started, as the kernel stamps ctimes (what the host made or changed
    later, where the sandbox deleted, is the host's: kind "host")."""
    found: list[Change] = []
    pieces: list[tuple[str, str]] = []
    content: dict[str, tuple[bytes, int]] = {}
    facts: dict[str, tuple] = {}

    def seen(change: Change, site: _Site | None) -> None:
        found.append(change)
        if text:
            pieces.append((change.path, _piece(change, site)))
        if site is not None:
            if site.digest is not None and change.kind in ("added", "modified", "type"):
                content[change.path] = (site.digest, _mode(site.new))
            fact = _identity(change, site)
            if fact is not None:
                facts[change.path] = fact
            site.head = None  # the diff has what it needs; a walk keeps no file's bytes

    _review(lower, upper, seen, skip, since, (DIFF_LIMIT + 1 if text else 0) if read else None)
    decided = _decide(lower, upper, found, hold, facts, content) if host else found
    return Review(sorted(decided, key=lambda c: c.path),
                  "".join(text for _, text in sorted(pieces, key=lambda piece: piece[0])) if text else None, content)


# ---- showing -------------------------------------------------------------------------------

def _piece(change: Change, site: _Site | None) -> str:
    path = change.path
    head = f"{change.kind}: {path} {change.detail}".rstrip() + "\n"
    if site is None or path.endswith("/") or change.kind in ("mode", "type") or site.target is not None \
            or (site.new is not None and not stat.S_ISREG(site.new.st_mode)):
        return head
    return (head if change.detail else "") + _text_diff(change, site)


def _text_diff(change: Change, site: _Site) -> str:
    path = change.path
    before = read_head(site.host.fd, site.name, DIFF_LIMIT + 1) if change.kind != "added" else b""
    after = b"" if change.kind == "deleted" else site.head if site.head is not None \
        else read_head(site.new_dir, site.name, DIFF_LIMIT + 1)
    if before is None or after is None:
        return f"{change.kind}: {path} (it changed while it was being read)\n"
    texts = [_text(data) for data in (before, after)]
    if None in texts:
        return f"Binary files a/{path} and b/{path} differ\n"
    a = f"a/{path}" if change.kind != "added" else "/dev/null"
    b = f"b/{path}" if change.kind != "deleted" else "/dev/null"
    out = list(difflib.unified_diff(texts[0].splitlines(True), texts[1].splitlines(True), a, b))
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n\\ No newline at end of file\n"
    return "".join(out)


def _text(data: bytes) -> str | None:
    if len(data) > DIFF_LIMIT or b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
