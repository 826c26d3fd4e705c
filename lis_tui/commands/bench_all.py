"""`lis-tui bench paper:all DIR`: every paper suite found in DIR, in both modes, each with the
package's settings, then the paper's main table over all of them.

DIR holds one entry per suite, named after it: a folder (`DIR/math/`, any .json/.jsonl/.parquet
files inside) or a file (`DIR/chem.jsonl`). Each suite's run goes to OUTPUT/SUITE/ (its own
results.jsonl, summary.md, report.html; --resume works per suite); OUTPUT/summary.md and
report.html hold the main table. An entry that names no suite, or a suite that cannot start (no
data in its folder, a missing document, no --judge-model), is named on stderr and in the table's
"Not run" list, and the other suites still run.
"""
from __future__ import annotations

import argparse
import copy
import json
import signal
import sys
import threading
from pathlib import Path

from tools.terminal_text import safe_terminal_text


def cmd_paper_all(args: argparse.Namespace) -> int:
    from lis_tui.commands import bench_run  # noqa: PLC0415

    if not args.data or not Path(args.data).is_dir():
        return _fail(f"paper:all needs DIR, a folder with one folder or file per suite (math/, "
                     f"chem.jsonl, ...); got {args.data!r}", 2)
    if args.suite or args.mode not in ("sandbox", "both"):
        return _fail("paper:all runs every suite in both modes; leave out --suite and --mode", 2)
    found, not_run = find_suites(Path(args.data))
    out = Path(args.output or bench_run.default_output("paper-all"))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, bench_run.interrupt)
    records, settings, interrupted, checked = [], [], False, False
    for suite, data in found:
        one = copy.copy(args)
        one.tasks, one.data, one.mode = f"paper:{suite}", str(data), "both"
        one.output = str(out / suite)
        try:
            runner, judge, chosen = bench_run.build_run(one)
        except Exception as exc:  # noqa: BLE001 (a bad suite is named; the others still run)
            not_run[suite] = str(exc)
            print(safe_terminal_text(f"lis-tui bench: {suite}: {exc}; the other suites go on"),
                  file=sys.stderr)
            continue
        if not checked:
            unreachable = bench_run.server_unreachable(runner.ctx.config)
            if unreachable:
                return _fail(unreachable, 1)
            checked = True
        outcome = bench_run.run_suite(one, runner, judge, chosen)
        if outcome is None:
            not_run[suite] = "the cluster failed (see above)"
            continue
        bench_run.report(argparse.Namespace(**{**vars(one), "quiet": True, "one_of_all": True}), runner,
                      outcome, chosen)
        records += [{**r, "trajectory": f"{suite}/{r['trajectory']}"} for r in outcome.results]
        settings.append(chosen)
        if outcome.interrupted:
            interrupted = True
            break
    return _write(args, out, records, settings, not_run, interrupted)


def find_suites(root: Path) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    """(suite, its data) for each entry of `root` named after a suite, and why each other
    entry that looks like data is left out."""
    from lis_tui.bench.paper.data import SUFFIXES  # noqa: PLC0415
    from lis_tui.bench.paper.suites import SUITES  # noqa: PLC0415

    found, not_run = [], {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.is_file() and entry.suffix not in SUFFIXES:
            continue
        name = entry.name if entry.is_dir() else entry.stem
        if name in SUITES:
            found.append((name, entry))
        else:
            not_run[name] = (f"{entry} names no paper suite; the suites are {', '.join(SUITES)} "
                             f"(rename it to one of them)")
            print(safe_terminal_text(f"lis-tui bench: {not_run[name]}; the other suites go on"),
                  file=sys.stderr)
    if not found:
        not_run.setdefault("(none)", f"{root} has no folder or file named after a suite "
                           f"({', '.join(SUITES)})")
    return found, not_run


def _write(args: argparse.Namespace, out: Path, records: list, settings: list,
           not_run: dict[str, str], interrupted: bool) -> int:
    from lis_tui.bench.paper.settings import markdown as settings_md  # noqa: PLC0415
    from lis_tui.bench.paper.table import main_table  # noqa: PLC0415
    from lis_tui.bench.report.pages import markdown, run_info, write_reports  # noqa: PLC0415
    from lis_tui.bench.report.summary import summarize  # noqa: PLC0415
    from lis_tui.config.settings import load_config  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    model = load_config(args.profile, {"model.model": args.model,
                                       "model.base_url": args.base_url}).model
    table = main_table(summarize(records) if records else {}, not_run)
    preface = table + "\n" + settings_md(settings)
    summary = write_reports(records, out, title="lis-tui bench paper:all",
                            run=run_info(model.model, model.base_url), preface=preface)
    (out / "not_run.json").write_text(json.dumps(not_run, indent=1), encoding="utf-8")
    if not args.quiet:
        print(markdown(summary))
    print(f"results in {out} (summary.md, report.html; each suite in its folder)", file=sys.stderr)
    if interrupted:
        print(f"lis-tui bench: interrupted; continue with --resume --output {out}", file=sys.stderr)
        return 130
    return 1 if not_run else 0


def _fail(message: str, code: int) -> int:
    print(safe_terminal_text(f"lis-tui bench: {message}"), file=sys.stderr)
    return code
