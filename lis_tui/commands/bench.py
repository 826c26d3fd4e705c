"""`lis-tui bench`: run a task set in many sandboxes at once and report accuracy, tokens, tools."""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from lis_tui.commands.bench_run import build_run, interrupt, report, run_suite, server_unreachable
from lis_tui.commands.sandbox import add_allow_dir_flag, add_model_flags, add_sandbox_flags, add_tool_format_flag
from lis_tui.ray.cli import add_ray_flags, add_workers_flag
from tools.terminal_text import safe_terminal_text

_EPILOG = """\
TASKS is a built-in set (demo: four small tasks of our own, not the paper's data; smoke: ~30
tasks that need the sandbox), paper:SUITE DATA (docs/paper-suites.md; paper:all DIR runs every
suite in DIR both ways and writes the paper's main table), a JSON
list or JSONL file of tasks (id, problem_statement, ground_truth, input_files, domain, reward,
documents_dir), or a folder of task folders (task.toml + input/). A task's documents_dir and
input_dir are folders inside its file's folder (or --allow-dir), given relative to it.

The --output folder gets results.jsonl (one line per finished episode), episodes/<id>/ (each
trajectory), summary.md, summary.json and report.html. Ctrl-C stops cleanly: running episodes end,
their sandboxes are removed, and --resume with the same --output runs what is left.

With --ray the episodes run on a Ray cluster's nodes (each in a sandbox of its node; the rootfs
is sent to nodes that lack it); this machine writes the results, so the folder is the same.

exit codes: 0 all episodes ran (whatever their score); 1 an error; 2 usage or config error;
130 interrupted."""


def add_parsers(sub) -> None:
    p = sub.add_parser("bench", help="evaluate a model on a task set, many sandboxes at once",
                       description="Run every task of a set as episodes (each in its own fresh "
                                   "sandbox), score the answers, and write a report.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", metavar="TASKS", help="demo, smoke, a .json/.jsonl file, a task folder, "
                   "paper:SUITE (then DATA), or paper:all (then a folder of suites)")
    p.add_argument("data", metavar="DATA", nargs="?", help="with paper:SUITE: a .json/.jsonl/"
                   ".parquet file or folder in the paper's schema, or hf:NAME:CONFIG[:SPLIT]")
    p.add_argument("--suite", metavar="SUITE", help="score TASKS as this paper suite (math, "
                   "physics, chem, biomed, long_context, instruct_follow, instruct_pretrain)")
    p.add_argument("--suite-scorer", metavar="NAME", help="score a paper suite another way than "
                   "the package (lenient: lis-tui's reading, any suite; physics: math-verify, "
                   "for a number without a judge model; the summary notes it is not the paper's "
                   "metric)")
    p.add_argument("--mode", choices=("sandbox", "llm", "both"), default="sandbox",
                   help="sandbox: the agent with tools (default); llm: one reply, files inlined; "
                        "both: each task both ways, with the difference reported")
    p.add_argument("--concurrency", "-j", type=int, metavar="N",
                   help="episodes at once (default 4; with --ray: as many as the nodes' CPUs allow)")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="runs of each task per mode")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    p.add_argument("--output", metavar="DIR", help="results folder (default ./lis-bench/<set>-<UTC time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output")
    p.add_argument("--reward", metavar="R", help="reward for tasks that name none (default normalized)")
    p.add_argument("--judge-model", metavar="M", help="model for `judge` rewards")
    p.add_argument("--judge-base-url", metavar="U", help="server of the judge (default: --base-url)")
    add_allow_dir_flag(p)
    add_sandbox_flags(p)
    add_workers_flag(p)
    add_ray_flags(p)
    group = add_model_flags(p)
    group.add_argument("--temperature", type=float, metavar="T", help="sampling temperature")
    group.add_argument("--prompts", metavar="FILE", help="a TOML file replacing built-in prompts, "
                       "or llm-in-sandbox:SUITE for that suite's prompts from the installed "
                       "llm-in-sandbox package (paper suites: theirs when it is installed)")
    group.add_argument("--observation", choices=("lis-tui", "paper"), help="how tool results read: "
                       "ours, or the paper harness's (exit code, stdout and stderr apart, steps "
                       "left); paper suites default to paper")
    group.add_argument("--max-tokens", type=int, metavar="N", help="most tokens per model reply "
                       "(paper suites: 65536)")
    group.add_argument("--max-context-tokens", type=int, metavar="N", help="end an episode when its "
                       "prompt passes N tokens (paper suites: 65536, long_context 131072)")
    group.add_argument("--max-no-action", type=int, metavar="N", help="stop after N replies in a "
                       "row without a tool call; 0: no limit (default 3; paper suites: 0)")
    group.add_argument("--tool-calls", choices=("all", "first"), help="run every tool call of a "
                       "reply, or only the first as the paper's harness does (paper suites: first)")
    group.add_argument("--bad-arguments", choices=("answer", "nudge"), help="a tool call whose "
                       "arguments are not JSON: answered saying so, or taken as a reply without a "
                       "tool call as the paper's harness does (paper suites: nudge)")
    group.add_argument("--prompt-too-long", choices=("fail", "shrink"), help="the server refuses "
                       "a prompt as too long: the episode fails, or max tokens is lowered and the "
                       "call asked again as the paper's harness does (paper suites: shrink)")
    group.add_argument("--llm-prompt", choices=("paper", "lis-tui"), help="--mode llm of a paper "
                       "suite: the package's prompt, its whole reply the answer (default), or ours, "
                       "the answer after ANSWER:")
    add_tool_format_flag(group)
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line, no table: only the line saying where the results are")
    p.set_defaults(func=cmd_bench, late_positional="data")


def cmd_bench(args: argparse.Namespace) -> int:
    from lis_tui.bench.tasks import TaskError  # noqa: PLC0415 (keep --help fast)
    from lis_tui.config.settings import ConfigError  # noqa: PLC0415

    if args.tasks == "paper:all":
        from lis_tui.commands.bench_all import cmd_paper_all  # noqa: PLC0415

        return cmd_paper_all(args)
    try:
        runner, judge, settings = build_run(args)
    except (ConfigError, TaskError, ValueError) as exc:  # may quote a task file: its ids, ...
        print(safe_terminal_text(f"lis-tui bench: {exc}"), file=sys.stderr)
        return 2
    unreachable = server_unreachable(runner.ctx.config)
    if unreachable:
        print(safe_terminal_text(f"lis-tui bench: {unreachable}"), file=sys.stderr)
        return 1
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
    outcome = run_suite(args, runner, judge, settings)
    if outcome is None:
        return 1
    return report(args, runner, outcome, settings)
