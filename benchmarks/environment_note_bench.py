"""What the system prompt's environment note costs next to starting a sandbox.

    .venv/bin/python benchmarks/environment_note_bench.py [--runs 30] [--rootfs host]

Baseline, measured in the same run: starting a sandbox and running `true` in it. The note is
read on the host side (no process), once per rootfs and then taken from a cache; "cold" clears
the cache before every read, as the first run of a `lis-tui run` process pays it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isolation import Sandbox, SandboxSpec  # noqa: E402
from isolation.rootfs.facts import _cached  # noqa: E402
from lis_tui.prompts.environment import environment_note  # noqa: E402


def timed(fn, runs: int, before=lambda: None) -> list[float]:
    times = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rootfs", default="host")
    args = parser.parse_args()

    def start() -> None:
        with Sandbox(SandboxSpec(rootfs=args.rootfs)) as sb:
            sb.exec("true")

    rows = [("sandbox start + `true` (baseline)", timed(start, args.runs)),
            ("environment note, cold", timed(lambda: environment_note(args.rootfs), args.runs, _cached.cache_clear)),
            ("environment note, cached", timed(lambda: environment_note(args.rootfs), args.runs))]
    base = statistics.median(rows[0][1])
    print(f"rootfs {args.rootfs}, {args.runs} runs each")
    print(f"{'what':<36} {'median ms':>10} {'p90 ms':>8} {'vs baseline':>12}")
    for name, times in rows:
        med, p90 = statistics.median(times), sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"{name:<36} {med * 1000:>10.3f} {p90 * 1000:>8.3f} {med / base:>11.2%}")


if __name__ == "__main__":
    main()
