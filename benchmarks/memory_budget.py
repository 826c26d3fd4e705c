"""Sandboxes that together write more than the memory budget: MemAvailable over time, and each one's end.

    .venv/bin/python benchmarks/memory_budget.py [--sandboxes 6] [--write 4G] [--budget auto] [--floor auto]

Starts N default sandboxes (their disk: the default, or what the budget leaves) and has each
write SIZE into its /testbed, a megabyte-sized block at a time with dd, all at once, while this
process samples MemAvailable every 50 ms. It prints MemAvailable over time, its lowest value
against the floor, and for each sandbox how much it wrote, whether its writer met a clean refusal
("No space left on device" and the budget's note) and whether the sandbox still runs a command
afterwards. Holds: MemAvailable never under the floor; every sandbox refused and running.
--budget and --floor set LIS_TMPFS_BUDGET and LIS_TMPFS_FLOOR (on a shared machine, keep
N x SIZE within what you may take); --baseline runs the same writers with no budget first, each
under a disk limit of SIZE (the code before: nothing bounded the sum).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolation import Limits, Sandbox, SandboxSpec
from isolation.limits import budget  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20


def available() -> int:
    return budget.meminfo()["MemAvailable"]


def run(n: int, size: int, label: str, limits: Limits | None = None) -> bool:
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    floor = budget.floor_now(budget.meminfo())

    def sample() -> None:
        start = time.monotonic()
        while not done.is_set():
            samples.append((time.monotonic() - start, available()))
            time.sleep(0.05)

    before = available()
    sandboxes = [Sandbox(SandboxSpec(limits=limits) if limits else SandboxSpec()).start() for _ in range(n)]
    results: dict[int, object] = {}
    blocks = size // MiB
    took: dict[int, float] = {}

    def write(i: int, sb: Sandbox) -> None:
        start = time.monotonic()
        results[i] = sb.exec(f"dd if=/dev/zero of=/testbed/fill bs=1M count={blocks} 2>&1 | tail -1", timeout=600)
        took[i] = time.monotonic() - start

    writers = [threading.Thread(target=write, args=(i, sb)) for i, sb in enumerate(sandboxes)]
    sampler = threading.Thread(target=sample)
    sampler.start()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    done.set()
    sampler.join()
    print(f"\n## {label}: {n} sandboxes writing {size / GiB:.2f} GiB each; MemAvailable before {before / GiB:.2f} GiB, "
          f"floor {floor / GiB:.2f} GiB, budget {budget.budget_now(budget.meminfo(), 0) / GiB:.2f} GiB (now)\n")
    print("| t (s) | MemAvailable (GiB) |\n| ---: | ---: |")
    step = max(1, len(samples) // 20)
    for t, avail in samples[::step]:
        print(f"| {t:.2f} | {avail / GiB:.2f} |")
    lowest = min(avail for _, avail in samples)
    print(f"\nlowest MemAvailable: {lowest / GiB:.2f} GiB (floor {floor / GiB:.2f} GiB): "
          f"{'above' if lowest >= floor else 'UNDER'} the floor\n")
    print("| sandbox | disk | wrote (MiB) | writer's s | refused cleanly | runs after |\n"
          "| ---: | ---: | ---: | ---: | :---: | :---: |")
    ok = lowest >= floor
    for i, sb in enumerate(sandboxes):
        result = results[i]
        wrote = sum(budget.cost(fs) for fs in budget.usage(sb).values()) // MiB
        refused = "No space left on device" in result.stdout + result.stderr and \
            ("memory budget" in result.stderr or "disk is full" in result.stderr)
        runs = sb.exec("echo alive").stdout == "alive\n"
        ok = ok and refused and runs
        print(f"| {i} | {sb.spec.limits.disk // MiB} MiB | {wrote} | {took[i]:.1f} | {'yes' if refused else 'NO'} | "
              f"{'yes' if runs else 'NO'} |")
    for sb in sandboxes:
        sb.close()
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=6)
    parser.add_argument("--write", default="4G", help="what each sandbox writes (default 4G)")
    parser.add_argument("--budget", default="auto", help="LIS_TMPFS_BUDGET (default: auto)")
    parser.add_argument("--floor", default="auto", help="LIS_TMPFS_FLOOR (default: auto)")
    parser.add_argument("--baseline", action="store_true", help="first, the same writers with no budget")
    args = parser.parse_args()
    os.environ["LIS_TMPFS_BUDGET"], os.environ["LIS_TMPFS_FLOOR"] = args.budget, args.floor
    os.environ.setdefault("LIS_TMPFS_LEDGER", os.path.join(tempfile.mkdtemp(prefix="lis-budget-bench-"), "ledger"))
    size = budget.parse_size(args.write, "--write")
    if args.baseline:  # a budget no sum reaches, as if there were none
        os.environ["LIS_TMPFS_BUDGET"] = str(budget.meminfo()["MemTotal"])
        os.environ["LIS_TMPFS_FLOOR"] = str(64 * MiB)
        run(args.sandboxes, size, "no budget (before)", Limits(disk=size + 64 * MiB))
        os.environ["LIS_TMPFS_BUDGET"], os.environ["LIS_TMPFS_FLOOR"] = args.budget, args.floor
    held = run(args.sandboxes, size, "the budget")
    print(f"\nholds: {'yes' if held else 'NO'} (MemAvailable over the floor, every sandbox refused and running)")
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()
