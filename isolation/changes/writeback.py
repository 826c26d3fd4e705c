"""Applying what a sandbox changed to the host workspace: what was reviewed, byte for byte.

A review (workspace.review) read each regular file the sandbox wrote once and kept its sha256 and
mode. apply() writes only the changes of that review: a file is hashed as it is copied into its
temporary file and compared before the rename puts it in place, so no byte the review did not
read reaches the host, however the sandbox rewrites it meanwhile (a process it left running); a
change that is no longer what the review showed is refused by name, and one the review never
showed is not applied by an "apply all" and is named. What is held back is decided again at apply
time: a hold that appeared since the review holds, even for a named path. Without a review,
apply() reviews at apply time and writes that (the API's old behaviour).

First it asks whether the host changed a chosen path since the sandbox started (baseline.py: the
kernel's stamps of those paths, not a table of the project) and writes nothing if one did; then it
walks again and writes each change through its parent's descriptor when it meets it, re-checked
there, and what it wrote is the new start of those paths. A link is written into the workspace
only, unless allowed. No mode written is wider than the user's umask.
"""
from __future__ import annotations

import os
import secrets
import stat
from dataclasses import replace
from pathlib import Path

from .baseline import Baseline, folders_above
from .heldback import with_moves
from .workspace import Change, Review, WorkspaceConflict, _mode, _review, _Site, review
from ..host.walk import (
    ContentChanged,
    RefusedPaths,
    chmod_at,
    kind,
    link_leaves,
    open_file,
    place_file,
    place_link,
    remove_at,
)
from ..spec import SandboxError

APPEARED = "it appeared in the sandbox after you reviewed it; review it again"


def apply(lower: Path, upper: Path, base: Baseline, paths: list[str] | None = None,
          allow_outside_links: bool = False, skip: frozenset[str] = frozenset(),
          hold: tuple[str, ...] = (), since: int | None = None, reviewed: Review | None = None) -> list[Change]:
    """Write the chosen changes of `reviewed` (all when `paths` is None) to the host; the applied
    ones are returned. Without `reviewed`, what a review made now finds.

    WorkspaceConflict, writing nothing, if the host changed a chosen path since the sandbox started
    (`base`, which then takes what was written as its new start). Refused (listed in RefusedPaths, raised once
    the rest is written): held-back changes (`Change.held`: see workspace.review; `hold`: the
    user's own patterns on top) unless named in `paths` (naming the new path of a held-back move
    takes its deletion too), a change held back only since the review even when named, links
    that leave the workspace unless `allow_outside_links`, special files, a change that is no
    longer what the review showed (a file's bytes or mode included), and with "apply all" a
    change the review did not show. Modes are masked by the umask."""
    named = None if paths is None else {p.strip("/") for p in paths}
    current = review(lower, upper, skip, hold, since=since, text=False, read=reviewed is None)
    plan = _Plan(current, reviewed, named)
    chosen = {c.path.rstrip("/") for c in plan.chosen.values()}
    above = folders_above(chosen)
    # every path of the change is asked (what can be learnt now is), and the folders the writes go into
    moved = base.moved(lower, chosen | above | {c.path.rstrip("/") for c in current.changes if c.kind != "host"}, upper)
    conflicts = sorted(chosen & moved)
    if conflicts:
        raise WorkspaceConflict("the host copy changed since the sandbox started, so nothing was applied: "
                                + ", ".join(conflicts) + ". Fix: review those files, then apply the others "
                                "by name, or start a new sandbox on the current workspace")
    writer = _Writer(lower, plan, named is not None, allow_outside_links)
    try:
        _review(lower, upper, writer.found, skip, since)
    finally:  # what was written, and the folders it went into that the host had not changed, start anew
        written = {c.path.rstrip("/") for c in writer.applied}
        base.rebase(lower, written | (folders_above(written) - moved))
    unseen = sorted((plan.chosen[k] for k in plan.chosen.keys() - writer.seen), key=lambda c: c.path)
    refused = plan.refused + writer.refused + [f"{c.path.rstrip('/')} ({plan.changed})" for c in unseen]
    if refused:
        raise RefusedPaths(f"applied {len(writer.applied)} change(s) to {lower}", refused, writer.outside, writer.held)
    return writer.applied


