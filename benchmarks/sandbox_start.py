"""Sandbox start cost, the cost of one command, idle memory and how many can live at once.

    .venv/bin/python benchmarks/sandbox_start.py [--runs 200] [--many 1000] [--against TREE] [--workspace DIR]

--against TREE (another checkout, e.g. `git worktree add /tmp/start-base main`): only the start,
in blocks of 10 of raw bwrap, TREE's code and this tree's, interleaved in one run, each tree's
sandboxes started by a process of its own (this script, importing that tree's `isolation`), with
the machine's CPU time per start in each block (/proc/stat: the helper's, the zygotes' and
bwrap's, which are not our process's; run it on an otherwise idle machine). --workspace DIR: each
timed start (the blocks, --against's too) lays DIR over /testbed (and, where the tree does, at its
own path), so a workspace's start is what is compared.

Baselines, measured in the same run: a raw `bwrap ... bash -c true` with the same host mounts,
and the sandbox a person would write by hand for the same protection (`bwrap --unshare-all
--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --die-with-parent --new-session -- bash -c
true`, issue 54: its ratio is the one held under 1.5x), both launched from the same loop, in
blocks of 10 alternating with the sandbox's (and with the
sandbox's writable layers on disk, LIS_DISK_TMPFS=0, the way before they got a tmpfs of their
own); and, for one command in a running sandbox, the way commands joined before the spawn helper
(nsenter + setpriv + a limits shell, against the same sandbox). Memory at many alive: the PSS of
their processes, and the host's MemAvailable drop per sandbox (the kernel's part: namespaces,
mounts, the layers' tmpfs), both ways.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if len(sys.argv) == 3 and sys.argv[1] == "--worker":  # a tree's starts, for --against: its isolation
    ROOT = Path(sys.argv[2]).resolve()
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from isolation import Sandbox, SandboxSpec, bwrap  # noqa: E402
from isolation.bwrap import Bind, Special  # noqa: E402
from isolation.spawn.helper import IDLE  # noqa: E402
from proctree import pss_kib  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_raw_bwrap(runs: int) -> list[float]:
    """Raw bwrap with lis-tui's own mount list (the host's trees, the secrets' masks)."""
    info = bwrap.find_bwrap()
    trees, masks = bwrap.host_root_mounts()  # the secrets' masks as bwrap itself would make them
    mounts = trees + [Special("remount-ro", dest) if source == dest else Bind(source, dest) for source, dest in masks]
    mounts += [Special("proc", "/proc"), Special("dev", "/dev"), Special("tmpfs", "/tmp")]
    argv = [info.path, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for mount in mounts:
        argv += mount.to_args()
    return time_argv(argv + ["--", "bash", "-c", "true"], runs)


def time_hand_bwrap(runs: int) -> list[float]:
    """The sandbox a person would write by hand with bwrap for the same protection (issue 54)."""
    return time_argv([bwrap.find_bwrap().path, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc",
                      "/proc", "--tmpfs", "/tmp", "--die-with-parent", "--new-session", "--", "bash", "-c", "true"],
                     runs)


def time_argv(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - start)
    return times


def layers_on_tmpfs(on: bool) -> None:
    os.environ["LIS_DISK_TMPFS"] = "1" if on else "0"


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))


def timed_spec() -> SandboxSpec:
    """The spec of each timed start: --workspace's (told to --against's workers by the environment)."""
    workspace = os.environ.get("LIS_BENCH_WORKSPACE")
    return SandboxSpec(workspace=workspace) if workspace else SandboxSpec()


