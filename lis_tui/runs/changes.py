"""A run's changes to its workspace, kept in its folder so they outlive the sandbox:
`changes.patch` (a patch `git apply` takes, isolation.changes.gitpatch), `blobs/` (files over 8 MiB kept
beside it, and old contents for a 3-way apply: isolation.changes.beside) and `changes.json` (the project,
the patch's sha256, the paths, the kept files, which of them the host changed while the sandbox ran); with
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
from typing import Any, Callable

from isolation import SandboxError
from isolation.changes.beside import Beside, Kept
from isolation.changes.gitbundle import BundleError, check_target, fetch_bundle
from isolation.changes.heldback import with_moves
from isolation.changes.patchapply import (Entry, PatchConflict, PatchError, already_applied, apply_patch, held_back,
                                         kind_of, read_patch)
from lis_tui.runs.store import in_store, open_run_file

PATCH, RECORD, BUNDLE, BLOBS = "changes.patch", "changes.json", "commits.bundle", "blobs"
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
    both: list[str] | None = None
    """Paths the commits change that changes.patch holds too (None: the sandbox's git could not say)."""
    kept: list[Kept] = field(default_factory=list)
    """Large files kept in RUN/blobs/ beside the patch, not in it."""
    error: str = ""

    def line(self, applied: Applied | None = None) -> str:
        """The one line `lis-tui run` ends with; `applied`: what `run --apply` wrote of them."""
        if self.error:
            return f"the changes to the workspace could not be saved: {self.error}"
        if not self.paths:
            line = "no files changed in the workspace"
        else:
            count = f"{len(self.paths)} file{'' if len(self.paths) == 1 else 's'} changed"
            held = f" ({len(self.held)} held back)" if self.held else ""
            line = (f"{count}{held}: saved in {self.run_dir / PATCH}; apply with "
                    f"`lis-tui apply {self.run_dir}`") if applied is None else \
                f"{count}{held}, saved in {self.run_dir / PATCH}: {applied.said(self.run_dir)}"
            if self.kept:
                line += f"; kept beside it in {self.run_dir / BLOBS}/, too large for the patch: {sizes(self.kept)}"
        if self.commits:
            line += (f"; {self.commits} new commit{'' if self.commits == 1 else 's'} saved in "
                     f"{self.run_dir / BUNDLE} (`lis-tui apply {self.run_dir} --commits` fetches them into "
                     f"branch {branch_for(self.run_dir)})")
            if self.paths and self.both != []:
                line += f"; {one_or_other(self.both, 'changes.patch')}"
        more = f" and {len(self.unsaved) - 5} more (changes.json lists them)" if len(self.unsaved) > 5 else ""
        return line + (f"; not saved: {', '.join(self.unsaved[:5])}{more}" if self.unsaved else "")


def branch_for(run_dir: Path) -> str:
    """The branch a run's commits come home as."""
    return f"lis-tui/{run_dir.name}"


def one_or_other(both: list[str] | None, other: str) -> str:
    """That the commits and the patch hold the same changes (to `both`; None: maybe): take one only.
    Both taken, `git merge` of the branch refuses over the files the patch already changed."""
    shown = ", ".join(both[:5]) + (f" and {len(both) - 5} more" if len(both) > 5 else "") if both else ""
    what = f"the same changes to {shown}" if both else "the committed changes (its git could not list them)"
    return f"the commits and {other} hold {what}: take one or the other, not both"


def save_changes(sandbox: Any, run_dir: Path, final: bool = True,
                 read: Callable[[], None] | None = None) -> SavedChanges:
    """Write the sandbox's workspace changes into `run_dir`; a failure is reported, never raised.
    Not `final` (the save after a step, lis_tui.runs.autosave): the patch and its record only, not
    the commits nor which changes are held back, and a large file kept beside the patch (RUN/blobs/,
    isolation.changes.beside) whose sandbox copy has the identity it had at the last save is not read
    again. Each file is written whole, then renamed over the last one (patch first, then the record
    that names its sha256), with its bytes on the disk: a crash, or a power cut, leaves the last save
    whole. `read()` is called once nothing more is read from the sandbox (the disk's part follows)."""
    saved = SavedChanges(run_dir)
    beside = Beside(run_dir / BLOBS, _kept_before(run_dir), exact=final)
    temp = run_dir / f".{PATCH}.tmp"
    try:
        with open(temp, "wb") as out:
            hashed = _Hashed(out)  # the record's sha256 as the patch is written, not read back after
            try:
                patch = sandbox.save_changes(hashed, beside)
            finally:
                if read is not None:
                    read()
            out.flush()
            os.fsync(out.fileno())
        digest = hashed.digest.hexdigest()
        os.replace(temp, run_dir / PATCH)
    except (OSError, SandboxError) as exc:
        saved.error = str(exc)
        return saved
    project = Path(sandbox.spec.workspace)  # absolute: the sandbox's spec is resolved
    record = {"format": FORMAT, "workspace": str(project), "patch": PATCH, "sha256": digest,
              "paths": patch.paths, "moved": patch.moved, "unsaved": patch.unsaved,
              "kept": [kept.record() for kept in beside.kept], "bases": beside.bases}
    if sandbox.spec.git_writable and final:
        try:
            record["commits"] = save_bundle(sandbox, run_dir, patch.paths)
        except (OSError, SandboxError) as exc:
            saved.error = f"the new commits could not be saved: {exc}"
        saved.commits = (record.get("commits") or {}).get("count", 0)
        saved.both = (record.get("commits") or {}).get("in_patch")
    try:
        _write_synced(run_dir / RECORD, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    except OSError as exc:  # a full disk: the patch alone is there, for `git apply` by hand
        saved.error = f"{run_dir / RECORD} could not be written ({exc.strerror}); {run_dir / PATCH} holds the changes"
        return saved
    beside.tidy()  # what the record no longer names: a large file's earlier content, bases of undone edits
    saved.paths, saved.unsaved, saved.kept = patch.paths, patch.unsaved, beside.kept
    if not final:
        return saved
    try:
        saved.held = held_back(project, _with_kept(_read(run_dir / PATCH), beside.kept), sandbox.spec.held_back)
    except (PatchError, ValueError) as exc:  # ours, just written: a bug, said rather than hidden
        saved.error = f"the patch just written cannot be read back ({exc})"
    return saved


def sizes(kept: list[Kept]) -> str:
    """The kept files with their sizes, for a line."""
    shown = ", ".join(f"{k.path} ({_size(k.size)})" for k in kept[:5])
    return shown + (f" and {len(kept) - 5} more (changes.json lists them)" if len(kept) > 5 else "")


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _kept_before(run_dir: Path) -> list[Kept]:
    """What the run's last save kept beside its patch (nothing when there was none, or it cannot be read)."""
    try:
        return _kept_of(_record(run_dir))
    except (ApplyRefused, ValueError):
        return []


def _kept_of(record: dict) -> list[Kept]:
    return [Kept.from_record(item) for item in record.get("kept") or []]


def _with_kept(patch: dict[str, list[Entry]], kept: list[Kept]) -> dict[str, list[Entry]]:
    """The patch's entries and, as entries without text, the files kept beside it."""
    entries = dict(patch)
    for item in kept:
        if item.path in entries:
            raise ValueError(f"{item.path} is both in the patch and kept beside it")
        entries[item.path] = [Entry(item.path, item.old_mode, item.mode, item.old_id, item.new_id, b"", kept=True)]
    return entries


def save_bundle(sandbox: Any, run_dir: Path, patched: list[str] = ()) -> dict | None:
    """The sandbox's new commits into RUN/commits.bundle; what changes.json records of them (None: none),
    with `in_patch`, the paths they change that the patch (`patched`) holds too (None: unknown)."""
    made = sandbox.bundle_commits()
    if made is None:
        return None
    data, count = made
    (run_dir / BUNDLE).write_bytes(data)
    committed = sandbox.committed_paths()
    both = None if committed is None else sorted(set(committed) & set(patched))
    return {"bundle": BUNDLE, "sha256": hashlib.sha256(data).hexdigest(), "count": count, "in_patch": both}


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
    note: str = ""
    """What the person should know of what was taken (that the commits and the patch hold the same change)."""
    conflicts: list[str] = field(default_factory=list)
    """Files a 3-way apply merged with conflicts: they hold git's conflict markers."""
    already: list[str] = field(default_factory=list)
    """Chosen paths the project already had as the run left them (applied before): not written."""

    def said(self, run_dir: Path) -> str:
        """What was written where, what was already there and what was held back, in one clause."""
        count = len(self.applied)
        if count or not self.already:
            parts = [f"applied {count} change{'' if count == 1 else 's'} to {self.project}"]
            parts += [f"already applied: {_names(self.already)} (as the run left them)"] if self.already else []
        else:
            parts = [f"already applied: {self.project} has {_names(self.already)} as the run left "
                     f"{'it' if len(self.already) == 1 else 'them'}; nothing written"]
        if self.held:
            names = ", ".join(f"{path} ({why})" for path, why in sorted(self.held.items()))
            parts.append(f"held back {len(self.held)}, applied only by name (lis-tui apply {run_dir} PATH): {names}")
        return "; ".join(parts)


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def load_run(run_dir: Path, project: Path | None = None) -> tuple[dict, dict[str, list[Entry]], Path]:
    """A run's record, its patch (checked against the recorded sha256) and the project to apply to:
    `project`, else the one the record names, which is taken only from a run of lis-tui's store
    (store.in_store): a run folder found anywhere else may be a sandbox's, naming any folder."""
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
        patch = _with_kept(_read(patch_file), _kept_of(record))
    except (PatchError, ValueError) as exc:
        raise ApplyRefused(f"{patch_file} or {run_dir / RECORD} is corrupt ({exc}); nothing was applied") from None
    if project is None and not in_store(run_dir):
        named = str(record.get("workspace"))
        raise ApplyRefused(f"{run_dir} is not a run of lis-tui's store, so the project its record names "
                           f"({named[:200]}) is not taken: a run folder found elsewhere may be a sandbox's. Fix: "
                           f"name the folder to apply to: lis-tui apply {run_dir} --workspace DIR", 2)
    where = Path(project or record.get("workspace") or "").expanduser().absolute()
    if not where.is_dir():
        raise ApplyRefused(f"the project {where} is not a folder (moved or removed?); give the folder to apply "
                           f"to: lis-tui apply {run_dir} --workspace DIR")
    return record, patch, where


def apply_run(run_dir: Path, paths: list[str] | None, patterns: tuple[str, ...] = (),
              project: Path | None = None, commits: bool = False, three_way: bool = False,
              before: Callable[[Path], None] | None = None) -> Applied:
    """Apply a past run's changes (all but the held-back ones, or just `paths`) to its project, and
    with `commits` fetch its new commits (then, without `paths`, those alone). `three_way`: a text
    file the project changed since is merged (git's 3-way apply; `Applied.conflicts`: those merged
    with conflict markers) instead of refused. `before(project)` is called once all is checked,
    before anything is written (to say where it goes)."""
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
    said: list[Path] = []

    def say_where() -> None:  # once, before the first write (the patch's, else the commits')
        if before is not None and not said:
            said.append(where)
            before(where)

    already = already_applied(where, patch, set(chosen) | set(held))  # a second apply writes nothing twice
    to_write = [p for p in chosen if p not in already]
    try:
        conflicts = apply_patch(where, patch, to_write, record.get("moved") or (), run_dir / BLOBS, three_way,
                                say_where)
    except PatchConflict as exc:
        done_before = f"; already applied: {_names([p for p in already if p in chosen])}" \
            if set(already) & set(chosen) else ""
        raise ApplyRefused((_merge_fix(run_dir, exc, paths) if exc.mergeable else str(exc)) + done_before) from None
    except PatchError as exc:
        raise ApplyRefused(str(exc)) from None
    left = {} if commits and paths is None else {p: why for p, why in held.items()
                                                 if p not in chosen and p not in already}
    done = Applied(where, sorted(set(to_write)), left, record, conflicts=conflicts,
                   already=[p for p in already if p in chosen])
    if commits:
        say_where()
        done.commits = fetch_commits(run_dir, where, record)
    done.note = _overlap(run_dir, record, done.applied, commits)
    return done


def _merge_fix(run_dir: Path, exc: PatchConflict, paths: list[str] | None) -> str:
    """The refusal with the fix that merges what a 3-way apply can merge."""
    merged = ", ".join(exc.mergeable)
    if set(exc.paths) == set(exc.mergeable):
        named = "".join(f" {p}" for p in paths or ())
        return (f"{exc.head}. Fix: `lis-tui apply {run_dir} --3way{named}` merges {merged} with the project's "
                "edits (git's 3-way apply)")
    others = ", ".join(p for p in exc.paths if p not in exc.mergeable)
    return (f"{exc.head}. Fix: look at {others}, then apply the others by name, with --3way to merge {merged} "
            "with the project's edits (git's 3-way apply)")


def _overlap(run_dir: Path, record: dict, applied: list[str], commits: bool) -> str:
    """The line saying that what was taken is in both the commits and the patch ('' when it is not)."""
    saved = record.get("commits")
    both = saved.get("in_patch") if isinstance(saved, dict) else []
    if not record.get("paths") or both == []:
        return ""
    taken = [p for p in applied if both is None or p in both]
    names = ", ".join(taken[:5]) + (f" and {len(taken) - 5} more" if len(taken) > 5 else "")
    branch = branch_for(run_dir)
    if commits and taken:
        return (f"you took both the commits and the patch's {names}, which hold the same changes: `git merge "
                f"{branch}` refuses over those files until you undo the applied ones; take one or the other")
    if commits:
        return (f"{one_or_other(both, str(run_dir / PATCH))}: you took the commits (merge {branch}), so do not "
                "apply the patch too")
    if taken:
        return (f"the run's commits hold the same changes to {names}: you took the patch, so leave the commits "
                f"(`lis-tui apply {run_dir} --commits`, whose merge would refuse over those files)")
    return ""


def listing(run_dir: Path, patterns: tuple[str, ...] = (), project: Path | None = None) -> list[tuple[str, str, str, str]]:
    """(path, kind, why it is held back or '', a note or '') of every change the run saved."""
    record, patch, where = load_run(run_dir, project)
    held = held_back(where, patch, patterns)
    kept_sizes = {kept.path: kept.size for kept in _kept_of(record)}
    already = set(already_applied(where, patch, patch))
    notes = {path: "; ".join(note for note in (
        f"{_size(kept_sizes[path])}, kept beside the patch in {BLOBS}/, not in it" if path in kept_sizes else "",
        "already applied" if path in already else "") if note) for path in patch}
    found = [(path, kind_of(entries), held.get(path, ""), notes[path]) for path, entries in sorted(patch.items())]
    saved = record.get("commits")
    if isinstance(saved, dict):
        count = saved.get("count")
        both = saved.get("in_patch")
        note = one_or_other(both, "the patch") if patch and both != [] else ""
        found.append((branch_for(run_dir), f"{count} commit{'' if count == 1 else 's'}", "", note))
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


class _Hashed:
    """A binary file being written, and the sha256 of what was written to it."""

    def __init__(self, out: Any) -> None:
        self.out, self.digest = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.out.write(data)


def _write_synced(path: Path, data: bytes) -> None:
    """`data` into `path` whole: a file beside it, its bytes on the disk, then renamed over it."""
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