class _Plan:
    """What an apply may write: `chosen`, the review's changes picked (by _key), each held back
    for the review's reason or for one found now; `content`, the bytes the review read; and
    `refused`, what is refused before anything is written."""

    def __init__(self, now: Review, reviewed: Review | None, named: set[str] | None) -> None:
        shown = reviewed or now
        self.content = shown.content
        self.changed = ("it changed in the sandbox since you reviewed it; review it again" if reviewed is not None
                        else "it changed in the sandbox while it was being applied; apply it again")
        if named is not None:
            named = with_moves({c.path.rstrip("/"): c.held for c in shown.changes if c.held}, named)
        current = {_key(c): c for c in now.changes}
        found = {c.path.rstrip("/") for c in now.changes if c.kind != "host"}
        self.chosen: dict[tuple, Change] = {}
        self.refused: list[str] = []
        taken: set[str] = set()
        for change in shown.changes:
            path = change.path.rstrip("/")
            if change.kind == "host" or (named is not None and path not in named) or path not in found:
                continue  # not asked for, the host's, or nothing to do (applied since, or undone)
            taken.add(path)
            late = current.get(_key(change), change).held
            if late and not change.held and named is not None:
                self.refused.append(f"{path} ({late}: held back since you reviewed it; review it again)")
                continue
            self.chosen[_key(change)] = replace(change, held=change.held or late)
        listed = {c.path.rstrip("/"): c for c in shown.changes}
        if named is None:
            self.refused += [f"{path} ({APPEARED})" for path in sorted(found - listed.keys())]
            return
        for path in sorted(named - taken):
            if path in listed and listed[path].kind == "host":  # nothing of the sandbox's to apply
                self.refused.append(f"{path} ({listed[path].detail}; nothing to apply)")
            else:
                self.refused.append(f"{path} ({APPEARED if path in found else 'no such change: see changes()'})")


class _Writer:
    """Writes the chosen changes as the second walk meets them, each still as it was reviewed."""

    def __init__(self, root: Path, plan: _Plan, by_name: bool, allow_outside_links: bool) -> None:
        self.root, self.plan, self.by_name, self.allow = root, plan, by_name, allow_outside_links
        self.applied: list[Change] = []
        self.refused: list[str] = []
        self.outside: dict[str, str] = {}  # links refused only for leaving the workspace
        self.held: dict[str, str] = {}  # held-back changes refused for not being named, and why
        self.mask = 0o777 & ~_umask()
        self.seen: set[tuple] = set()

    def found(self, change: Change, site: _Site | None) -> None:
        decided = self.plan.chosen.get(_key(change))
        if decided is None:  # not asked for, or no longer what the review showed
            return
        self.seen.add(_key(change))
        change = decided  # with the review's decision of what is held back
        key = change.path.rstrip("/")
        why = self._refusal(key, change, site)
        if not why:
            try:
                _write(change, site, self.mask, self.plan.content.get(change.path))
                self.applied.append(change)
                return
            except ContentChanged:
                why = self.plan.changed
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


def _write(change: Change, site: _Site, mask: int, content: tuple[bytes, int] | None) -> None:
    name, new = site.name, site.new
    if change.kind == "deleted":
        remove_at(site.host.fd, name)
        return
    parent = site.host.make_missing()
    if change.kind == "mode":
        chmod_at(parent, name, _mode(new) & mask)
        return
    if stat.S_ISREG(new.st_mode):
        _write_file(site, parent, mask, content, over=change.kind == "type")
        return
    if change.kind == "type":
        remove_at(parent, name)  # the host's entry itself: a link is removed, not followed
    if stat.S_ISDIR(new.st_mode):
        os.mkdir(name, 0o700, dir_fd=parent)
        chmod_at(parent, name, _mode(new) & mask)
    else:
        place_link(site.target, parent, name, replace=True)


def _write_file(site: _Site, parent: int, mask: int, content: tuple[bytes, int] | None, over: bool) -> None:
    """The sandbox's file, written only if it still has the bytes and mode the review read (hashed
    as copied, checked before it takes the name: ContentChanged otherwise, and nothing is left).
    `over`: what the host has there is of another type (a folder, a link), removed only then."""
    src = open_file(site.new_dir, site.name)
    if src is None or content is None:
        if src is not None:
            os.close(src)
        raise ContentChanged(f"{site.name!r} is not the file that was reviewed")
    digest, mode = content
    try:
        if _mode(os.fstat(src)) != mode:
            raise ContentChanged(f"{site.name!r} has another mode than was reviewed")
        if not over:
            place_file(src, parent, site.name, mode & mask, replace=True, exact_mode=True, expect=digest)
            return
        temp = f".lis-tui-{secrets.token_hex(6)}.tmp"
        place_file(src, parent, temp, mode & mask, replace=False, exact_mode=True, expect=digest)
        try:
            remove_at(parent, site.name)  # a link is removed, not followed
            os.rename(temp, site.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            os.unlink(temp, dir_fd=parent)
            raise
    finally:
        os.close(src)
