"""What a sandbox changed in its workspace, saved as a patch in git's format, so that it outlives the
sandbox: `git apply` takes it, binary files, modes, links and deletions included.

It is made from the same descriptor walk as the review (workspace._review): the upper a hostile
sandbox wrote is never read through a link, no fifo is opened. Each file becomes one `diff --git`
entry with a full `index OLD..NEW` line (git's blob ids: git apply needs them for binary files, and
`lis-tui apply` compares them with the project to refuse a file that changed since). Text is a
unified diff (lines split at "\\n" only, as git does); a file git would call binary (a NUL in its
first 8000 bytes) or one over DIFF_LIMIT is a `GIT binary patch` literal (zlib, git's base85). A
link is mode 120000 with its target as content. Directories are not entries (git has none), nor is
anything inside a `.git` folder (git apply never writes there; commits come home as a bundle), nor
special files: those are listed as not saved. With a `beside` (isolation.changes.beside), a large
file's new content is kept there instead of in the patch, and a modified text file's old content too.
"""
from __future__ import annotations

import base64
import difflib
import hashlib
import os
import stat
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Protocol

from ..host.walk import Cursor, open_file
from .workspace import DIFF_LIMIT, Change, _Deleted, _review, _Site

if TYPE_CHECKING:
    from .baseline import Baseline

ZERO_ID = "0" * 40
LINK, EXEC, FILE = "120000", "100755", "100644"
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/+@,=~%:")
_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\t"): b"\\t", ord("\n"): b"\\n"}


class Keeper(Protocol):
    """Where write_patch keeps what is not in the patch: isolation.changes.beside.Beside."""

    def takes(self, kind: str, st: os.stat_result) -> bool: ...
    def keep(self, path: str, site: _Site, old_present: bool) -> str: ...
    def base(self, blob_id: str, data: bytes) -> None: ...


@dataclass
class SavedPatch:
    """What a patch holds: `paths` (each changed file once), `moved` (paths whose host copy changed
    while the sandbox ran: never to be applied), `unsaved` ("path (why)": changes no patch can carry)."""

    paths: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    unsaved: list[str] = field(default_factory=list)


def git_mode(st: os.stat_result) -> str:
    """The mode git records for a file or link (it keeps only the owner's executable bit)."""
    if stat.S_ISLNK(st.st_mode):
        return LINK
    return EXEC if st.st_mode & stat.S_IXUSR else FILE


def quote_path(path: str) -> bytes:
    """`path` as git writes it in a patch: bare when plain, else C-quoted (non-ASCII as octal)."""
    raw = os.fsencode(path)
    if all(byte in _SAFE for byte in raw):
        return raw
    out = bytearray(b'"')
    for byte in raw:
        if byte in _ESCAPES:
            out += _ESCAPES[byte]
        elif byte < 0x20 or byte >= 0x7f:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def write_patch(lower, upper, base: Baseline | None, out: BinaryIO,
                skip: frozenset[str] = frozenset(), beside: Keeper | None = None,
                since: int | None = None) -> SavedPatch:
    """Write every change between `lower` (the host workspace) and `upper` (what the sandbox wrote)
    to `out` as a git patch. `base`: the host as the sandbox started on it (baseline.py), to tell
    which changed paths the host changed meanwhile. `beside`: where
    large files and bases are kept (`beside.kept`: those left out of the patch, in `paths` still).
    `since`: when the sandbox started (workspace._review): what the host made meanwhile where the
    sandbox deleted is the host's, not a deletion to save."""
    saved = SavedPatch()
    seen: set[str] = set()
    repos: dict[str, int] = {}  # a `.git` folder: how many changes in it

    def found(change: Change, site: _Site | None) -> None:
        path = change.path
        if change.kind == "host":
            return  # the host's own, made after the start: not the sandbox's work
        if change.kind == "refused" or site is None:
            saved.unsaved.append(f"{path} ({change.detail})")
        elif path.endswith("/"):
            return  # a directory: git keeps none; its files are entries of their own
        elif any(_is_git(name) for name in path.split("/")):
            names = path.split("/")
            top = "/".join(names[:next(i for i, name in enumerate(names) if _is_git(name)) + 1]) + "/"
            repos[top] = repos.get(top, 0) + 1
        elif _entries(change, site, out, saved, beside):
            if path not in seen:
                seen.add(path)
                saved.paths.append(path)

    _review(lower, upper, found, skip, since)
    saved.unsaved += [f"{top} ({count} change{'' if count == 1 else 's'} inside: git apply never writes in a "
                      "repository's own folder)" for top, count in sorted(repos.items())]
    if base is not None:  # each saved path looked at on the host, not the whole project (a save follows each step)
        saved.moved = sorted(base.moved(lower, saved.paths, upper))
    return saved