def time_sandbox(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        with Sandbox(timed_spec()) as sb:
            assert sb.exec("true").exit_code == 0
        times.append(time.perf_counter() - start)
    return times


def cpu_seconds(pid: int) -> float:
    """A process's CPU time, its reaped children's included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_joined_exec(runs: int) -> dict[str, tuple[list[float], float]]:
    """Wall times and CPU per command of `true` in one running sandbox: ours, then the old chain."""
    with Sandbox() as sb:
        sb.exec("true")
        zygote = sb._zygote.pid
        walls, cpu0, z0 = [], self_cpu(), cpu_seconds(zygote)
        for _ in range(runs):
            start = time.perf_counter()
            sb.exec(["true"])
            walls.append(time.perf_counter() - start)
        ours = (walls, (self_cpu() - cpu0 + cpu_seconds(zygote) - z0) / runs)
        old = ["nsenter", "-t", str(sb.pid), "-U", "-m", "-p", "-n", "-i", "-u", "-C", "--preserve-credentials",
               "-r", "-W/testbed", "setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
               "bash", "-c", 'ulimit -n 4096; ulimit -v 4194304; ulimit -f 8388608; ulimit -u 1024; exec "$@"',
               "lis", "true"]
        walls, cpu0, c0 = [], self_cpu(), children_cpu()
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(old, check=True, env=sb.env)
            walls.append(time.perf_counter() - start)
        before = (walls, (self_cpu() - cpu0 + children_cpu() - c0) / runs)
    return {"before": before, "ours": ours}


PHASES = ("before bwrap: record, budget (as root: the plan and the zygote's request too)",
          "bwrap's Popen, the plan, the first zygote asked",
          "until bwrap's child is named, its maps and layers' tmpfs made, and let go",
          "bwrap builds the sandbox (this process sleeps)", "rest of start(): the budget's tracking, watchers",
          "exec('true'): the zygote confined, the command run", "close()")


def time_phases(runs: int) -> dict[str, list[float]]:
    """Seconds of each of PHASES per start, from timestamps taken around the start's steps (the
    benchmark wraps them; the code under test is unchanged)."""
    from isolation import spawn  # noqa: PLC0415
    from isolation.sandbox import launch as sandbox_module  # noqa: PLC0415 (where the launch looks them up)

    marks: dict[str, float] = {}

    def wrap(owner, name: str, key: str, at_exit: bool) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            if not at_exit:
                marks.setdefault(key, time.perf_counter())
            try:
                return original(*args, **kwargs)
            finally:
                if at_exit:
                    marks[key] = time.perf_counter()
        setattr(owner, name, timed)

    hooks = [(sandbox_module, "_popen_from_lasting_thread", "popen", False), (spawn.Zygote, "start", "asked", True),
             (spawn.Zygote, "launched", "launched", True), (spawn.Zygote, "built", "built", True)]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _, _ in hooks]
    for hook in hooks:
        wrap(*hook)
    found: dict[str, list[float]] = {phase: [] for phase in PHASES}
    try:
        for _ in range(runs):
            marks.clear()
            t0 = time.perf_counter()
            sb = Sandbox().start()
            started = time.perf_counter()
            sb.exec("true")
            execd = time.perf_counter()
            sb.close()
            closed = time.perf_counter()
            first, second = sorted((marks["popen"], marks["asked"]))  # as root, bwrap starts once planned
            points = [t0, first, second, marks["launched"], marks["built"], started, execd, closed]
            for phase, before, after in zip(PHASES, points, points[1:]):
                found[phase].append(after - before)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    return found


def sandbox_pids(sb: Sandbox) -> list[int]:
    pids = [sb._proc.pid, sb.pid] + ([sb._zygote.pid] if sb._zygote.pid else [])  # the zygote, while it lives
    with open(f"/proc/{sb.pid}/task/{sb.pid}/children") as f:
        pids += [int(p) for p in f.read().split()]
    return pids


def idle_memory(samples: int = 20) -> float:
    sandboxes = [Sandbox().start() for _ in range(samples)]
    try:
        time.sleep(0.2)
        return sum(pss_kib(p) for sb in sandboxes for p in sandbox_pids(sb)) / samples
    finally:
        for sb in sandboxes:
            sb.close()


def many_alive(count: int) -> tuple[int, float, float, float, float]:
    """(how many answered, seconds to create them, seconds for all to answer, PSS KiB per sandbox,
    MemAvailable drop KiB per sandbox)."""
    sandboxes = []
    available = mem_available_kib()
    start = time.perf_counter()
    try:
        for _ in range(count):
            sandboxes.append(Sandbox().start())
        created = time.perf_counter() - start
        answered = sum(sb.exec("true").exit_code == 0 for sb in sandboxes)
        execd = time.perf_counter() - start - created
        time.sleep(IDLE + 1)  # idle sandboxes: their zygotes have exited
        pss = sum(pss_kib(p) for sb in sandboxes for p in sandbox_pids(sb) if os.path.exists(f"/proc/{p}")) / count
        return answered, created, execd, pss, (available - mem_available_kib()) / count
    finally:
        for sb in sandboxes:
            sb.close()


def worker() -> None:
    """--worker TREE: start TREE's sandboxes, a block at a time: read a count, answer their times."""
    Sandbox(timed_spec()).start().close()  # warm up: bwrap probe and sweep
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(time_sandbox(int(line))), flush=True)


