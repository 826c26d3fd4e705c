"""What of a workspace a sandbox cannot change because another user owns it on the host.

A sandbox maps one id: the caller's, as its root (a root caller's through an idmapped bind of the
workspace, isolation.idmap, so root's own files are its own there too). Whatever another user owns
shows as `nobody` inside, and no one in there may change it: the model meets "Permission denied"
on a file it can read. Only the folder itself and the entries at its top are looked at (a start
never walks the whole workspace); that is where a `sudo` build or a project checked out by
another user shows.
"""
from __future__ import annotations

import itertools
import os
import stat
from dataclasses import dataclass

LOOKED_AT = 2000
"""Entries at the top looked at, at most: a start stays cheap however large the folder."""


@dataclass(frozen=True)
class OthersOwn:
    """The workspace's top as a sandbox over it will find it."""

    uid: int
    """The owner of the first such thing found (the folder's own, when it is another's)."""
    folder: bool
    """The folder itself is another user's."""
    names: tuple[str, ...]
    """Files and folders at its top that another user owns, sorted (links are left out: replacing a
    link takes the folder, not the link)."""


def others_own(folder: str | os.PathLike, me: int | None = None, skip: tuple[str, ...] = ()) -> OthersOwn | None:
    """What at `folder`'s top a sandbox run by `me` (default: this process's user) cannot change,
    `skip` left out (a `.git` the sandbox sees read-only anyway), or None when it is all `me`'s (or
    cannot be read: the sandbox's own start says why)."""
    me = os.geteuid() if me is None else me
    try:
        top = os.stat(folder).st_uid
        with os.scandir(folder) as entries:
            found = [(entry.name, st.st_uid) for entry in itertools.islice(entries, LOOKED_AT)
                     if entry.name not in skip and (st := _lstat(entry)) is not None and st.st_uid != me
                     and not stat.S_ISLNK(st.st_mode)]
    except OSError:
        return None
    if top == me and not found:
        return None
    return OthersOwn(top if top != me else found[0][1], top != me, tuple(sorted(name for name, _ in found)))


def _lstat(entry: os.DirEntry) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError:
        return None
