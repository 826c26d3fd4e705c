"""A 3-way apply of a saved patch's text changes to files the project changed since the run.

The merge is git's own (`git apply --3way`: the patch applied to its old content, kept beside it
by isolation.changes.beside, then merged with the project's file; where both changed the same lines
the file gets git's conflict markers, as `git apply --3way` leaves them). It runs in a scratch
copy of just those files, with a throw-away repository, so git never reads the project's
repository, config, hooks, attributes or fsmonitor (the scratch repository's info/attributes
unsets every attribute that would convert or merge otherwise, should a merged file be a
`.gitattributes`); the user's and the system's git config neither. The results are written into
the project by the caller (beside.write_checked: through directory descriptors, each only while
the project's file is still the one that was merged).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..host.walk import Cursor, open_file
from ..spec import SandboxError
from .beside import safe_names
from .gitpatch import git_mode

MERGE_LIMIT = 64 << 20
"""Bytes of a project file merged at most."""
NEUTRAL = "* !text !eol !crlf !ident !filter !working-tree-encoding !merge !conflict-marker-size !whitespace\n"
"""The scratch repository's info/attributes: above any .gitattributes, so nothing converts a merged file."""


class MergeError(SandboxError):
    """A merge could not be made (`paths` says which); nothing was written."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


@dataclass
class Merged:
    """What the merge made, to be written: path -> (content, executable, the project's (git mode,
    blob id) it was merged with), and the paths whose content holds conflict markers."""

    files: dict[str, tuple[bytes, bool, tuple[str, str]]] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)


def merge(project: Path, changes: dict[str, tuple[str, bytes]], bases: Path) -> Merged:
    """Each change (path -> the blob id of its old side, its `diff --git` entry) merged with the
    project's file now, in a scratch copy; nothing in `project` is written. MergeError names what
    cannot be merged."""
    git = shutil.which("git")
    if git is None:
        raise MergeError("git is not installed, and a 3-way apply needs it. Fix: install git (apt-get install "
                         "git)", list(changes))
    with tempfile.TemporaryDirectory(prefix="lis-tui-3way-") as scratch:
        work, repo = Path(scratch, "work"), Path(scratch, "repo")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "LC_ALL": "C",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
        work.mkdir()
        env.update(GIT_DIR=str(repo), GIT_WORK_TREE=str(work))
        _git(git, ["init", "-q", "--template="], scratch, env)
        (repo / "info").mkdir()
        (repo / "info" / "attributes").write_text(NEUTRAL, encoding="ascii")
        ours = {path: _copy_in(project, path, work) for path in changes}
        stored = Path(scratch, "bases")
        stored.mkdir()
        for path, (old_id, _) in changes.items():
            data = (bases / old_id).read_bytes()
            if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != old_id:
                raise MergeError(f"{bases / old_id} is not the old content the run kept (its blob id differs); "
                                 "nothing was applied", [path])
            (stored / old_id).write_bytes(data)
        patch = Path(scratch, "chosen.patch")
        patch.write_bytes(b"".join(text for _, text in changes.values()))
        names = "".join(f"{path}\0" for path in changes)
        _git(git, ["hash-object", "-w", "--no-filters", "--stdin-paths"], work, env,
             "".join(f"{stored / old_id}\n" for old_id, _ in changes.values()))
        _git(git, ["update-index", "--add", "-z", "--stdin"], work, env, names)
        applied = subprocess.run([git, "apply", "--3way", "--whitespace=nowarn", str(patch)], cwd=work, env=env,
                                 capture_output=True, text=True, errors="replace", timeout=600)
        unmerged = _git(git, ["ls-files", "-u", "-z"], work, env).split("\0")
        conflicts = sorted({line.split("\t", 1)[1] for line in unmerged if "\t" in line})
        if applied.returncode != 0 and not conflicts:
            why = " ".join(applied.stderr.split())[:500] or f"exit {applied.returncode}"
            raise MergeError(f"git's 3-way apply refused, so nothing was applied: {why}", list(changes))
        merged = Merged(conflicts=conflicts)
        for path in changes:
            result = work.joinpath(*safe_names(path))
            merged.files[path] = (result.read_bytes(), bool(result.stat().st_mode & stat.S_IXUSR), ours[path])
        return merged


def _copy_in(project: Path, path: str, work: Path) -> tuple[str, str]:
    """The project's file at `path` copied into the scratch work tree (read through directory
    descriptors, no link followed); its (git mode, blob id)."""
    *parents, name = safe_names(path)
    with Cursor.open(project) as cursor:
        for part in parents:
            if not cursor.down(part):
                raise MergeError(f"{path}: a folder above it is gone or a link now; nothing was applied", [path])
        st = cursor.lstat(name)
        fd = open_file(cursor.fd, name) if st is not None and stat.S_ISREG(st.st_mode) else None
        if fd is None:
            raise MergeError(f"{path} is no file in the project now, so there is nothing to merge with; nothing "
                             "was applied", [path])
        try:
            opened = os.fstat(fd)
            if opened.st_size > MERGE_LIMIT:
                raise MergeError(f"{path} is over {MERGE_LIMIT >> 20} MiB in the project, too large to merge; "
                                 "nothing was applied", [path])
            data = os.pread(fd, MERGE_LIMIT + 1, 0)
        finally:
            os.close(fd)
    if len(data) != opened.st_size:
        raise MergeError(f"{path} changed while it was being read; nothing was applied", [path])
    copy = work.joinpath(*parents, name)
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(data)
    copy.chmod(0o755 if opened.st_mode & stat.S_IXUSR else 0o644)
    return git_mode(opened), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(git: str, argv: list[str], cwd: Path | str, env: dict, stdin: str | None = None) -> str:
    done = subprocess.run([git, *argv], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          errors="surrogateescape", timeout=600)
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:500] or f"exit {done.returncode}"
        raise MergeError(f"git {argv[0]} failed in the 3-way apply's scratch copy, so nothing was applied: {why}", [])
    return done.stdout
