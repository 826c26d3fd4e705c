"""Applying a saved patch (isolation.changes.gitpatch) to a project after its sandbox is gone.

The rules are the review's: a held-back change goes only when named (why: heldback.hold_reasons,
plus links the sandbox made and new executable bits, read from the patch's mode lines), and
nothing is written when a chosen path is no longer what the patch was made against (its blob id
and mode, compared here and named), or changed on the host while the sandbox ran.

Writing is the host's `git apply` of a patch holding just the chosen entries: it checks every
entry before it writes one, refuses paths in a `.git` folder, `..` and writes through links. It
runs in the project with GIT_DIR a throw-away empty bare repository, so the project's own
repository (its config, hooks, fsmonitor, index) is never read, and a project that is a subfolder
of a repository is patched where it is (a plain `git apply` there skips every path outside the
subfolder and says nothing). Without a work tree git reads no `.gitattributes` either (one with
`eol=crlf`, the project's or the sandbox's, would rewrite every line ending of what it writes),
nor the user's and the system's git config.

Files kept beside the patch (isolation.changes.beside: large ones) are written after it by
beside.place, under the same checks; with `three_way`, a text file the project changed since is
merged instead of refused (isolation.changes.threeway).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import threeway
from .beside import place, write_checked
from .gitpatch import EXEC, FILE, LINK, ZERO_ID, git_mode
from .heldback import hold_reasons, move_reason, pair_moves
from ..host.walk import Cursor, files_below, open_file
from ..spec import SandboxError

_HEADER = re.compile(rb"^diff --git (.+)$", re.M)
_INDEX = re.compile(rb"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})(?: ([0-7]{6}))?$", re.M)
_MODE = re.compile(rb"^(new file mode|deleted file mode|old mode|new mode) ([0-7]{6})$", re.M)
_CHANGED = "it is not as it was"
_UNQUOTE = {b"\\": b"\\", b'"': b'"', b"t": b"\t", b"n": b"\n", b"a": b"\a", b"b": b"\b", b"f": b"\f",
            b"r": b"\r", b"v": b"\v"}


class PatchError(SandboxError):
    """The patch cannot be read, or cannot be applied as it is; nothing was written."""


class PatchConflict(PatchError):
    """Chosen paths are not as the patch expects (`paths`); nothing was written. `mergeable`: those
    a 3-way apply would merge; `head`: the message without its fix, for a caller to add its own."""

    def __init__(self, message: str, paths: list[str], mergeable: list[str] | None = None, head: str = "") -> None:
        super().__init__(message)
        self.paths = paths
        self.mergeable = mergeable or []
        self.head = head or message


@dataclass(frozen=True)
class Entry:
    """One `diff --git` entry: a file's old side (mode, blob id; None/ZERO_ID when it is new) and new one."""

    path: str
    old_mode: str | None
    new_mode: str | None
    old_id: str
    new_id: str
    text: bytes
    kept: bool = False
    """A large file kept beside the patch (isolation.changes.beside), not in it: `text` is empty."""


def read_patch(data: bytes) -> dict[str, list[Entry]]:
    """{path: its entries (two for a type change)} of a patch gitpatch wrote; PatchError if it is not one."""
    starts = [m.start() for m in _HEADER.finditer(data)]
    if not starts and data.strip():
        raise PatchError("it holds no `diff --git` entry")
    found: dict[str, list[Entry]] = {}
    for begin, end in zip(starts, starts[1:] + [len(data)]):
        entry = _entry(data[begin:end])
        found.setdefault(entry.path, []).append(entry)
    return found


def _entry(text: bytes) -> Entry:
    first = text.split(b"\n", 1)[0]
    path = _path(first[len(b"diff --git "):])
    head = text.split(b"\n--- ", 1)[0].split(b"\nGIT binary patch", 1)[0]
    index = _INDEX.search(head)
    if path is None or index is None:
        raise PatchError(f"a bad entry header: {first[:200]!r}")
    modes = {kind.decode(): mode.decode() for kind, mode in _MODE.findall(head)}
    same = index.group(3).decode() if index.group(3) else None
    old = None if "new file mode" in modes else modes.get("old mode", modes.get("deleted file mode", same))
    new = None if "deleted file mode" in modes else modes.get("new mode", modes.get("new file mode", same))
    if old is None and new is None or old is None and index.group(1) != ZERO_ID.encode():
        raise PatchError(f"an entry without its modes: {first[:200]!r}")
    return Entry(path, old, new, index.group(1).decode(), index.group(2).decode(), text)


def _path(names: bytes) -> str | None:
    """The path of a `diff --git a/P b/P` line gitpatch wrote (P the same twice, maybe C-quoted)."""
    if names.startswith(b'"'):
        raw, _ = _unquote(names)
    else:
        half = (len(names) - 1) // 2
        raw = names[:half] if names[half:half + 1] == b" " and names[half + 3:] == names[2:half] else None
    if raw is None or not raw.startswith(b"a/") or len(raw) < 3:
        return None
    return os.fsdecode(raw[2:])


