"""What a `bench` run does once its arguments are parsed: build the runner, run a suite, report;
shared by `bench` (commands/bench.py), `bench paper:all` (bench_all.py) and `rollout`'s stop and
reachability checks. The parsers stay in their commands' modules."""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

from lis_tui.commands.sandbox import spec_from_args
from lis_tui.ray.cli import ray_from_args
from tools.terminal_text import safe_terminal_text


def run_suite(args: argparse.Namespace, runner: Any, judge: Any, settings: Any) -> Any:
    """Print the settings header (paper suites), run, close the judge; None when the cluster
    failed (said on stderr)."""
    from lis_tui.ray import ClusterError  # noqa: PLC0415 (no Ray in it)

    if settings is not None and not args.quiet:
        print("\n".join(settings.lines()), file=sys.stderr)
    try:
        return runner.run()
    except ClusterError as exc:
        print(safe_terminal_text(f"lis-tui bench: {exc}"), file=sys.stderr)
        return None
    finally:
        if judge is not None:
            judge.close()


def build_run(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(runner, judge or None, a paper suite's RunSettings or None)."""
    from lis_tui.api import configured_rootfs  # noqa: PLC0415
    from lis_tui.bench.runner import BenchOptions, BenchRunner  # noqa: PLC0415
    from lis_tui.bench.tasks import load_tasks  # noqa: PLC0415
    from lis_tui.config.settings import load_config  # noqa: PLC0415

    if args.workspace or args.input_dir or getattr(args, "session", None):
        raise ValueError("--workspace, --input-dir and --session do not apply to bench: each "
                         "episode gets a fresh sandbox and its task brings its own files")
    if args.resume and not args.output:
        raise ValueError("--resume needs --output DIR, the folder of the run to continue")
    if args.reward:
        from lis_tui.bench.scoring.rewards import parse_reward  # noqa: PLC0415

        parse_reward(args.reward)  # a typo fails here even when every task names its own
    tasks = _tasks(args, load_tasks)
    overrides = {"model.model": args.model, "model.base_url": args.base_url,
                 "model.temperature": args.temperature, "agent.max_steps": args.max_steps,
                 "agent.wall_time": args.wall_time, "agent.prompts": args.prompts,
                 "agent.observation": args.observation, "model.max_tokens": args.max_tokens,
                 "agent.tool_format": args.tool_format,
                 "agent.max_context_tokens": args.max_context_tokens,
                 "agent.tool_calls": args.tool_calls, "agent.max_no_action": args.max_no_action,
                 "agent.bad_arguments": args.bad_arguments,
                 "agent.prompt_too_long": args.prompt_too_long,
                 "network.mode": args.network, "sandbox.rootfs": args.rootfs,
                 "sandbox.workers": args.workers}
    config = load_config(args.profile, overrides)
    from lis_tui.prompts import load_prompts  # noqa: PLC0415

    load_prompts(config.agent.prompts or None)  # a bad --prompts stops here, not in every episode
    modes = ("sandbox", "llm") if args.mode == "both" else (args.mode,)
    spec, network_flag = None, args.network
    if "sandbox" in modes:
        args.rootfs = args.rootfs or configured_rootfs(config)
        args.network = args.network or config.network.mode
        spec = spec_from_args(args)
    options = BenchOptions(output=Path(args.output or default_output(args.tasks)), modes=modes,
                           concurrency=4 if args.concurrency is None else args.concurrency, repeat=args.repeat, limit=args.limit,
                           resume=args.resume, progress=None if args.quiet else sys.stderr,
                           workers=config.sandbox.workers, ray=ray_from_args(args))
    judge = _judge(args, config, tasks)  # before the paper's settings: the judge keeps its own
    tasks, settings = _paper_settings(args, config, tasks, network_flag)
    if settings is not None and spec is not None and args.network != config.network.mode:
        args.network = config.network.mode  # the package's container has a network
        spec = spec_from_args(args)
    return BenchRunner(tasks, config, spec, options, judge), judge, settings


def _paper_settings(args: argparse.Namespace, config: Any, tasks: list,
                    network_flag: str | None = None) -> tuple[list, Any]:
    """A paper suite runs with the package's settings, each flag given overriding its one."""
    suite = args.tasks[len("paper:"):] if args.tasks.startswith("paper:") else args.suite
    if not suite:
        if args.llm_prompt:
            raise ValueError("--llm-prompt goes with a paper suite (paper:SUITE DATA or --suite)")
        return tasks, None
    from dataclasses import replace  # noqa: PLC0415

    from lis_tui.bench.paper import settings as paper  # noqa: PLC0415

    flags = {k.flag: getattr(args, k.flag[2:].replace("-", "_")) for k in paper.KNOBS}
    flags["--network"] = network_flag  # as given: args.network has the config's by now
    settings = paper.apply(config, suite, flags)
    return [replace(t, extra={**t.extra, "llm_prompt": settings.llm_prompt}) for t in tasks], settings


def _tasks(args: argparse.Namespace, load_tasks: Any) -> list:
    """The tasks: our task file, or a paper suite over DATA (paper:SUITE DATA, --suite)."""
    from lis_tui.commands.sandbox import allow_dir  # noqa: PLC0415

    allow = allow_dir(args)
    suite, data = args.suite, args.tasks
    if args.tasks.startswith("paper:"):
        suite, data = args.tasks[len("paper:"):], args.data
        if not data:
            raise ValueError(f"{args.tasks} needs DATA: lis-tui bench {args.tasks} rows.parquet "
                             "(or a .json/.jsonl file, a folder, hf:NAME:CONFIG[:SPLIT])")
    elif args.data:
        raise ValueError(f"DATA ({args.data}) goes with paper:SUITE; for a task file give TASKS only")
    if not suite:
        if args.suite_scorer:
            raise ValueError("--suite-scorer goes with a paper suite (paper:SUITE DATA or --suite)")
        return load_tasks(args.tasks, default_reward=args.reward, allow=allow)
    if args.reward:
        raise ValueError("--reward does not apply to a paper suite: the suite sets the scorer")
    from lis_tui.bench.paper import load_suite  # noqa: PLC0415

    return load_suite(suite, data, args.suite_scorer or "", allow)


def _judge(args: argparse.Namespace, config: Any, tasks: list) -> Any:
    from dataclasses import replace  # noqa: PLC0415

    from lis_tui.bench.scoring.judge import Judge  # noqa: PLC0415
    from lis_tui.bench.scoring.rewards import parse_reward  # noqa: PLC0415
    from lis_tui.config.settings import check_base_url  # noqa: PLC0415

    if args.judge_base_url:
        check_base_url(args.judge_base_url, "--judge-base-url")
    wanted = any(parse_reward(t.reward)[0] == "judge" for t in tasks)
    if not wanted:
        return None
    if not args.judge_model:
        raise ValueError("some tasks use the judge reward: pass --judge-model M (and "
                         "--judge-base-url U when the judge runs on another server)"
                         + _without_judge(tasks))
    model = replace(config.model, model=args.judge_model, temperature=0.0,
                    base_url=args.judge_base_url or config.model.base_url)
    return Judge(model)


def _without_judge(tasks: list) -> str:
    """How a judged paper suite can still be scored without a judge model, if it can."""
    from lis_tui.bench.paper.suites import SUITES  # noqa: PLC0415
    from lis_tui.bench.scoring.rewards import parse_reward  # noqa: PLC0415

    names = {t.extra.get("paper_suite") for t in tasks} & set(SUITES)
    others = [(n, o) for n in sorted(names) for o in SUITES[n].others
              if parse_reward(o.reward)[0] != "judge"]
    return "".join(f"; or, without one, --suite-scorer {o.name} ({n}: not the paper's metric)"
                   for n, o in others)


def server_unreachable(config: Any) -> str:
    """Why the model server cannot be reached, or "" (one quick try, so a run of thousands of
    episodes does not spend its retries, episode after episode, on a server that is down)."""
    from dataclasses import replace  # noqa: PLC0415

    from lis_tui.model.client import ModelClient, ModelError  # noqa: PLC0415

    with ModelClient(replace(config.model, max_retries=0, timeout=10.0)) as client:
        try:
            client.list_models()
        except ModelError as exc:
            return str(exc) if exc.status is None else ""  # an answer, even 404, is a live server
    return ""


def default_output(tasks: str) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return str(Path("lis-bench") / f"{Path(tasks.replace(':', '-')).stem}-{stamp}")


def report(args: argparse.Namespace, runner: Any, outcome: Any, settings: Any = None) -> int:
    from lis_tui.bench.report.pages import run_info, write_reports  # noqa: PLC0415

    model = runner.ctx.config.model
    preface = ""
    if settings is not None:
        from lis_tui.bench.paper.settings import markdown as settings_md  # noqa: PLC0415

        preface = settings_md([settings])
    done = {r.get("key") for r in outcome.results}
    not_run = [e.key for e in runner.episodes() if e.key not in done] if outcome.interrupted else []
    summary = write_reports(outcome.results, runner.options.output, title=f"lis-tui bench {args.tasks}",
                            run=run_info(model.model, model.base_url), preface=preface, not_run=not_run)
    if not args.quiet:
        from lis_tui.bench.report.pages import markdown  # noqa: PLC0415

        print(markdown(summary))
    if not getattr(args, "one_of_all", False):  # even -q says where the results went (paper:all: once)
        print(f"results in {runner.options.output} (summary.md, report.html, results.jsonl)",
              file=sys.stderr)
    if outcome.interrupted:
        print(f"lis-tui bench: interrupted; continue with --resume --output {runner.options.output}",
              file=sys.stderr)
        return 130
    return 0


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a bench the way Ctrl-C does
