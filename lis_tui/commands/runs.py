"""`lis-tui runs`: past runs, newest first, with the id `lis-tui replay ID` and `lis-tui resume ID` take."""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys

_DESCRIPTION = """\
List past runs, newest first, wherever they were started: lis-tui's store, that is the app's and
`lis-tui run`'s (kept under $XDG_DATA_HOME/lis-tui/runs/), those given an --output-dir (noted in
$XDG_DATA_HOME/lis-tui/runs.index) and an earlier version's ($XDG_STATE_HOME/lis-tui/runs/). Nothing
inside a project is listed (an earlier version's ./lis-output/ neither: a sandbox may have made what
is there); --dir lists a folder you name. Show one with `lis-tui replay ID`; an id may be shortened
to any prefix that names one run; `lis-tui apply ID` applies a workspace run's changes; `lis-tui
resume ID` (or `run --resume ID TASK`) continues one. A run outside the store is named by its path,
and what its record says of where and how it ran is not taken: apply needs --workspace DIR."""
_RESULTS = {"submitted": "submitted", "max_steps": "limit: steps", "max_context": "limit: context",
            "wall_time": "limit: time", "no_action": "limit: no tool", "sandbox_limit": "limit: sandbox",
            "error": "error",
            "cancelled": "cancelled", None: "unfinished"}


def add_parsers(sub) -> None:
    p = sub.add_parser("runs", help="list past runs (id, time, task, model, result, project)", description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--limit", type=int, default=20, metavar="N",
                   help="show the newest N runs (default 20; 0 for all)")
    p.add_argument("--dir", action="append", default=[], metavar="DIR",
                   help="also list the runs in DIR (a run's --output-dir parent); may be repeated. Runs there are "
                   "named by their path (DIR/NAME), not their id, unless they are in the store")
    p.add_argument("--json", action="store_true", help="print JSON, one object per run")
    p.set_defaults(func=cmd_runs)


def cmd_runs(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from lis_tui.runs.store import list_runs, store_places  # noqa: PLC0415

    given = [Path(d).expanduser().absolute() for d in args.dir]
    for place in given:
        if not place.is_dir():
            print(f"lis-tui runs: --dir {place}: {'not a folder' if place.exists() else 'no such folder'}; "
                  "give the folder that holds the runs (a run's --output-dir parent)", file=sys.stderr)
            return 2
    places = store_places() + given
    runs = list_runs(places, indexed=True)
    shown = runs if args.limit <= 0 else runs[:args.limit]
    if args.json:
        for run in shown:
            print(json.dumps({"id": run.short_id, "name": run.name, "path": str(run.path), "created": run.created,
                              "task": run.task, "model": run.model, "finish_reason": run.finish_reason,
                              "answer": run.answer, "message": run.message, "steps": run.steps,
                              "project": _project(run), "workspace": run.workspace or None}))
        return 0
    if not runs:
        print("no runs yet (looked in " + ", ".join(str(p) for p in places) + '); start one: lis-tui run "TASK"')
        return 0
    _print_table(shown)
    if len(shown) < len(runs):
        print(f"({len(runs) - len(shown)} older; lis-tui runs -n 0 lists all)", file=sys.stderr)
    return 0


def _print_table(runs) -> None:
    from pathlib import Path  # noqa: PLC0415

    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    width = shutil.get_terminal_size((120, 24)).columns
    rows = [("ID", "WHEN", "STEPS", "MODEL", "RESULT", "PROJECT", "FOLDER", "TASK")]
    for run in runs:
        # Task, model and answer come from the run's file: the model wrote the answer.
        result = _RESULTS.get(run.finish_reason, str(run.finish_reason))
        if run.finish_reason == "submitted" and run.answer:
            result += ": " + _clip(_first_line(run.answer), 24)
        project = _project(run)
        rows.append((run.short_id, _when(run.created), str(run.steps), _clip(run.model or "(server default)", 24),
                     result, _clip_start(_folder(Path(project)), 32) if project else "-", _folder(run.path.parent),
                     _first_line(run.task)))
    rows = [tuple(safe_terminal_text(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(7)]
    for row in rows:
        line = "  ".join(cell.rjust(w) if i == 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        print(line + "  " + _clip(row[7], max(width - len(line) - 3, 20)))


def _project(run) -> str:
    """The project a run worked on (its workspace), else the folder it was started in ("" when unknown):
    what `--continue` and `resume` take it to belong to."""
    return run.workspace or run.started_in


def _folder(path) -> str:
    """Where a run is kept, home as ~ (runs live in one place, but --output-dir puts one anywhere)."""
    from pathlib import Path  # noqa: PLC0415

    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def _when(created: str) -> str:
    try:
        return datetime.datetime.fromisoformat(created).astimezone().strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError):  # the run's file says when; a sandbox may have written it
        return created[:16] or "-"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _clip_start(text: str, width: int) -> str:
    """A path's end, which names it, when it is too long."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]