def _unquote(text: bytes) -> tuple[bytes | None, bytes]:
    out, i = bytearray(), 1
    while i < len(text):
        char = text[i:i + 1]
        if char == b'"':
            return bytes(out), text[i + 1:]
        if char == b"\\":
            nxt = text[i + 1:i + 2]
            if nxt in _UNQUOTE:
                out += _UNQUOTE[nxt]
                i += 2
                continue
            if re.fullmatch(rb"[0-7]{3}", text[i + 1:i + 4]):
                out.append(int(text[i + 1:i + 4], 8))
                i += 4
                continue
            return None, b""
        out += char
        i += 1
    return None, b""


def kind_of(entries: list[Entry]) -> str:
    """The review's word for a path's change: added, deleted, modified, mode or type."""
    if len(entries) > 1:
        return "type"
    entry = entries[0]
    if entry.old_mode is None:
        return "added"
    if entry.new_mode is None:
        return "deleted"
    return "mode" if entry.old_id == entry.new_id else "modified"


def held_back(project: Path, patch: dict[str, list[Entry]], patterns: tuple[str, ...] = ()) -> dict[str, str]:
    """{path: why} of the changes applied only by name: heldback's rules, links the sandbox made,
    new executable bits, and the deletion half of a held-back move (the same blob and mode: naming
    the new path takes both, heldback.with_moves). The one place every caller of a saved patch decides it."""
    reasons = hold_reasons(project, [(path, kind_of(entries)) for path, entries in patch.items()], patterns)
    for path, entries in patch.items():
        first, last = entries[0], entries[-1]
        if last.new_mode == LINK:
            reasons.setdefault(path, f"a symlink made in the sandbox, -> {_link_target(last)}")
        elif last.new_mode == EXEC and first.old_mode != EXEC:
            reasons.setdefault(path, "a new executable file" if first.old_mode is None or len(entries) > 1
                               else "it gains an executable bit")
    made = {path: (entries[-1].new_id, entries[-1].new_mode) for path, entries in patch.items()
            if path in reasons and entries[-1].new_mode is not None}
    gone = {path: (entries[0].old_id, entries[0].old_mode) for path, entries in patch.items()
            if path not in reasons and kind_of(entries) == "deleted"}
    for old, new in pair_moves(made, gone).items():
        reasons[old] = move_reason(new, reasons[new])
    return reasons


def _link_target(entry: Entry) -> str:
    lines = entry.text.split(b"\n@@ ", 1)[-1].split(b"\n")
    added = [line[1:] for line in lines if line.startswith(b"+") and not line.startswith(b"+++")]
    return os.fsdecode(added[-1]) if added else "?"


def already_applied(project: Path, patch: dict[str, list[Entry]], paths: Iterable[str]) -> list[str]:
    """Those of `paths` the project already has as the patch leaves them (its new side: the same
    blob and mode, or gone where it deletes): applied before, so there is nothing to write."""
    found = []
    for path in sorted(set(paths)):
        last = patch[path][-1]
        try:
            now = _state(project, path)
        except OSError:
            continue
        if now == ((last.new_mode, last.new_id) if last.new_mode else None):
            found.append(path)
    return found


def apply_patch(project: Path, patch: dict[str, list[Entry]], chosen: Iterable[str],
                moved: Iterable[str] = (), blobs: Path | None = None, three_way: bool = False,
                before: Callable[[], None] = lambda: None) -> list[str]:
    """Write the `chosen` paths' entries into `project`, all or none; files kept beside the patch
    from `blobs` (isolation.changes.beside). PatchConflict, naming each, when one is not what the
    patch expects or is in `moved`; with `three_way`, a text file the project changed since is merged
    instead (git's 3-way apply, from its old content kept in `blobs`: isolation.changes.threeway).
    PatchError when git refuses. `before()` is called once all is checked, before the first write.
    Returns the merged paths whose files hold git's conflict markers."""
    chosen = sorted(set(chosen))
    if not chosen:
        return []
    moved = set(moved)
    deleted = {p for p in chosen if patch[p][0].new_mode is None or len(patch[p]) > 1}
    reasons = {p: "changed on the host while the sandbox ran" for p in chosen if p in moved}
    reasons.update({p: why for p in chosen if p not in moved and (why := _differs(project, p, patch[p][0], deleted))})
    mergeable = sorted(p for p, why in reasons.items() if why == _CHANGED and not _why_not_merged(patch[p], blobs))
    merging = mergeable if three_way else []
    conflicts = {p: why for p, why in reasons.items() if p not in merging}
    if conflicts:
        if three_way:  # and why each was not merged
            conflicts = {p: f"{why}; {_why_not_merged(patch[p], blobs)}" if why == _CHANGED else why
                         for p, why in conflicts.items()}
        shown = ", ".join(f"{p} ({why})" for p, why in sorted(conflicts.items()))
        head = f"the project changed since the run under {shown}; nothing was applied"
        raise PatchConflict(f"{head}. Fix: look at those files, then apply the others by name", sorted(conflicts),
                            [] if three_way else mergeable, head)
    before()
    try:
        merged = threeway.merge(project, {p: (patch[p][0].old_id, patch[p][0].text) for p in merging}, blobs) \
            if merging else threeway.Merged()
    except threeway.MergeError as exc:
        fix = "" if "Fix:" in str(exc) else f". Fix: look at {', '.join(exc.paths) or 'them'}, then apply the others " \
            "by name"
        raise PatchConflict(f"{exc}{fix}", exc.paths) from None
    text = b"".join(entry.text for p in chosen if p not in merged.files for entry in patch[p] if not entry.kept)
    if text:
        _git_apply(project, text)
    _write_beside(project, [patch[p][0] for p in chosen if patch[p][0].kept], blobs, merged)
    return merged.conflicts


