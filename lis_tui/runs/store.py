"""Past runs: where they are kept, what each one was, and finding one by its id (`lis-tui runs`,
`lis-tui replay ID`).

A run is a directory holding `trajectory.json`, named `<UTC time>-<6 hex digits>`. The app and
`lis-tui run` keep them in one place outside any project, $XDG_DATA_HOME/lis-tui/runs/ (default
~/.local/share), so nothing lands in the folder a run was started in; a run given its own
`--output-dir` is noted in $XDG_DATA_HOME/lis-tui/runs.index (one folder a line), so `lis-tui runs`
lists it too. That is lis-tui's store (with an earlier version's $XDG_STATE_HOME/lis-tui/runs/):
ids resolve only there, and only a run there is trusted for what its record says of where and how
it ran (`in_store`). Nothing is looked for inside a project (earlier versions' ./lis-output/ among
them): a run folder found there may be a sandbox's, applied with its workspace, and is used only
when named by its path. Listing reads only the head of each trajectory (one top-level key a line,
steps and messages last), so a long history of long runs lists in milliseconds.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable


_HEAD_STOP = ' "steps": '
HEAD_LIMIT = 4 << 20
"""Characters of a trajectory's head (the keys before `steps`) a listing reads, at most."""
WHOLE_LIMIT = 256 << 20
"""Bytes of a trajectory read whole (a listing of another layout, a replay), at most."""


def data_dir() -> Path:
    """$XDG_DATA_HOME/lis-tui (else ~/.local/share/lis-tui): what lis-tui keeps for the user."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "lis-tui"


def app_runs_dir() -> Path:
    """Where runs go unless told otherwise, the app's and `lis-tui run`'s: $XDG_DATA_HOME/lis-tui/runs."""
    return data_dir() / "runs"


def store_places() -> list[Path]:
    """Where lis-tui itself keeps runs (the index names the others): the runs folder, then an earlier
    version's. Never ./lis-output, which a workspace run's applied changes may have filled with
    folders a sandbox made."""
    from isolation.records import state_dir  # noqa: PLC0415 (it loads the rootfs store: not for the app's first frame)

    return [app_runs_dir(), state_dir() / "runs"]


def in_store(run_dir: Path) -> bool:
    """Whether lis-tui itself made `run_dir`: it is in a place of store_places(), or in the index."""
    where = run_dir.resolve()
    return where.parent in {place.resolve() for place in store_places()} or \
        where in {path.resolve() for path in indexed_runs()}


def remember(run_dir: Path) -> None:
    """Note a run folder outside the runs folder (an --output-dir) in the index, so it is listed."""
    run_dir = run_dir.absolute()
    if run_dir.parent == app_runs_dir() or "\n" in str(run_dir):
        return
    index = data_dir() / "runs.index"
    index.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(index, "a", encoding="utf-8", errors="surrogateescape") as out:
        out.write(f"{run_dir}\n")  # one write in append mode: runs started at once do not interleave


def indexed_runs() -> list[Path]:
    """The run folders the index names (those still there or not: a listing skips what is gone)."""
    try:
        with open(data_dir() / "runs.index", encoding="utf-8", errors="surrogateescape") as index:
            return [Path(line.rstrip("\n")) for line in index if line.strip()]
    except OSError:
        return []


@dataclass(frozen=True)
class RunSummary:
    """One past run, as much as a listing shows."""

    path: Path
    created: str
    task: str
    model: str
    finish_reason: str | None
    """None while running (or when the run was killed before it ended)."""
    answer: str
    message: str
    steps: int
    started_in: str = ""
    """The folder it was started in ("" for runs of versions that did not record it)."""
    workspace: str = ""
    """Its --workspace, or ""."""
    session: str = ""
    """The kept session (--session) its sandbox was, or ""."""

    @property
    def name(self) -> str:
        """The directory's name, `<UTC time>-<hex>`."""
        return self.path.name

    @property
    def short_id(self) -> str:
        """The hex part of the name, what `lis-tui runs` shows and `replay` takes."""
        return self.name.rsplit("-", 1)[-1]


def list_runs(places: Iterable[Path] | None = None, indexed: bool | None = None) -> list[RunSummary]:
    """Every run found in `places` (store_places() if None), and with `indexed` (by default when
    `places` is None) those the index names, newest first."""
    if indexed is None:
        indexed = places is None
    found: dict[Path, RunSummary] = {}
    entries = [entry for place in (places if places is not None else store_places())
               for entry in _children(Path(place))]
    for entry in entries + (indexed_runs() if indexed else []):
        summary = read_summary(entry)
        if summary is not None:
            found.setdefault(entry.resolve(), summary)
    return sorted(found.values(), key=lambda run: (run.created, run.name), reverse=True)


