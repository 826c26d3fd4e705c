"""Where one process's CPU goes per episode: cProfile of `lis-tui bench` episodes run in this
process (as one worker runs them) against the instant scripted server (a process of its own).

    .venv/bin/python benchmarks/episode_profile.py [--episodes 128] [--concurrency 16] [--top 25]

Prints this process's CPU time per episode (user + system, without the profiler: the server and
the sandboxes' own processes are not in it), then, from a profiled round, the share of each part
(sandbox start and exec, the openai client and HTTP, JSON, trajectory writes, scoring, the agent,
the shell tool) and the top functions by their own time. Every thread's episodes are profiled
(a profiler per thread of the pool), merged.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

from bench_throughput import run, scripted_server  # noqa: E402
from lis_tui.bench import runner as bench_runner  # noqa: E402

PARTS = (  # (part, path pieces of the functions whose own time counts for it), first match wins
    ("sandbox start, exec, close", ("isolation/",)),
    ("shell and editor tools", ("tools/",)),
    ("openai client, HTTP", ("openai/", "httpx/", "httpcore/", "h11/", "anyio/", "ssl.py", "socket.py",
                             "pydantic", "selectors.py")),
    ("JSON", ("json/",)),
    ("trajectory writes", ("trajectory.py",)),
    ("scoring", ("bench/scoring/", "math_verify", "sympy")),
    ("agent loop, events, prompts", ("lis_tui/",)),
    ("threads, locks, queues", ("threading.py", "queue.py", "concurrent/")),
)


def profiled_round(url: str, episodes: int, concurrency: int, out: Path) -> pstats.Stats:
    """Run one round with a profiler in each of the pool's threads; their stats merged."""
    profiles: list[cProfile.Profile] = []
    local = threading.local()
    original = bench_runner.BenchRunner._one

    def one(self, episode, progress):
        if getattr(local, "profile", None) is None:
            local.profile = cProfile.Profile(time.thread_time)  # CPU, not waiting
            profiles.append(local.profile)
        local.profile.enable()
        try:
            return original(self, episode, progress)
        finally:
            local.profile.disable()

    bench_runner.BenchRunner._one = one
    try:
        run(url, episodes, concurrency, "host", out)
    finally:
        bench_runner.BenchRunner._one = original
    stats = pstats.Stats(profiles[0])
    for profile in profiles[1:]:
        stats.add(profile)
    return stats


def part_of(filename: str) -> str:
    for part, pieces in PARTS:
        if any(piece in filename for piece in pieces):
            return part
    return "other (builtins, stdlib)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lis-profile-") as tmp, scripted_server() as (url, _):
        run(url, 16, 16, "host", Path(tmp) / "warm")
        cpu = os.times()
        wall, results = run(url, args.episodes, args.concurrency, "host", Path(tmp) / "plain")
        after = os.times()
        per_episode = (after.user + after.system - cpu.user - cpu.system) / len(results) * 1000
        stats = profiled_round(url, args.episodes, args.concurrency, Path(tmp) / "profiled")
    parts: dict[str, float] = {}
    total = 0.0
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        parts[part_of(filename)] = parts.get(part_of(filename), 0.0) + tottime
        total += tottime
    print(f"\nCPU of this process per 3-step episode ({args.episodes} episodes, concurrency "
          f"{args.concurrency}, {os.cpu_count()} cores, no profiler): {per_episode:.1f} ms "
          f"({len(results) / wall:.1f} episodes/s)\n")
    print("| part (profiled round, own time) | ms / episode | share |\n|---|---|---|")
    for part, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {part} | {seconds / args.episodes * 1000:.2f} | {100 * seconds / total:.0f}% |")
    print(f"\ntop {args.top} of lis-tui's functions by cumulative CPU (profiled round; "
          f"divide by {args.episodes} for per episode):\n")
    stats.sort_stats("cumulative").print_stats(r"lis_tui/|isolation/|tools/", args.top)
    print(f"\ntop {args.top} functions by own CPU (profiled round):\n")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
