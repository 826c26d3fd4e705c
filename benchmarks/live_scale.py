"""Many live sandboxes in one process, as the calling user: start rate, memory, processes, and where a limit stops it.

    .venv/bin/python benchmarks/live_scale.py [--count 10000] [--flat 0,1000,5000] [--cycles 20]
                                              [--without-watchers]

Starts --count sandboxes (host rootfs, network off) in blocks of 1,000, timing each block; on the
way, at each --flat count, times one start + exec('true') + close with that many live (and with
none again at the end, once all are closed), as a ratio to the 0-live cost, and a raw
`bwrap ... bash -c true` right after each: the kernel's share of the growth (each bwrap's
pivot_root walks every thread on the machine), and ours less raw as the median of those pairs;
before that, the CPU the watchers (the memory budget's pass, the memory cap's) take over WATCHED
seconds with that many live, idle. Then runs `echo` in every 10th, prints memory (PSS of the
sandboxes' processes, this process's growth, the machine's MemAvailable) and processes per
sandbox, and the time to close them all. Where a limit of this machine or user stops it
(lis-tui refuses the start, naming the limit), it says which and how far it got.
--without-watchers leaves the memory budget's pass and the memory cap's out of this process: run
with and without it, back to back, to see their share of the growth (not a way to run lis-tui).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from isolation import Sandbox, records, spawn
from isolation.limits import budget, capacity, memcap  # noqa: E402
from isolation.spawn.helper import IDLE  # noqa: E402
from isolation.spec import SandboxError  # noqa: E402
from proctree import pss_kib, sandbox_processes  # noqa: E402
from sandbox_start import time_raw_bwrap  # noqa: E402

WATCHED = 5.0  # seconds the watchers' CPU is measured over, the sandboxes idle, at each --flat count


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu() -> float:
    """CPU seconds of this process, its reaped children, and the spawn helper with its reaped
    children (the zygotes, and bwrap where the helper starts it)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    helper = 0.0
    if spawn._helper is not None and spawn._helper.alive():
        try:
            with open(f"/proc/{spawn._helper.pid}/stat") as f:
                helper = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:15]) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + helper


def watchers_cpu() -> float:
    """CPU seconds so far of this process's watcher threads: the budget's pass and the memory cap's."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name in ("lis-tmpfs-budget", "lis-memory-cap") and thread.native_id:
            try:
                with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                    total += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
            except OSError:
                pass
    return total / os.sysconf("SC_CLK_TCK")


def fill(live: list[Sandbox], target: int) -> str | None:
    """Start sandboxes until `target` live; the refusal's message if a limit stops it first."""
    while len(live) < target:
        try:
            live.append(Sandbox().start())
        except SandboxError as exc:
            return str(exc)
    return None


