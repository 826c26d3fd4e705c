"""Review and apply what a sandbox changed in a workspace laid over /testbed copy-on-write.

The overlay's upper directory holds every path the sandbox touched: files and links it wrote,
whiteouts (0:0 character devices) for what it deleted, and directories marked opaque when it
replaced a whole directory. The upper is written by a hostile sandbox, so it is walked beside the
host directory with host/walk.py's descriptor cursors: no link on either side is ever followed (a host
`data -> ~/elsewhere` is a symlink that may be replaced, never a directory to list or write
into), no fifo is opened, no depth is too deep. An apply first compares the host with how it was
when the sandbox started and writes nothing if a chosen path moved meanwhile; then it walks again
and writes each change through its parent's descriptor when it meets it, re-checked there.

Some changes are held back (`Change.held` says why): written only when named, never by an "apply
all". They are what would configure or run something on the host once applied, decided once for
the whole change list by isolation.changes.heldback (the repository's hooks and config, nested repositories,
venvs, CI and tool configs, ignored paths, the user's patterns), links the sandbox made, files that
gain an executable bit, and added folders holding nothing but held-back changes (an "apply all"
leaves no empty `.github/`). A link is also written into the workspace only, unless allowed. No
mode written is wider than the user's umask allows.
"""
from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from .heldback import held_kind, hold_reasons
from ..host.walk import (
    Cursor,
    RefusedPaths,
    Walk,
    chmod_at,
    kind,
    link_leaves,
    open_file,
    place_file,
    place_link,
    read_head,
    read_link,
    remove_at,
    same_content,
)
from ..spec import SandboxError

OPAQUE = ("user.overlay.opaque", "trusted.overlay.opaque")
DIFF_LIMIT = 1 << 20  # files larger than this are named, not diffed


class WorkspaceConflict(SandboxError):
    """The host copy changed since the sandbox started; nothing was applied."""


@dataclass(frozen=True)
class Change:
    """One path under /testbed that differs from the host workspace."""

    path: str  # relative to /testbed, '/'-separated; directories end with '/'
    kind: str  # "added", "modified", "deleted", "mode", "type", or "refused" (could not be reviewed)
    detail: str = ""  # e.g. "symlink -> TARGET", "644 -> 755", "file -> directory"
    held: str = ""  # why it is applied only when named ("" for most changes)


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


Found = Callable[[Change, "_Site | None"], None]


def mount_points(spec) -> frozenset[str]:
    """Directories under /testbed that are our mount points, not the sandbox's work (none beside a
    workspace: the model's own folders are under /agent then)."""
    places = spec.places
    found = {places.input, places.output} if spec.workspace is None else set()
    found |= {path for path, given in ((places.input, spec.input_dir), (places.documents, spec.documents_dir))
              if given}
    return frozenset(f"{path[len('/testbed/'):]}/" for path in found if path.startswith("/testbed/"))


# ---- what the host looked like -------------------------------------------------------------

