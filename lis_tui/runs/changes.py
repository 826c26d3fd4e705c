"""A run's changes to its workspace, kept in its folder so they outlive the sandbox:
`changes.patch` (a patch `git apply` takes, isolation.changes.gitpatch) and `changes.json` (the project,
the patch's sha256, the paths, which of them the host changed while the sandbox ran); with
`git_writable`, the model's new commits as `commits.bundle` (isolation.changes.gitbundle). Written as the
run ends; applied later by `lis-tui apply RUN [PATH...] [--commits]` or at once by `run --apply`,
under the review's rules (isolation.changes.patchapply): the commits only when asked, into a new branch
`lis-tui/RUN`."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isolation import SandboxError
from isolation.changes.gitbundle import BundleError, check_target, fetch_bundle
from isolation.changes.heldback import with_moves
from isolation.changes.patchapply import Entry, PatchConflict, PatchError, apply_patch, held_back, kind_of, read_patch
from lis_tui.runs.store import open_run_file

PATCH, RECORD, BUNDLE = "changes.patch", "changes.json", "commits.bundle"
FORMAT = "lis-tui-changes/1"


class ApplyRefused(Exception):
    """Nothing was applied; `code` is the exit code (2: the request was wrong, 1: the run or project)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class SavedChanges:
    """What a run saved: the changed paths, those held back (and why), what no patch could carry."""

    run_dir: Path
    paths: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    unsaved: list[str] = field(default_factory=list)
    commits: int = 0
    error: str = ""

    def line(self) -> str:
        """The one line `lis-tui run` ends with."""
        if self.error:
            return f"the changes to the workspace could not be saved: {self.error}"
        if not self.paths:
            line = "no files changed in the workspace"
        else:
            count = f"{len(self.paths)} file{'' if len(self.paths) == 1 else 's'} changed"
            held = f" ({len(self.held)} held back)" if self.held else ""
            line = (f"{count}{held}: saved in {self.run_dir / PATCH}; apply with "
                    f"`lis-tui apply {self.run_dir}`")
        if self.commits:
            line += (f"; {self.commits} new commit{'' if self.commits == 1 else 's'} saved in "
                     f"{self.run_dir / BUNDLE} (`lis-tui apply {self.run_dir} --commits` fetches them into "
                     f"branch {branch_for(self.run_dir)})")
        more = f" and {len(self.unsaved) - 5} more (changes.json lists them)" if len(self.unsaved) > 5 else ""
        return line + (f"; not saved: {', '.join(self.unsaved[:5])}{more}" if self.unsaved else "")


def branch_for(run_dir: Path) -> str:
    """The branch a run's commits come home as."""
    return f"lis-tui/{run_dir.name}"


def save_changes(sandbox: Any, run_dir: Path) -> SavedChanges:
    """Write the sandbox's workspace changes into `run_dir`; a failure is reported, never raised."""
    saved = SavedChanges(run_dir)
    try:
        with open(run_dir / PATCH, "wb") as out:
            patch = sandbox.save_changes(out)
        digest = _sha256(run_dir / PATCH)
    except (OSError, SandboxError) as exc:
        saved.error = str(exc)
        return saved
    project = Path(sandbox.spec.workspace).expanduser().resolve()
    record = {"format": FORMAT, "workspace": str(project), "patch": PATCH, "sha256": digest,
              "paths": patch.paths, "moved": patch.moved, "unsaved": patch.unsaved}
    if sandbox.spec.git_writable:
        try:
            record["commits"] = save_bundle(sandbox, run_dir)
        except (OSError, SandboxError) as exc:
            saved.error = f"the new commits could not be saved: {exc}"
        saved.commits = (record.get("commits") or {}).get("count", 0)
    temp = run_dir / f".{RECORD}.tmp"
    temp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(temp, run_dir / RECORD)
    saved.paths, saved.unsaved = patch.paths, patch.unsaved
    try:
        saved.held = held_back(project, _read(run_dir / PATCH), sandbox.spec.held_back)
    except PatchError as exc:  # ours, just written: a bug, said rather than hidden
        saved.error = f"the patch just written cannot be read back ({exc})"
    return saved


def save_bundle(sandbox: Any, run_dir: Path) -> dict | None:
    """The sandbox's new commits into RUN/commits.bundle; what changes.json records of them (None: none)."""
    made = sandbox.bundle_commits()
    if made is None:
        return None
    data, count = made
    (run_dir / BUNDLE).write_bytes(data)
    return {"bundle": BUNDLE, "sha256": hashlib.sha256(data).hexdigest(), "count": count}


def fetch_commits(run_dir: Path, project: Path, record: dict | None = None) -> str:
    """Fetch a run's saved commits into branch lis-tui/RUN of `project`'s repository; the commit."""
    saved = (record or _record(run_dir)).get("commits")
    if not isinstance(saved, dict):
        raise ApplyRefused(f"the run in {run_dir} made no commits to fetch", 2)
    bundle = run_dir / BUNDLE
    try:
        if _sha256(bundle) != saved.get("sha256"):
            raise ApplyRefused(f"{bundle} is not the bundle the run saved (its sha256 differs); nothing was fetched")
        return fetch_bundle(project, bundle, branch_for(run_dir))
    except OSError as exc:
        raise ApplyRefused(f"{bundle}: {exc.strerror}; nothing was fetched") from None
    except BundleError as exc:
        raise ApplyRefused(str(exc)) from None


