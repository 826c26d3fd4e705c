"""`lis-tui rollout`: n sandboxed episodes per task against a policy server, with GRPO advantages."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from lis_tui.commands.sandbox import add_allow_dir_flag, add_sandbox_flags, add_tool_format_flag, allow_dir, spec_from_args
from lis_tui.ray.cli import add_ray_flags, add_workers_flag, ray_from_args
from tools.terminal_text import safe_terminal_text

_EPILOG = """\
TASKS is any bench task set (a built-in name, .json/.jsonl, a task folder), e.g. one written by
`lis-tui tasks build`. The policy server is OpenAI-compatible (vLLM, SGLang) serving the current
weights. Sampling settings come from the model config as for `run`; the flags override them.

--output gets rollouts.jsonl (one line per episode as it ends), groups.jsonl (rewards, mean, std
and advantages per task) and train.jsonl (complete groups, advantages filled in: what a trainer
reads; see docs/rollouts.md). Ctrl-C or SIGTERM stops cleanly; --resume continues, and a group
cut short by a kill is completed then.

exit codes: 0 every group complete; 1 an error; 2 usage or config error; 130 interrupted."""


def add_parsers(sub) -> None:
    p = sub.add_parser("rollout", help="group rollouts for RL training (n episodes per task)",
                       description="Run n episodes of every task, each in its own sandbox, score "
                                   "them and compute GRPO advantages per task.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", metavar="TASKS", help="a task set (file, folder or built-in name)")
    p.add_argument("--policy-url", required=True, metavar="URL",
                   help="the policy server, e.g. http://localhost:8000/v1")
    p.add_argument("--model", default="", metavar="M", help="model name (default: the server's first)")
    p.add_argument("-n", type=int, default=8, metavar="N", help="samples per task (default 8)")
    p.add_argument("--output", required=True, metavar="DIR", help="results folder")
    p.add_argument("--concurrency", "-j", type=int, metavar="N", help="episodes at once (default N)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    p.add_argument("--resume", action="store_true", help="continue the run in --output")
    p.add_argument("--no-token-ids", dest="token_ids", action="store_false",
                   help="do not ask for logprobs and token ids (for servers that reject them)")
    p.add_argument("--profile", metavar="P", help="a [models.P] profile from the config")
    add_allow_dir_flag(p)
    s = p.add_argument_group("sampling (default: the model config)")
    s.add_argument("--temperature", type=float, metavar="T")
    s.add_argument("--top-p", type=float, metavar="P")
    s.add_argument("--max-tokens", type=int, metavar="N", help="most tokens per reply")
    s.add_argument("--seed", type=int, help="server sampling seed (the same seed makes samples alike)")
    s.add_argument("--max-steps", type=int, metavar="N", help="most model calls per episode")
    s.add_argument("--wall-time", type=float, metavar="S", help="stop an episode after S seconds")
    add_tool_format_flag(s)
    add_sandbox_flags(p)
    add_workers_flag(p)
    add_ray_flags(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_rollout)


def cmd_rollout(args: argparse.Namespace) -> int:
    from lis_tui.bench.tasks import TaskError  # noqa: PLC0415 (keep --help fast)
    from lis_tui.config.settings import ConfigError  # noqa: PLC0415

    try:
        runner = build_run(args)
    except (ConfigError, TaskError, ValueError) as exc:
        print(safe_terminal_text(f"lis-tui rollout: {exc}"), file=sys.stderr)
        return 2
    from lis_tui.commands.bench_run import interrupt, server_unreachable  # noqa: PLC0415

    unreachable = server_unreachable(runner.ctx.config)
    if unreachable:
        print(safe_terminal_text(f"lis-tui rollout: {unreachable}"), file=sys.stderr)
        return 1
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
    from lis_tui.ray import ClusterError  # noqa: PLC0415 (no Ray in it)

    try:
        outcome = runner.run_rollouts()
    except ClusterError as exc:
        print(safe_terminal_text(f"lis-tui rollout: {exc}"), file=sys.stderr)
        return 1
    zero = sum(g["zero_variance"] for g in outcome.groups)
    if not args.quiet:
        warned = f"; warnings in {outcome.output / 'warnings.txt'}" if outcome.warnings else ""
        print(safe_terminal_text(f"{len(outcome.groups)} groups complete ({zero} with zero variance), "
                                 f"{outcome.count} episodes in {outcome.output / 'train.jsonl'}{warned}"),
              file=sys.stderr)
    else:  # the run said nothing: a warning is still said once
        for warning in outcome.warnings:
            print(safe_terminal_text(f"lis-tui rollout: {warning}"), file=sys.stderr)
    if outcome.interrupted or outcome.incomplete:
        print(safe_terminal_text(f"lis-tui rollout: {len(outcome.incomplete)} group(s) incomplete; "
                                 f"continue with --resume --output {outcome.output}"), file=sys.stderr)
        return 130 if outcome.interrupted else 1
    return 0


def build_run(args: argparse.Namespace):
    from lis_tui.api import configured_rootfs  # noqa: PLC0415
    from lis_tui.bench.tasks import load_tasks  # noqa: PLC0415
    from lis_tui.config.settings import load_config  # noqa: PLC0415
    from lis_tui.rl.runner import RolloutOptions, RolloutRunner  # noqa: PLC0415

    if args.workspace or args.input_dir or getattr(args, "session", None):
        raise ValueError("--workspace, --input-dir and --session do not apply to rollout: each "
                         "episode gets a fresh sandbox and its task brings its own files")
    tasks = load_tasks(args.tasks, allow=allow_dir(args))
    overrides = {"model.model": args.model or None, "model.base_url": args.policy_url,
                 "model.temperature": args.temperature, "model.top_p": args.top_p,
                 "model.max_tokens": args.max_tokens, "model.seed": args.seed,
                 "agent.max_steps": args.max_steps, "agent.wall_time": args.wall_time,
                 "agent.tool_format": args.tool_format,
                 "network.mode": args.network, "sandbox.rootfs": args.rootfs,
                 "sandbox.workers": args.workers}
    config = load_config(args.profile, overrides)
    args.rootfs = args.rootfs or configured_rootfs(config)
    args.network = args.network or config.network.mode
    options = RolloutOptions(output=Path(args.output), n=args.n, concurrency=args.concurrency,
                             limit=args.limit, resume=args.resume, token_ids=args.token_ids,
                             progress=None if args.quiet else sys.stderr,
                             workers=config.sandbox.workers, ray=ray_from_args(args))
    return RolloutRunner(tasks, config, spec_from_args(args), options)