class _Snapshot(Walk):
    def __init__(self, top: Cursor) -> None:
        super().__init__(top)
        self.found: dict[str, tuple] = {}

    def entry(self, name: str, st: os.stat_result) -> bool:
        self.found[self.rel(name)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
        return True

    def refuse(self, name: str, why: str) -> None:
        pass  # a host directory we cannot read: nothing below it can be applied either


def snapshot(root: Path) -> dict[str, tuple]:
    """(type, size, mtime_ns, mode) of every entry under `root`, links not followed."""
    try:
        top = Cursor.open(root)
    except OSError as exc:  # missing, a file, unreadable: the person's typo, not a crash
        raise SandboxError(f"workspace {str(root)!r}: {exc.strerror}; give a folder you can read "
                           "(--workspace DIR)") from None
    with top:
        walk = _Snapshot(top)
        walk.run()
        return walk.found


# ---- what the sandbox changed --------------------------------------------------------------

class _Review(Walk):
    """The upper (what the sandbox wrote) walked beside the lower (the host workspace)."""

    def __init__(self, upper: Cursor, lower: Cursor, found: Found) -> None:
        super().__init__(upper)
        self.lower, self.found = lower, found

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
        change = _compare(self.rel(name), site)
        if change:
            self.found(change, site)
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
            self.found(Change(self.rel(name), "deleted"), _Site(name, self.parts, self.lower, old))
            return
        with Cursor(os.dup(self.lower.fd)) as host:
            _Deleted(host, name, self.rel(name), self.found).run()


class _Deleted(Walk):
    """A host directory the sandbox removed: each non-directory below it, then the directory."""

    def __init__(self, host: Cursor, name: str, path: str, found: Found) -> None:
        super().__init__(host, [name])
        self.above, self.found = path[:-len(name)], found

    def entry(self, name: str, st: os.stat_result) -> bool:
        if not stat.S_ISDIR(st.st_mode):
            self.found(Change(self.above + self.rel(name), "deleted"), _Site(name, [], self.top, st))
        return True

    def left(self, name: str) -> None:
        if not self.parts:  # back beside the directory itself
            old = self.top.lstat(name)
            if old is not None:
                self.found(Change(f"{self.above}{name}/", "deleted"), _Site(name, [], self.top, old))

    def refuse(self, name: str, why: str) -> None:
        self.found(Change(f"{self.above}{self.rel(name)}/", "refused", f"deleted in the sandbox, but {why} "
                          "on the host; not applied"), None)


def _compare(path: str, site: _Site) -> Change | None:
    old, new = site.old, site.new
    if stat.S_ISDIR(new.st_mode):
        if old is None:
            return Change(path + "/", "added")
        if not stat.S_ISDIR(old.st_mode):
            return Change(path, "type", f"{kind(old)} -> directory")
        return Change(path + "/", "mode", _modes(old, new)) if _mode(old) != _mode(new) else None
    if old is None:
        if stat.S_ISREG(new.st_mode):
            return Change(path, "added", f"mode {_mode(new):o}" if new.st_mode & 0o111 else "")
        return Change(path, "added", _describe(site))
    if stat.S_IFMT(old.st_mode) != stat.S_IFMT(new.st_mode):
        return Change(path, "type", f"{kind(old)} -> {_describe(site)}")
    if stat.S_ISLNK(new.st_mode):
        before = os.readlink(site.name, dir_fd=site.host.fd)
        return Change(path, "modified", f"{_describe(site)} (was -> {before})") if before != site.target else None
    if stat.S_ISREG(new.st_mode) and (old.st_size != new.st_size
                                      or not same_content(site.host.fd, site.new_dir, site.name)):
        return Change(path, "modified", _modes(old, new) if _mode(old) != _mode(new) else "")
    return Change(path, "mode", _modes(old, new)) if _mode(old) != _mode(new) else None


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


def _decide(lower: Path, found: list[Change], hold: tuple[str, ...]) -> list[Change]:
    """`found` with `held` set, decided once for the whole list (isolation.changes.heldback first)."""
    reasons = hold_reasons(lower, [(c.path, c.kind) for c in found if c.kind != "refused"], hold)
    decided = [replace(c, held=reasons[c.path]) if c.path in reasons else c for c in found]
    return _hold_empty_folders(decided)


def _hold_empty_folders(found: list[Change]) -> list[Change]:
    """An added folder whose every change below is held back is held back too, with their kind:
    an "apply all" would make it empty (`.github/` without its workflows)."""
    added = {c.path for c in found if c.kind == "added" and c.path.endswith("/") and not c.held}
    below: dict[str, list[Change]] = {}
    for change in found:
        if change.kind == "refused" or change.path in added:
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
                    f"{empty[c.path].path}: {_without_kind(empty[c.path].held)})") if c.path in empty else c
            for c in found]


def _without_kind(why: str) -> str:
    head, sep, rest = why.partition(": ")
    return rest if sep and held_kind(why) == head else why


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


def _review(lower: Path, upper: Path, found: Found, skip: frozenset[str]) -> None:
    def seen(change: Change, site: _Site | None) -> None:
        if change.path not in skip:
            found(_held(change, site), site)

    with Cursor.open(upper) as top, Cursor.open(lower) as host:
        _Review(top, host, seen).run()


def changes(lower: Path, upper: Path, skip: frozenset[str] = frozenset(), hold: tuple[str, ...] = (),
            host: bool = True) -> list[Change]:
    """Every difference between the host workspace and the sandbox's view of /testbed; `skip`:
    paths that are not the sandbox's work; `hold`: the user's held-back patterns, on top of the
    behavioural rules (isolation.changes.heldback); `host`: False when `lower` is no host workspace (an
    empty folder of ours: nothing can be applied, and no repository around it is to be asked)."""
    found: list[Change] = []
    _review(lower, upper, lambda change, site: found.append(change), skip)
    return sorted(_decide(lower, found, hold) if host else found, key=lambda c: c.path)


# ---- showing -------------------------------------------------------------------------------

def diff(lower: Path, upper: Path, skip: frozenset[str] = frozenset()) -> str:
    """A unified diff of the changes; links, special, binary and large files are named, not dumped,
    and a file's mode change (a new executable bit) is a line of its own above its text diff."""
    pieces: list[tuple[str, str]] = []
    _review(lower, upper, lambda change, site: pieces.append((change.path, _piece(change, site))), skip)
    return "".join(text for _, text in sorted(pieces, key=lambda piece: piece[0]))


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
    after = read_head(site.new_dir, site.name, DIFF_LIMIT + 1) if change.kind != "deleted" else b""
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


# ---- applying ------------------------------------------------------------------------------

