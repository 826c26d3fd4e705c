"""What a kept session's copies cost: its resume (copy in) and close (copy out, synced) by what it holds.

    .venv/bin/python benchmarks/session_layers.py [--runs 10]

Each row resumes a session that holds its files, runs `true`, and closes it, in the tmpfs (the
layers copied in and out: session_layers.py) and, alternating in the same run, with its layers on
disk (`disk_on="disk"`, no copies: the way every session ran before). The baseline row is a
throw-away sandbox's start, `true` and close. Medians (and 90th percentiles) in milliseconds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from isolation import Sandbox, SandboxSpec  # noqa: E402
from isolation.spec import Limits  # noqa: E402

MiB = 1 << 20
CASES = {"empty": "true",
         "1,000 files of 4 KiB": "mkdir -p /testbed/d && for i in $(seq 1000); do head -c 4096 /dev/zero > /testbed/d/$i; done",
         "one file of 64 MiB": "head -c 64M /dev/urandom > /testbed/big",
         "200 MiB in 20 files": "for i in $(seq 20); do head -c 10M /dev/urandom > /testbed/f$i; done"}


def round_trip(spec: SandboxSpec) -> tuple[float, float]:
    """(start + `true`, close) in milliseconds."""
    start = time.perf_counter()
    sb = Sandbox(spec).start()
    sb.exec("true")
    started = time.perf_counter()
    sb.close()
    return (started - start) * 1e3, (time.perf_counter() - started) * 1e3


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(values):8.1f} {ordered[int(0.9 * (len(ordered) - 1))]:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    os.environ["LIS_SESSIONS"] = tempfile.mkdtemp(prefix="lis-session-bench-")
    limits = {"tmpfs": Limits(disk=1 << 30), "disk": Limits(disk=1 << 30, disk_on="disk")}
    print(f"{'session holds':<22} {'layers':<7} {'start+true':>17} {'close':>17}   (ms: median p90)")
    base = [round_trip(SandboxSpec(limits=limits["tmpfs"])) for _ in range(runs)]
    print(f"{'(no session)':<22} {'tmpfs':<7} {summary([b[0] for b in base])} {summary([b[1] for b in base])}")
    for n, (name, fill) in enumerate(CASES.items()):
        times: dict[str, list[tuple[float, float]]] = {"tmpfs": [], "disk": []}
        for where in times:
            with Sandbox(SandboxSpec(session=f"{where}-{n}", limits=limits[where])) as sb:
                assert sb.exec(fill, timeout=300).exit_code == 0
        for _ in range(runs):  # alternating, so that both ways meet the same load
            for where in times:
                times[where].append(round_trip(SandboxSpec(session=f"{where}-{n}", limits=limits[where])))
        for where, found in times.items():
            print(f"{name:<22} {where:<7} {summary([t[0] for t in found])} {summary([t[1] for t in found])}")


if __name__ == "__main__":
    main()