def _is_git(name: str) -> bool:
    """A name git's verify_path refuses as `.git` (any case, NTFS's trailing dots and spaces, 8.3)."""
    name = name.lower()
    return name.rstrip(". ") == ".git" or name.startswith("git~")


def _entries(change: Change, site: _Site, out: BinaryIO, saved: SavedPatch, beside: Keeper | None = None) -> bool:
    """The entries for one change; False when it is none a patch can carry (noted in `saved`)."""
    old, new, path = site.old, site.new, change.path
    olds = old is not None and (stat.S_ISREG(old.st_mode) or stat.S_ISLNK(old.st_mode))
    news = new is not None and (stat.S_ISREG(new.st_mode) or stat.S_ISLNK(new.st_mode))
    if new is not None and not news and not stat.S_ISDIR(new.st_mode):
        saved.unsaved.append(f"{path} (a special file: never applied)")
        return False
    if old is not None and not olds and not stat.S_ISDIR(old.st_mode):
        saved.unsaved.append(f"{path} (a special file on the host: never replaced)")
        return False
    if change.kind == "type" and old is not None and stat.S_ISDIR(old.st_mode):
        _delete_tree(site, path, out, saved)  # what the sandbox put in the folder's place follows
        olds = False
    if not olds and not news:
        return False
    if beside is not None and news and beside.takes(change.kind, new):  # kept beside the patch, not in it
        why = beside.keep(path, site, olds)
        if why:
            saved.unsaved.append(f"{path} ({why})")
        return not why
    before = _content(site, "old") if olds else None
    after = _content(site, "new") if news else None
    if (olds and before is None) or (news and after is None):
        saved.unsaved.append(f"{path} (it changed while it was being read; run lis-tui again on it)")
        return False
    if olds and news and (git_mode(old) == LINK) != (git_mode(new) == LINK):
        _entry(out, path, before, None, git_mode(old), None)  # git: a type change is two entries
        _entry(out, path, None, after, None, git_mode(new))
        return True
    if olds and news and before.id == after.id and git_mode(old) == git_mode(new):
        return False  # a mode git does not keep (only the owner's executable bit counts)
    if beside is not None and olds and news and before.data is not None and after.data is not None \
            and before.id != after.id and git_mode(old) != LINK:
        beside.base(before.id, before.data)  # a text file's old content: what a 3-way apply merges from
    _entry(out, path, before, after, git_mode(old) if olds else None, git_mode(new) if news else None)
    return True


def _delete_tree(site: _Site, path: str, out: BinaryIO, saved: SavedPatch) -> None:
    def gone(change: Change, below: _Site | None) -> None:
        if any(_is_git(name) for name in change.path.split("/")):  # git apply refuses the whole patch for one
            if not change.path.endswith("/"):
                saved.unsaved.append(f"{change.path} (in a repository's own folder: git apply never removes it)")
        elif below is not None and not change.path.endswith("/"):
            if _entries(change, below, out, saved):
                saved.paths.append(change.path)
        elif below is None:
            saved.unsaved.append(f"{change.path} ({change.detail})")

    with Cursor(os.dup(site.host.fd)) as host:
        _Deleted(host, site.name, path, gone).run()


@dataclass
class _Blob:
    id: str
    data: bytes | None  # the bytes of a text file or a link's target; None: binary, see `packed`
    size: int
    packed: BinaryIO | None = None  # zlib-compressed bytes, spooled


def _content(site: _Site, side: str) -> _Blob | None:
    """One side of a change as git sees it; None if it changed under us."""
    st = site.old if side == "old" else site.new
    dir_fd = site.host.fd if side == "old" else site.new_dir
    if stat.S_ISLNK(st.st_mode):
        target = site.target if side == "new" else _readlink(dir_fd, site.name)
        if target is None:
            return None
        data = os.fsencode(target)
        return _Blob(_blob_id(data), data, len(data))
    fd = open_file(dir_fd, site.name)
    if fd is None:
        return None
    try:
        return _read_blob(fd)
    finally:
        os.close(fd)