def _why_not_merged(entries: list[Entry], bases: Path | None) -> str:
    """Why a path's change cannot be merged with a 3-way apply ('' when it can)."""
    entry = entries[0]
    if len(entries) > 1 or entry.old_mode not in (FILE, EXEC) or entry.new_mode not in (FILE, EXEC):
        return "only a change to a file's text is merged"
    if entry.kept or b"\nGIT binary patch\n" in entry.text:
        return "a binary or large file is not merged"
    if b"\n@@ " not in entry.text:
        return "only a change to a file's text is merged"
    if bases is None or not (bases / entry.old_id).is_file():
        return "its old content was not kept beside the patch, so there is nothing to merge from"
    return ""


def _write_beside(project: Path, kept: list[Entry], blobs: Path | None, merged: threeway.Merged) -> None:
    """The kept files and the merged ones, each written only while the project's file is still the
    one checked (or merged with); after the patch, whose deletions may make room for them."""
    for entry in kept:
        try:
            if blobs is None:
                raise SandboxError("the folder of kept files was not given")
            place(project, entry.path, blobs / entry.new_id, entry.new_mode == EXEC,
                  None if entry.old_mode is None else (entry.old_mode, entry.old_id), entry.new_id)
        except (OSError, SandboxError) as exc:
            raise PatchError(f"{entry.path} could not be written ({getattr(exc, 'strerror', None) or exc}); the rest "
                             f"was applied. Fix: apply {entry.path} again by name") from None
    for path, (data, executable, ours) in merged.files.items():
        try:
            write_checked(project, path, lambda fd, data=data: _write_all(fd, data), executable, ours)
        except (OSError, SandboxError) as exc:
            raise PatchError(f"{path} could not be written ({getattr(exc, 'strerror', None) or exc}); the rest "
                             f"was applied. Fix: apply {path} again by name") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _differs(project: Path, path: str, entry: Entry, deleted: set[str]) -> str:
    """Why `path` in `project` is not the entry's old side ('' when it is)."""
    try:
        now = _state(project, path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    want = (entry.old_mode, entry.old_id) if entry.old_mode else None
    if now == want:
        return ""
    if now == "dir" and want is None:
        below = [f"{path}/{name}" for name in files_below(project / path)]
        return "" if set(below) <= deleted else "a folder on the host; apply the deletions of its files with it"
    if want is None:
        return "it exists on the host now"
    return "it is gone from the host" if now is None else _CHANGED


def _state(project: Path, path: str) -> tuple[str, str] | str | None:
    """(git mode, blob id) of `path` (a file or link), "dir", "other", or None when absent."""
    *parents, name = path.split("/")
    with Cursor.open(project) as cursor:
        for part in parents:
            if not cursor.down(part):
                return None if cursor.lstat(part) is None else "other"
        st = cursor.lstat(name)
        if st is None:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(name, dir_fd=cursor.fd))
            return LINK, _blob(target)
        fd = open_file(cursor.fd, name) if stat.S_ISREG(st.st_mode) else None
        if fd is None:
            return "other"
        try:
            digest = hashlib.sha1(b"blob %d\0" % os.fstat(fd).st_size)
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
            return git_mode(os.fstat(fd)), digest.hexdigest()
        finally:
            os.close(fd)


def _blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git_apply(project: Path, text: bytes) -> None:
    git = shutil.which("git")
    if git is None:
        raise PatchError("git is not installed, and applying a saved patch needs it. Fix: install git "
                         "(apt-get install git)")
    with tempfile.TemporaryDirectory(prefix="lis-tui-apply-") as scratch:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "LC_ALL": "C",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_DIR": os.path.join(scratch, "repo")}
        patch = os.path.join(scratch, "chosen.patch")
        with open(patch, "wb") as out:
            out.write(text)
        bare = {k: v for k, v in env.items() if k != "GIT_DIR"}
        steps = [([git, "init", "-q", "--bare", "--template=", env["GIT_DIR"]], bare),
                 ([git, "apply", "--whitespace=nowarn", "--check", patch], env),
                 ([git, "apply", "--whitespace=nowarn", patch], env)]
        for argv, its_env in steps:
            done = subprocess.run(argv, cwd=project, env=its_env, capture_output=True, text=True, errors="replace",
                                  timeout=600)
            if done.returncode != 0:
                why = " ".join(done.stderr.split())[:500] or f"exit {done.returncode}"
                raise PatchError(f"git apply refused the patch, so nothing was applied: {why}")