@dataclass
class Applied:
    """What `apply_run` wrote, into which project, and what it held back."""

    project: Path
    applied: list[str]
    held: dict[str, str]
    record: dict
    commits: str = ""
    """The commit fetched into branch lis-tui/RUN, when asked for."""


def load_run(run_dir: Path, project: Path | None = None) -> tuple[dict, dict[str, list[Entry]], Path]:
    """A run's record, its patch (checked against the recorded sha256) and the project to apply to."""
    record = _record(run_dir)
    patch_file = run_dir / PATCH
    try:
        digest = _sha256(patch_file)
    except FileNotFoundError:
        raise ApplyRefused(f"{patch_file} is missing, so there is nothing to apply. Fix: restore it from a "
                           "backup, or run the task again") from None
    except OSError as exc:
        raise ApplyRefused(f"{patch_file}: {exc.strerror}; make it a readable file") from None
    if digest != record.get("sha256"):
        raise ApplyRefused(f"{patch_file} is not the patch the run saved (its sha256 differs): edited or cut "
                           "short, so nothing was applied. Fix: read it and apply it by hand with `git apply`")
    try:
        patch = _read(patch_file)
    except PatchError as exc:
        raise ApplyRefused(f"{patch_file} is corrupt ({exc}); nothing was applied") from None
    where = Path(project or record.get("workspace") or "").expanduser().absolute()
    if not where.is_dir():
        raise ApplyRefused(f"the project {where} is not a folder (moved or removed?); give the folder to apply "
                           f"to: lis-tui apply {run_dir} --workspace DIR")
    return record, patch, where


def apply_run(run_dir: Path, paths: list[str] | None, patterns: tuple[str, ...] = (),
              project: Path | None = None, commits: bool = False) -> Applied:
    """Apply a past run's changes (all but the held-back ones, or just `paths`) to its project, and
    with `commits` fetch its new commits (then, without `paths`, those alone)."""
    record, patch, where = load_run(run_dir, project)
    held = held_back(where, patch, patterns)
    if commits:
        if not isinstance(record.get("commits"), dict):
            raise ApplyRefused(f"the run in {run_dir} made no commits to fetch; nothing was applied", 2)
        try:
            check_target(where, branch_for(run_dir))  # before a file is written
        except BundleError as exc:
            raise ApplyRefused(str(exc)) from None
    if commits and paths is None:
        chosen: list[str] = []
    elif paths is None:
        chosen = [p for p in patch if p not in held]
    else:
        chosen = [p.strip("/") for p in paths]
        unknown = [p for p in chosen if p not in patch]
        if unknown:
            raise ApplyRefused(f"the run did not change {', '.join(unknown)}; nothing was applied. Fix: "
                               f"`lis-tui apply {run_dir} --list` lists its changes", 2)
        chosen = sorted(with_moves(held, set(chosen)))  # a held-back move's new path takes its deletion with it
    try:
        apply_patch(where, patch, chosen, record.get("moved") or ())
    except PatchConflict as exc:
        raise ApplyRefused(str(exc)) from None
    except PatchError as exc:
        raise ApplyRefused(str(exc)) from None
    left = {} if commits and paths is None else {p: why for p, why in held.items() if p not in chosen}
    done = Applied(where, sorted(set(chosen)), left, record)
    if commits:
        done.commits = fetch_commits(run_dir, where, record)
    return done


def listing(run_dir: Path, patterns: tuple[str, ...] = (), project: Path | None = None) -> list[tuple[str, str, str]]:
    """(path, kind, why it is held back or '') of every change the run saved."""
    record, patch, where = load_run(run_dir, project)
    held = held_back(where, patch, patterns)
    found = [(path, kind_of(entries), held.get(path, "")) for path, entries in sorted(patch.items())]
    if isinstance(record.get("commits"), dict):
        found.append((branch_for(run_dir), f"{record['commits'].get('count')} commits", ""))
    return found


def _record(run_dir: Path) -> dict:
    try:
        with open_run_file(run_dir / RECORD) as handle:
            record = json.loads(handle.read(1 << 26))
    except FileNotFoundError:
        if not (run_dir / "trajectory.json").is_file():
            raise ApplyRefused(f"{run_dir} is not a run folder (no trajectory.json); give one that "
                               "`lis-tui runs` lists (its id or its folder)", 2) from None
        raise ApplyRefused(f"{run_dir} holds no saved changes: the run had no --workspace, or ended before "
                           "they were saved", 2) from None
    except (OSError, ValueError) as exc:
        raise ApplyRefused(f"{run_dir / RECORD} cannot be read ({exc}); nothing was applied") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ApplyRefused(f"{run_dir / RECORD} is not a changes record of this lis-tui; nothing was applied")
    return record


def _read(patch_file: Path) -> dict[str, list[Entry]]:
    with open(patch_file, "rb") as handle:
        return read_patch(handle.read())


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
