"""Throughput of `lis-tui rollout` against `lis-tui bench` (the baseline) in the same run.

    .venv/bin/python benchmarks/rollout_bench.py [--groups 32] [-n 8] [--concurrency 32] [--rounds 3]
                                                 [--workers 1,auto]

Both run the same 3-step episodes (`execute_bash true`, create the answer, `submit`) against
the same scripted server in its own process, answering at once: bench runs groups * n episodes,
rollout runs groups tasks * n samples, with logprobs and token ids requested and returned (the
fake server makes them as vLLM does), messages and per-turn tokens in each line, and GRPO
groups. The median round of each is shown. Issue target: rollout >= bench (30 episodes/s).
With --workers, each count runs both (1: this process alone; auto: one per 2 cores).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_throughput import run, scripted_server, tasks  # noqa: E402

from isolation import SandboxSpec  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402
from lis_tui.rl.runner import RolloutOptions, RolloutRunner  # noqa: E402


def run_rollout(base_url: str, groups: int, n: int, concurrency: int, rootfs: str,
                out: Path, workers: int = 1) -> tuple[float, int, int, int]:
    config = load_config(env={}, paths=[], overrides={
        "model.base_url": base_url, "model.model": "m", "model.max_retries": 3,
        "model.retry_base_delay": 0.05, "model.timeout": 300.0})
    runner = RolloutRunner(tasks(groups), config, SandboxSpec(rootfs=rootfs),
                           RolloutOptions(output=out, n=n, concurrency=concurrency, progress=None,
                                          workers=workers))
    started = time.perf_counter()
    outcome = runner.run_rollouts()
    wall = time.perf_counter() - started
    steps = sum(e["steps"] for e in outcome.episodes)
    return wall, len(outcome.episodes), steps, len(outcome.groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("-n", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rootfs", default="host")
    parser.add_argument("--workers", default="1", help="worker processes, a list: 1,auto")
    args = parser.parse_args()
    from lis_tui.bench.workers.pool import default_workers

    counts = [default_workers(args.concurrency) if w == "auto" else int(w)
              for w in args.workers.split(",")]
    total = args.groups * args.n
    bench = {w: [] for w in range(len(counts))}
    roll = {w: [] for w in range(len(counts))}
    with tempfile.TemporaryDirectory(prefix="lis-rollout-bench-") as tmp, scripted_server() as (url, _):
        run(url, 16, 16, args.rootfs, Path(tmp) / "warm")
        for i in range(args.rounds):  # interleaved, so drift on a shared machine hits both alike
            for w, workers in enumerate(counts):
                wall, results = run(url, total, args.concurrency, args.rootfs, Path(tmp) / f"b{i}-{w}",
                                    workers=workers)
                bench[w].append((len(results) / wall, sum(r["steps"] for r in results) / wall, len(results)))
                wall, count, steps, groups = run_rollout(url, args.groups, args.n, args.concurrency,
                                                         args.rootfs, Path(tmp) / f"r{i}-{w}", workers)
                roll[w].append((count / wall, steps / wall, count, groups))
    median = lambda rows: sorted(rows)[len(rows) // 2]  # noqa: E731
    print(f"\nrollout vs bench ({args.rootfs} rootfs, 3-step episodes, {args.groups} groups x n={args.n}, "
          f"concurrency {args.concurrency}, {os.cpu_count()} CPU cores, median of {args.rounds} rounds)\n")
    print("| run | workers | episodes | episodes / s | steps / s |\n|---|---|---|---|---|")
    for w, workers in enumerate(counts):
        b, r = median(bench[w]), median(roll[w])
        print(f"| bench (baseline) | {workers} | {b[2]} | {b[0]:.1f} | {b[1]:.1f} |")
        print(f"| rollout ({r[3]} complete groups) | {workers} | {r[2]} | {r[0]:.1f} | {r[1]:.1f} |")
        print(f"| rollout / bench | {workers} | | {r[0] / b[0]:.2f} | {r[1] / b[1]:.2f} |")


if __name__ == "__main__":
    main()