def cycle_cost(cycles: int) -> tuple[float, float, float, float]:
    """(p50 wall, mean CPU (see cpu()) in seconds of one start + exec('true') + close; p50 wall
    of a raw `bwrap ... bash -c true`; p50 of ours less raw). Each start is paired with a raw
    bwrap right after it, so each pair's difference leaves out the kernel's share at that moment
    (two blocks timed one after the other spread by more than the difference)."""
    walls, raws, spent = [], [], 0.0
    for _ in range(cycles):
        cpu0, start = cpu(), time.perf_counter()
        with Sandbox() as sb:
            sb.exec("true")
        walls.append(time.perf_counter() - start)
        spent += cpu() - cpu0
        raws += time_raw_bwrap(1)
    less = sorted(wall - raw for wall, raw in zip(walls, raws))
    return sorted(walls)[cycles // 2], spent / cycles, sorted(raws)[cycles // 2], less[cycles // 2]


def scale(count: int, levels: list[int], cycles: int) -> None:
    live: list[Sandbox] = []
    Sandbox().start().close()  # warm up: bwrap probe, sweep, the spawn helper
    rss0, available0 = rss_kib(), capacity._available_mib()
    rates, flat, stopped = [], [], None
    marks = sorted({*levels, *range(1000, count + 1, 1000), count})
    for mark in marks:
        if stopped is not None:
            break
        start, cpu0, before = time.perf_counter(), cpu(), len(live)
        stopped = fill(live, mark)
        done = len(live) - before
        if done:
            rates.append((before, len(live), (time.perf_counter() - start) / done, (cpu() - cpu0) / done))
        if mark in levels and stopped is None:
            time.sleep(IDLE + 1)  # idle: their zygotes have exited
            before = watchers_cpu()
            time.sleep(WATCHED)
            flat.append((f"{mark:,}", *cycle_cost(cycles), (watchers_cpu() - before) / WATCHED))
        print(f"  {len(live)} live", flush=True)
    start = time.perf_counter()
    answered = sum(sb.exec("echo ok").stdout == "ok\n" for sb in live[::10])
    exec_s = time.perf_counter() - start
    time.sleep(IDLE + 1)
    procs = sandbox_processes(os.getpid())
    pss = sum(pss_kib(p) for p in procs)
    fds = len(os.listdir("/proc/self/fd"))
    grown = rss_kib() - rss0
    available = capacity._available_mib()
    n = len(live)
    start = time.perf_counter()
    for sb in live:
        sb.close()
    records.wait_released()
    close_s = time.perf_counter() - start
    if levels:
        before = watchers_cpu()
        time.sleep(WATCHED)
        flat.append(("0 (again, all closed)", *cycle_cost(cycles), (watchers_cpu() - before) / WATCHED))

    print(f"\nlive sandboxes in one process: uid {os.getuid()}, {os.cpu_count()} cores, "
          f"RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}, "
          f"pid_max {Path('/proc/sys/kernel/pid_max').read_text().strip()}, load {os.getloadavg()[0]:.1f}\n")
    print("| live before | live after | ms per start (wall) | CPU ms per start (this process) | starts/s |")
    print("|---|---|---|---|---|")
    for before, after, wall, cpu_each in rates:
        print(f"| {before:,} | {after:,} | {wall * 1000:.1f} | {cpu_each * 1000:.1f} | {1 / wall:.0f} |")
    if flat:
        base_wall = (flat[0][1] + flat[-1][1]) / 2
        base_cpu = (flat[0][2] + flat[-1][2]) / 2
        base_raw = (flat[0][3] + flat[-1][3]) / 2
        print("\n| live | start + exec + close p50 ms | ratio vs 0 live | CPU ms | CPU ratio | target "
              "| raw bwrap p50 ms | raw ratio vs 0 live | ours less raw, p50 of pairs, ms | watchers' CPU, idle, % of a core |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for level, wall, cpu_each, raw, less, watching in flat:
            target = "" if level.startswith("0") else "<= 1.2"
            print(f"| {level} | {wall * 1000:.1f} | {wall / base_wall:.2f} | {cpu_each * 1000:.1f} | "
                  f"{cpu_each / base_cpu:.2f} | {target} | {raw * 1000:.1f} | {raw / base_raw:.2f} | "
                  f"{less * 1000:.1f} | {watching * 100:.1f} |")
    print("\n| measure | value |\n|---|---|")
    print(f"| sandboxes live | {n:,} of {count:,} asked |")
    print(f"| stopped by | {stopped or 'nothing: all started'} |")
    print(f"| exec('echo ok') in every 10th | {answered}/{len(live[::10])} answered in {exec_s:.1f} s |")
    print(f"| processes per sandbox (idle) | {len(procs) / max(n, 1):.2f} |")
    print(f"| PSS per sandbox, its processes (idle) | {pss / max(n, 1) / 1024:.2f} MiB |")
    print(f"| this process's RSS growth per sandbox | {grown / max(n, 1):.1f} KiB |")
    if available0 is not None and available is not None:
        print(f"| the machine's MemAvailable drop per sandbox (the kernel's part too) | "
              f"{(available0 - available) / max(n, 1):.2f} MiB |")
    print(f"| descriptors of this process, all live | {fds:,} |")
    print(f"| close all | {close_s:.1f} s ({close_s / max(n, 1) * 1000:.2f} ms each) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--flat", default="0,1000,5000", help="live counts to time a start at ('' for none)")
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--without-watchers", action="store_true",
                        help="no budget pass, no memory-cap watcher: their share of the growth, measured apart")
    args = parser.parse_args()
    if args.without_watchers:
        memcap.watch = lambda sandbox: None
        budget._Tracker._loop = lambda self: None
    first = capacity.bounds()[0]
    print(f"capacity here: {first.limit} binds first at about {first.room:,}", flush=True)
    levels = [int(n) for n in args.flat.split(",") if n.strip()]
    scale(args.count, [n for n in levels if n <= args.count], args.cycles)


if __name__ == "__main__":
    main()
