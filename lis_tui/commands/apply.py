"""`lis-tui apply RUN [PATH...]`: a past run's changes to its workspace, applied to the project."""
from __future__ import annotations

import argparse
import sys

_DESCRIPTION = """\
Apply the changes a `lis-tui run --workspace DIR` saved (RUN/changes.patch, and the files over 8 MiB
kept beside it in RUN/blobs/) to that project, under the review's rules: held-back changes (links
the sandbox made, new executables, .git, CI and tool config, ...) only when named; nothing at all
when a chosen file changed in the project since the run (the message names it); one already as the
run left it (applied before) is said to be, and not written again. With --3way, a
text file changed since is merged instead (git apply --3way in a scratch copy, from the old
content the run kept); where both sides changed the same lines it gets git's conflict markers,
said by name (exit 1). With --commits, the model's new commits (a run with --git-writable)
are fetched into a new branch lis-tui/RUN of the project's repository: objects and that branch
only, never the sandbox's hooks, config or other refs. The committed changes are in the patch too
(the model's work tree holds them): take one or the other, as the end of `lis-tui run`, --list and
apply say; both taken, `git merge lis-tui/RUN` refuses over those files.

The project is the one the run worked in, said before anything is written. Only a run of lis-tui's
store (`lis-tui runs`) is trusted for that: a run folder named by its path elsewhere (one found in a
project may be a sandbox's) needs --workspace DIR."""


def add_parsers(sub) -> None:
    p = sub.add_parser("apply", help="apply a past run's changes to its project", description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN", help="the run: its id from `lis-tui runs` (or a prefix), or its folder")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="apply just these (held-back ones included); default: all but the held-back ones")
    p.add_argument("--list", action="store_true", help="list the run's changes, and why any is held back; "
                   "apply nothing")
    p.add_argument("--3way", dest="three_way", action="store_true",
                   help="merge a text file the project changed since the run (git's 3-way apply, from its old "
                   "content kept beside the patch); where both changed the same lines the file gets git's "
                   "conflict markers, said by name (exit 1)")
    p.add_argument("--commits", action="store_true", help="fetch the run's new commits into branch lis-tui/RUN "
                   "(alone, unless PATHs are given too)")
    p.add_argument("--workspace", metavar="DIR", help="apply to DIR instead of the run's project (needed for a "
                   "run folder outside lis-tui's store: where its record says to apply is not taken)")
    p.set_defaults(func=cmd_apply)


def cmd_apply(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from lis_tui.config.settings import ConfigError, load_config  # noqa: PLC0415
    from lis_tui.runs.changes import ApplyRefused, apply_run, listing  # noqa: PLC0415
    from lis_tui.runs.store import find_run  # noqa: PLC0415
    from lis_tui.config.workspace import workspace_options  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    def say(text: str) -> None:  # paths and reasons are the model's names
        print(safe_terminal_text(text), file=sys.stderr)

    try:
        run_dir = find_run(args.run)
        patterns = workspace_options(load_config())["held_back"]
        project = Path(args.workspace).expanduser() if args.workspace else None
        if args.list:
            for path, kind, why, note in listing(run_dir, patterns, project):
                print(safe_terminal_text(f"{kind:8}  {path}" + (f"  (held back: {why})" if why else "")
                                         + (f"  ({note})" if note else "")))
            return 0
        done = apply_run(run_dir, args.paths or None, patterns, project, commits=args.commits,
                         three_way=args.three_way, before=lambda where: say(f"lis-tui apply: writing to {where}"))
    except (ValueError, ConfigError) as exc:
        say(f"lis-tui apply: {exc}")
        return 2
    except ApplyRefused as exc:
        say(f"lis-tui apply: {exc}")
        return exc.code
    if done.commits:
        say(f"fetched the run's commits into branch lis-tui/{run_dir.name} ({done.commits[:12]})")
    if done.applied or done.already or done.held or not done.commits:
        say(done.said(run_dir))
    if done.note:
        say(done.note)
    if done.conflicts:
        say(f"merged with conflicts: {', '.join(done.conflicts)}: each holds git's markers (<<<<<<< ours, the "
            "project's lines; >>>>>>> theirs, the run's); resolve them there")
        return 1
    return 0