def against(tree: Path, runs: int) -> None:
    """Raw bwrap, `tree`'s start and this tree's, in interleaved blocks of 10 (same run)."""
    def spawn(path: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n"
        return proc

    def block(proc: subprocess.Popen, count: int) -> list[float]:
        proc.stdin.write(f"{count}\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    def busy() -> float:  # the machine's CPU seconds so far: the helper's, zygotes' and bwrap's all count
        ticks = [int(x) for x in open("/proc/stat").readline().split()[1:8]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")

    def timed(run, times: list[float], cpu: list[float], count: int) -> None:
        start = busy()
        times += run(count)
        cpu.append((busy() - start) / count)

    base, this = spawn(tree), spawn(Path(__file__).resolve().parent.parent)
    raw, hand, before, ours = [], [], [], []
    cpu = {id(raw): [], id(hand): [], id(before): [], id(ours): []}  # per block: CPU seconds per start
    try:
        for done in range(0, runs, 10):  # alternating blocks: a shared machine's load drifts
            count = min(10, runs - done)
            timed(time_raw_bwrap, raw, cpu[id(raw)], count)
            timed(time_hand_bwrap, hand, cpu[id(hand)], count)
            for proc, times in ((base, before), (this, ours))[::1 if done % 20 else -1]:  # each first by turns
                timed(functools.partial(block, proc), times, cpu[id(times)], count)
    finally:
        for proc in (base, this):
            proc.stdin.close()
            proc.wait()
    p50 = lambda v: percentile(v, .5) * 1000  # noqa: E731
    p99 = lambda v: percentile(v, .99) * 1000  # noqa: E731
    over = os.environ.get("LIS_BENCH_WORKSPACE")
    print(f"\nsandbox start on {os.cpu_count()} cores, {runs} runs each, uid {os.getuid()}, load "
          f"{os.getloadavg()[0]:.1f}" + (f", workspace {over}" if over else "") + "\n")
    print("| Sandbox() + exec('true') + close() | p50 ms | p99 ms | ratio p50 vs raw, our mounts | ratio p50 vs "
          "by hand | target | the machine's CPU ms per start (median of blocks) |\n|---|---|---|---|---|---|---|")
    used = lambda v: percentile(cpu[id(v)], .5) * 1000  # noqa: E731
    print(f"| raw `bwrap ... bash -c true`, our mounts (baseline) | {p50(raw):.1f} | {p99(raw):.1f} | 1.00 | "
          f"{p50(raw) / p50(hand):.2f} | | {used(raw):.1f} |")
    print(f"| `bwrap --unshare-all --ro-bind / / ... bash -c true` by hand (baseline) | {p50(hand):.1f} | "
          f"{p99(hand):.1f} | {p50(hand) / p50(raw):.2f} | 1.00 | | {used(hand):.1f} |")
    for label, values in ((f"{tree} (before)", before), ("this tree", ours)):
        print(f"| {label} | {p50(values):.1f} | {p99(values):.1f} | {p50(values) / p50(raw):.2f} | "
              f"{p50(values) / p50(hand):.2f} | by hand < 1.5 | {used(values):.1f} |")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        return worker()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--many", type=int, default=1000)
    parser.add_argument("--against", type=Path, help="another checkout: only the start, raw / it / this")
    parser.add_argument("--workspace", type=Path, help="a project each timed start lays over /testbed")
    args = parser.parse_args()
    if args.workspace is not None:
        os.environ["LIS_BENCH_WORKSPACE"] = str(args.workspace.resolve())
    if args.against is not None:
        return against(args.against, args.runs)
    Sandbox().start().close()  # warm up: bwrap probe and sweep
    raw, hand, ours, on_disk = [], [], [], []
    for done in range(0, args.runs, 10):  # alternating blocks: a shared machine's load drifts
        raw += time_raw_bwrap(min(10, args.runs - done))
        hand += time_hand_bwrap(min(10, args.runs - done))
        ours += time_sandbox(min(10, args.runs - done))
        layers_on_tmpfs(False)
        on_disk += time_sandbox(min(10, args.runs - done))
        layers_on_tmpfs(True)
    phases = time_phases(args.runs)
    joined = time_joined_exec(args.runs)
    pss = idle_memory()
    layers_on_tmpfs(False)
    many_on_disk = many_alive(args.many)
    layers_on_tmpfs(True)
    answered, created, execd, pss_many, kernel_many = many_alive(args.many)
    ms = lambda v: f"{v * 1000:.1f}"  # noqa: E731
    print(f"\nsandbox start on {os.cpu_count()} cores, {args.runs} runs, uid {os.getuid()}\n")
    print("| measure | p50 ms | p99 ms | ratio p50 vs raw, our mounts | ratio p50 vs by hand | target |")
    print("|---|---|---|---|---|---|")
    vs = lambda v: f"{percentile(v, .5) / percentile(raw, .5):.2f} | {percentile(v, .5) / percentile(hand, .5):.2f}"  # noqa: E731
    print(f"| raw `bwrap ... bash -c true`, our mounts (baseline) | {ms(percentile(raw, .5))} | "
          f"{ms(percentile(raw, .99))} | {vs(raw)} | |")
    print(f"| `bwrap --unshare-all --ro-bind / / ... bash -c true` by hand (baseline) | {ms(percentile(hand, .5))} | "
          f"{ms(percentile(hand, .99))} | {vs(hand)} | |")
    print(f"| Sandbox() + exec('true') + close() | {ms(percentile(ours, .5))} | {ms(percentile(ours, .99))} | "
          f"{vs(ours)} | by hand < 1.5 |")
    print(f"| the same, layers on disk (LIS_DISK_TMPFS=0) | {ms(percentile(on_disk, .5))} | "
          f"{ms(percentile(on_disk, .99))} | {vs(on_disk)} | |")
    print(f"\n| phase of Sandbox() + exec('true') + close() ({args.runs} runs, timed apart) | p50 ms |\n|---|---|")
    for phase, values in phases.items():
        print(f"| {phase} | {ms(percentile(values, .5))} |")
    print("\n| one `true` in a running sandbox | p50 ms | p99 ms | CPU ms per command | ratio CPU vs before | target |")
    print("|---|---|---|---|---|---|")
    base_cpu = joined["before"][1]
    for label, key, target in (("nsenter + setpriv + sh (before, baseline)", "before", ""),
                               ("spawn helper's zygote (now)", "ours", "CPU <= 2 ms")):
        walls, cpu = joined[key]
        print(f"| {label} | {ms(percentile(walls, .5))} | {ms(percentile(walls, .99))} | {cpu * 1000:.2f} | "
              f"{cpu / base_cpu:.2f} | {target} |")
    print(f"\n| measure | value | target |\n|---|---|---|")
    print(f"| idle memory of one sandbox (PSS, all its processes; 20 alive) | {pss / 1024:.2f} MiB | |")
    print(f"| memory per sandbox with {args.many} alive (PSS, all their processes) | {pss_many / 1024:.2f} MiB "
          "| <= 1 MiB |")
    print(f"| host memory per sandbox with {args.many} alive (MemAvailable drop; layers on disk: "
          f"{many_on_disk[4] / 1024:.2f} MiB) | {kernel_many / 1024:.2f} MiB | |")
    print(f"| sandboxes alive at once answering exec('true') | {answered}/{args.many} "
          f"(created in {created:.1f} s, all answered in {execd:.1f} s) | {args.many} |")
    print(f"| max RSS of this Python process | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB | |")


if __name__ == "__main__":
    main()