def _readlink(dir_fd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _read_blob(fd: int) -> _Blob | None:
    """The file read once: its id, and its bytes when text, else compressed to a spooled file."""
    size = os.fstat(fd).st_size
    digest = hashlib.sha1(b"blob %d\0" % size)
    first = os.pread(fd, min(size, DIFF_LIMIT + 1), 0)
    if len(first) <= DIFF_LIMIT and b"\0" not in first[:8000]:
        digest.update(first)
        return _Blob(digest.hexdigest(), first, len(first)) if len(first) == size else None
    packed = tempfile.SpooledTemporaryFile(1 << 20)
    squeeze, total, chunk = zlib.compressobj(9), 0, first
    while chunk:
        digest.update(chunk)
        packed.write(squeeze.compress(chunk))
        total += len(chunk)
        chunk = os.pread(fd, 1 << 20, total) if total < size else b""
    packed.write(squeeze.flush())
    if total != size:
        packed.close()
        return None
    packed.seek(0)
    return _Blob(digest.hexdigest(), None, size, packed)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _entry(out: BinaryIO, path: str, before: _Blob | None, after: _Blob | None,
           old_mode: str | None, new_mode: str | None) -> None:
    a, b = quote_path("a/" + path), quote_path("b/" + path)
    head = [b"diff --git %s %s" % (a, b)]
    if old_mode is None:
        head.append(b"new file mode " + new_mode.encode())
    elif new_mode is None:
        head.append(b"deleted file mode " + old_mode.encode())
    elif old_mode != new_mode:
        head += [b"old mode " + old_mode.encode(), b"new mode " + new_mode.encode()]
    ids = (before.id if before else ZERO_ID, after.id if after else ZERO_ID)
    same = f" {old_mode}" if old_mode == new_mode else ""
    head.append(f"index {ids[0]}..{ids[1]}{same}".encode())
    out.write(b"\n".join(head) + b"\n")
    try:
        if ids[0] == ids[1]:
            return  # the mode alone
        if (before is None or before.data is not None) and (after is None or after.data is not None):
            _text_hunks(out, a if before else b"/dev/null", b if after else b"/dev/null",
                        before.data if before else b"", after.data if after else b"")
        else:
            _binary(out, after)
    finally:
        for blob in (before, after):
            if blob is not None and blob.packed is not None:
                blob.packed.close()


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    return [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _text_hunks(out: BinaryIO, a: bytes, b: bytes, before: bytes, after: bytes) -> None:
    old, new = _lines(before), _lines(after)
    groups = list(difflib.SequenceMatcher(None, old, new).get_grouped_opcodes(3))
    if not groups:
        return
    out.write(b"--- %s\n+++ %s\n" % (a, b))
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.write(b"@@ -%s +%s @@\n" % (_range(i1, i2), _range(j1, j2)))
        for tag, k1, k2, m1, m2 in group:
            if tag == "equal":
                _marked(out, b" ", old[k1:k2])
                continue
            _marked(out, b"-", old[k1:k2])
            _marked(out, b"+", new[m1:m2])


def _range(start: int, stop: int) -> bytes:
    length = stop - start
    first = start + 1 if length else start
    return b"%d" % first if length == 1 else b"%d,%d" % (first, length)


def _marked(out: BinaryIO, mark: bytes, lines: list[bytes]) -> None:
    for line in lines:
        out.write(mark + line if line.endswith(b"\n") else mark + line + b"\n\\ No newline at end of file\n")


def _binary(out: BinaryIO, after: _Blob | None) -> None:
    """git's `GIT binary patch`: a literal of the new bytes, zlib then base85, 52 bytes a line,
    each line led by its length (A-Z 1-26, a-z 27-52). Only the forward hunk: git apply needs no other."""
    out.write(b"GIT binary patch\nliteral %d\n" % (after.size if after else 0))
    rest = b""
    for chunk in _packed(after):
        rest += chunk
        whole = len(rest) - len(rest) % 52
        _base85_lines(out, rest[:whole])
        rest = rest[whole:]
    _base85_lines(out, rest)
    out.write(b"\n")


def _packed(after: _Blob | None):
    if after is None or after.packed is None:
        yield zlib.compress(after.data if after else b"", 9)
        return
    while chunk := after.packed.read(1 << 16):
        yield chunk


def _base85_lines(out: BinaryIO, data: bytes) -> None:
    for i in range(0, len(data), 52):
        piece = data[i:i + 52]
        mark = ord("A") + len(piece) - 1 if len(piece) <= 26 else ord("a") + len(piece) - 27
        out.write(bytes([mark]) + base64.b85encode(piece, pad=True) + b"\n")