def read_summary(run_dir: Path) -> RunSummary | None:
    """What the run in `run_dir` was; None when it holds no readable trajectory."""
    head = _read_head(run_dir / "trajectory.json")
    if head is None:
        return None
    # Every field is checked for its type: a file a sandbox made may put anything in any of them.
    model = head.get("model") if isinstance(head.get("model"), dict) else {}
    totals = head.get("totals") if isinstance(head.get("totals"), dict) else {}
    steps, reason = totals.get("steps"), head.get("finish_reason")
    sandbox = head.get("sandbox") if isinstance(head.get("sandbox"), dict) else {}
    workspace, started, session = sandbox.get("workspace"), head.get("started_in"), sandbox.get("session")
    return RunSummary(path=run_dir, created=str(head.get("created") or ""), task=str(head.get("task") or ""),
                      model=str(model.get("model") or ""),
                      finish_reason=str(reason) if reason is not None else None,
                      answer=str(head.get("answer") or ""), message=str(head.get("message") or ""),
                      steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else 0,
                      started_in=started if isinstance(started, str) else "",
                      workspace=workspace if isinstance(workspace, str) else "",
                      session=session if isinstance(session, str) else "")


def find_run(ref: str, places: Iterable[Path] | None = None) -> Path:
    """The run directory `ref` names: a run's full name or its id, or a unique prefix of either,
    among the runs of `places` (default: lis-tui's store and its index), else a path. A ref that
    reads as a path (a `/`, `~`, `.json`) is one; a folder here that is named like a run id is the
    store's run, not the folder. ValueError with the fix when none or several match."""
    path = Path(ref).expanduser()
    if os.sep in ref or ref.startswith("~") or ref.endswith(".json") or ref in (".", ".."):
        return path  # a path: its own errors say more
    runs = list_runs(places)
    matches = [run for run in runs if run.name.startswith(ref) or run.short_id.startswith(ref)] if ref else []
    if len(matches) == 1:
        return matches[0].path
    if not matches and path.exists():
        return path
    if not matches:
        where = ", ".join([str(p) for p in (places if places is not None else store_places())]
                          + (["runs.index"] if places is None else []))
        raise ValueError(f"no run {ref!r}: not a path, and no run id starts with it (looked in {where}). Fix: "
                         "lis-tui runs lists the runs and their ids; name a run folder elsewhere by its path")
    shown = ", ".join(f"{run.short_id} ({run.name})" for run in matches[:5])
    raise ValueError(f"{ref!r} matches {len(matches)} runs: {shown}. Fix: give more of the id")


def open_run_file(file: Path, follow: bool = False):
    """`file` opened for reading as text, if it is a regular file; else OSError. A run's folder may
    hold what a sandbox made (a folder named by its path; an --output-dir a later workspace run
    changed): a fifo would block the open and a link could name /dev/zero, so neither is followed
    nor read. `follow`: a path the user gave may be a link (to a regular file)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(file, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{file} is not a regular file")
    return os.fdopen(fd, encoding="utf-8")


def _read_head(file: Path) -> dict[str, Any] | None:
    """The top-level keys before `steps`, read line by line; the whole file when it is not laid
    out the way TrajectoryWriter writes it. At most HEAD_LIMIT characters of head."""
    head: dict[str, Any] = {}
    try:
        with open_run_file(file) as handle:
            if handle.readline(2).rstrip("\n") != "{":
                return _read_whole(file)
            budget = HEAD_LIMIT
            while line := handle.readline(budget + 1):
                budget -= len(line)
                if budget < 0:
                    return None  # a head this long is no run of ours
                if line.startswith(_HEAD_STOP):
                    return head
                head.update(json.loads("{" + line.rstrip().rstrip(",") + "}"))
    except (OSError, UnicodeDecodeError, ValueError):
        return _read_whole(file)
    return head or None


def _read_whole(file: Path) -> dict[str, Any] | None:
    try:
        with open_run_file(file) as handle:
            if os.fstat(handle.fileno()).st_size > WHOLE_LIMIT:
                return None
            doc = json.loads(handle.read(WHOLE_LIMIT + 1))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        return None
    doc.setdefault("totals", {"steps": len(doc["steps"])})
    return doc


def _children(place: Path) -> list[Path]:
    try:
        with os.scandir(place) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except OSError:
        return []
