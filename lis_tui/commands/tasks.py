"""`lis-tui tasks build`: turn a JSONL of context items into a task set for `bench` and `rollout`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.terminal_text import safe_terminal_text

_EPILOG = """\
INPUT is a JSONL file, one item a line, in any of these shapes:
  {"id", "context": TEXT or [{"title", "text"}, ...], "question", "answer",
   "domain"?, "group"?, "reward"?}
  {"context", "question", "answer"}                       (ids are then item-<line>)
  the paper's instruct_pretrain rows: {"id", "problem_statement", "ground_truth",
   "input_files", "domain", "qa_type"}

--context files (default) puts each document under /testbed/documents as its own file, long ones
split at headings or paragraphs into parts of about --chunk-tokens, named NN-title.partKofM.txt
(NN is the document's place after shuffling, K/M the part). --context prompt inlines the same
material, in the same order, in the prompt: build both with one --seed to compare the two arms.

Distractors come from items of other groups (group defaults to domain), never the same one.
The output is a bench task file: `lis-tui bench OUT` or `lis-tui rollout OUT` runs it."""


def add_parsers(sub) -> None:
    p = sub.add_parser("tasks", help="build task sets from context data (for bench and rollout)",
                       description="Build task sets from data.")
    tasks_sub = p.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", required=True)
    b = tasks_sub.add_parser("build", help="context items (JSONL) -> a task set",
                             description="Build a task set whose context is files in the sandbox "
                                         "(or the prompt), from question/answer items.",
                             epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("input", metavar="INPUT", help="JSONL file of context items")
    b.add_argument("--output", "-o", metavar="FILE", required=True, help="task file to write (.jsonl)")
    b.add_argument("--context", choices=("files", "prompt"), default="files",
                   help="where the context goes (default files)")
    b.add_argument("--chunk-tokens", type=int, default=2000, metavar="N",
                   help="split documents longer than about N tokens (default 2000)")
    b.add_argument("--distractors", type=int, default=0, metavar="N",
                   help="add N documents from other groups' items to each task")
    b.add_argument("--examples", type=int, default=0, metavar="K",
                   help="show K earlier items of the same group with their answers")
    b.add_argument("--index", action="store_true", help="also write documents/INDEX.md")
    b.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    b.add_argument("--reward", default="normalized", metavar="R",
                   help="reward of items that name none (default normalized; any bench reward)")
    b.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    b.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    from lis_tui.bench.scoring.rewards import RewardError, parse_reward  # noqa: PLC0415 (fast --help)
    from lis_tui.rl.build import BuildOptions, build_tasks, summary_text  # noqa: PLC0415
    from lis_tui.rl.items import ItemError, read_items  # noqa: PLC0415

    out = Path(args.output)
    try:
        if out.exists() and not args.force:
            raise ValueError(f"{out} exists: pass --force to replace it, or choose another --output")
        parse_reward(args.reward)
        options = BuildOptions(context=args.context, chunk_tokens=args.chunk_tokens,
                               distractors=args.distractors, examples=args.examples,
                               index=args.index, seed=args.seed, reward=args.reward)
        items = read_items(Path(args.input))
        tasks, summary = build_tasks(items, options)
    except (ItemError, RewardError, ValueError) as exc:  # may quote the data: make it safe
        print(safe_terminal_text(f"lis-tui tasks build: {exc}"), file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task, ensure_ascii=False) + "\n")
    tmp.replace(out)
    print(safe_terminal_text(f"wrote {out}: {summary_text(summary)}"), file=sys.stderr)
    return 0