def apply(lower: Path, upper: Path, before: dict[str, tuple], paths: list[str] | None = None,
          allow_outside_links: bool = False, skip: frozenset[str] = frozenset(),
          hold: tuple[str, ...] = ()) -> list[Change]:
    """Write the chosen changes (all when `paths` is None) to the host; the applied ones are returned.

    WorkspaceConflict, writing nothing, if a chosen path moved on the host since `before` (which is
    then brought up to date for what was written). Refused (listed in RefusedPaths, raised once
    the rest is written): held-back changes (`Change.held`: see changes(); `hold`: the user's own
    patterns on top) unless named in `paths`, links that leave the workspace unless
    `allow_outside_links`, special files, anything that changed since review. Modes are masked
    by the umask."""
    named = None if paths is None else {p.strip("/") for p in paths}
    chosen = {_key(c): c for c in changes(lower, upper, skip, hold) if named is None or c.path.rstrip("/") in named}
    now = snapshot(lower)
    conflicts = sorted({p for p in (c.path.rstrip("/") for c in chosen.values()) if now.get(p) != before.get(p)})
    if conflicts:
        raise WorkspaceConflict("the host copy changed since the sandbox started, so nothing was applied: "
                                + ", ".join(conflicts) + ". Fix: review those files, then apply the others "
                                "by name, or start a new sandbox on the current workspace")
    writer = _Writer(lower, chosen, named is not None, allow_outside_links)
    try:
        _review(lower, upper, writer.found, skip)
    finally:
        _rebase(before, snapshot(lower), {c.path.rstrip("/") for c in writer.applied}, everything=named is None)
    refused = writer.refused + [f"{c.path.rstrip('/')} (it changed in the sandbox since it was reviewed; review it "
                                "again)" for c in sorted((chosen[k] for k in chosen.keys() - writer.seen),
                                                         key=lambda c: c.path)]
    refused += [f"{p} (no such change: see changes())"
                for p in sorted((named or set()) - {c.path.rstrip("/") for c in chosen.values()})]
    if refused:
        raise RefusedPaths(f"applied {len(writer.applied)} change(s) to {lower}", refused, writer.outside, writer.held)
    return writer.applied


def _rebase(before: dict[str, tuple], now: dict[str, tuple], done: set[str], everything: bool) -> None:
    """Take what was written as the new starting point, so a later apply does not see conflicts in it."""
    if everything:
        before.clear()
        before.update(now)
        return
    below = tuple(f"{path}/" for path in done)
    for key in [k for k in before if k in done or k.startswith(below)]:
        del before[key]
    before.update({k: v for k, v in now.items() if k in done or k.startswith(below)})


class _Writer:
    """Writes the chosen changes as the second walk meets them, each still as it was reviewed."""

    def __init__(self, root: Path, chosen: dict[tuple, Change], by_name: bool, allow_outside_links: bool) -> None:
        self.root, self.chosen, self.by_name, self.allow = root, chosen, by_name, allow_outside_links
        self.applied: list[Change] = []
        self.refused: list[str] = []
        self.outside: dict[str, str] = {}  # links refused only for leaving the workspace
        self.held: dict[str, str] = {}  # held-back changes refused for not being named, and why
        self.mask = 0o777 & ~_umask()
        self.seen: set[tuple] = set()

    def found(self, change: Change, site: _Site | None) -> None:
        decided = self.chosen.get(_key(change))
        if decided is None:  # not asked for, or no longer what the review showed
            return
        self.seen.add(_key(change))
        change = decided  # with the review's decision of what is held back
        key = change.path.rstrip("/")
        why = self._refusal(key, change, site)
        if not why:
            try:
                _write(change, site, self.mask)
                self.applied.append(change)
                return
            except (OSError, SandboxError) as exc:
                why = f"could not be written: {exc}"
        self.refused.append(f"{key} ({why})")

    def _refusal(self, key: str, change: Change, site: _Site | None) -> str:
        if site is None:
            return change.detail
        new = site.new
        if new is not None and change.kind != "mode" and kind(new) not in ("file", "directory", "symlink"):
            return f"a {kind(new)} made in the sandbox: special files are never applied"
        if change.held and not self.by_name:
            self.held[key] = change.held
            return f"{change.held}: held back, applied only by name, e.g. apply([{key!r}])"
        if site.target is not None and not self.allow and link_leaves(self.root, site.parts, site.target):
            self.outside[key] = site.target
            return (f"a symlink to {site.target}, which leaves the workspace; to take it anyway: "
                    f"apply([{key!r}], allow_outside_links=True)")
        return ""


def _key(change: Change) -> tuple[str, str, str]:
    """What a change is, without the decision to hold it back (made once, for the whole list)."""
    return change.path, change.kind, change.detail


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _write(change: Change, site: _Site, mask: int) -> None:
    name, new = site.name, site.new
    if change.kind == "deleted":
        remove_at(site.host.fd, name)
        return
    parent = site.host.make_missing()
    if change.kind == "mode":
        chmod_at(parent, name, _mode(new) & mask)
        return
    if change.kind == "type":
        remove_at(parent, name)  # the host's entry itself: a link is removed, not followed
    if stat.S_ISDIR(new.st_mode):
        os.mkdir(name, 0o700, dir_fd=parent)
        chmod_at(parent, name, _mode(new) & mask)
    elif site.target is not None:
        place_link(site.target, parent, name, replace=True)
    else:
        src = open_file(site.new_dir, name)
        if src is None:
            raise SandboxError("it changed while it was being applied; apply it again")
        try:
            place_file(src, parent, name, _mode(new) & mask, replace=True, exact_mode=True)
        finally:
            os.close(src)
