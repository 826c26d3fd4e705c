"""`bench --ray` against local threads: episodes/s and Ray's cost per episode, in one run.

    .venv/bin/python benchmarks/ray_bench.py [--episodes 64] [--rounds 3] [--slots 16]
                                             [--node-cpus 2] [--sequential 20]

The episodes are bench_throughput.py's: 3 steps (`execute_bash true`, create the answer,
submit) against a scripted server that answers at once, in its own process; each episode is a
real sandbox, shell, agent and openai client. Three ways, each round in turn:
- local: BenchRunner's threads in this process (--slots at once);
- ray 1 node: a Ray cluster of one node (`ray.cluster_utils.Cluster`, --node-cpus CPUs) whose
  one worker holds --slots episodes;
- ray 1 node, N workers: the same node, N worker processes (--ray-worker-cpus: N = 2 on a node of
  under 12 CPUs, else one per 4 CPUs, the default);
- ray 2 nodes: two nodes of --node-cpus CPUs each, --slots / 2 episodes per worker.
Rates are steady-state: episodes finished after the first one, over the time between the first
result and the last (the workers' start, ~1-3 s per run for doctor and imports, is shown apart).
Ray overhead per episode: --sequential episodes one at a time on Ray; for each, the time from
the driver handing it to a worker to its result being back, minus the episode's own wall time
(its record's `wall_time`, measured in the worker): the trip, the task's and the folder's
packing, and the worker's bookkeeping. The same episodes' ms/episode alone, local and on Ray,
are shown too (they move with the machine's load more than the overhead does).

The scaling model: the local runner runs every episode's Python (agent loop, JSON, the openai
client, the shell relay) in one process, so it is bound by one core's GIL however many cores the
machine has; a Ray worker is a process of its own (one per --ray-worker-cpus of a node's CPUs),
so its episodes' Python runs in parallel with the others'. The benchmark measures the bound: the
CPU the local runner's own process spends per episode (user + system, steady state; Python holds
the GIL for most of it) puts its ceiling near 1000 / that many episodes/s on any machine, and
the whole machine's CPU per episode says how many cores it takes to reach it. On a 2-core
machine that also runs the scripted server and Ray's own daemons there is no spare core for Ray
to win; on a many-core machine each worker process adds up to one such ceiling.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

from bench_throughput import scripted_server, tasks  # noqa: E402
from isolation import SandboxSpec  # noqa: E402
from lis_tui.bench.runner import BenchOptions, BenchRunner  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402
from lis_tui.ray import RayOptions  # noqa: E402
from lis_tui.ray import cluster as ray_cluster  # noqa: E402

TRIPS: dict = {}
"""Instrumentation: when each episode was handed to a worker, and its round trip (seconds)."""


def _instrument() -> None:
    dispatch, finished = ray_cluster.ClusterRun._dispatch, ray_cluster.ClusterRun._finished

    def timed_dispatch(self):
        dispatch(self)
        for episode, _ in self.inflight.values():
            TRIPS.setdefault(episode.key, [time.perf_counter(), None])

    def timed_finished(self, ref):
        episode, _ = self.inflight[ref]
        TRIPS[episode.key][1] = time.perf_counter() - TRIPS[episode.key][0]
        finished(self, ref)
    ray_cluster.ClusterRun._dispatch, ray_cluster.ClusterRun._finished = timed_dispatch, timed_finished


def cpu_ms() -> tuple[float, float]:
    """(this process's, the whole machine's) CPU time so far, in ms."""
    tick = os.sysconf("SC_CLK_TCK")
    mine = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    busy = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return 1000 * (int(mine[11]) + int(mine[12])) / tick, 1000 * (sum(busy) - busy[3] - busy[4]) / tick


def timed_run(base_url: str, count: int, out: Path, slots: int, ray: RayOptions | None,
              modes: tuple[str, ...] = ("sandbox",)) -> dict:
    """Wall time, steady rate, worker start and CPU per steady episode of one bench run."""
    config = load_config(env={}, paths=[], overrides={
        "model.base_url": base_url, "model.model": "m", "model.max_retries": 3,
        "model.retry_base_delay": 0.05, "model.timeout": 300.0})
    runner = BenchRunner(tasks(count), config, SandboxSpec(rootfs="host"),
                         BenchOptions(output=out, concurrency=slots, progress=None, ray=ray, modes=modes))
    ends: list[float] = []
    cpu: list[tuple[float, float]] = []  # at the first result and at the last
    keep = runner.keep

    def timed_keep(*args, **kwargs):  # when each result reaches the driver
        keep(*args, **kwargs)
        ends.append(time.perf_counter())
        if len(ends) in (1, count):
            cpu.append(cpu_ms())
    runner.keep = timed_keep
    started = time.perf_counter()
    outcome = runner.run()
    wall = time.perf_counter() - started
    assert len(outcome.results) == count and all(r["correct"] for r in outcome.results), \
        [r["message"] for r in outcome.results if not r["correct"]][:3]
    steady = (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 else 0.0
    first_wall = min(r["wall_time"] for r in outcome.results)
    trips = [TRIPS[r["key"]][1] - r["wall_time"] for r in outcome.results if r["key"] in TRIPS]
    TRIPS.clear()
    steady_episodes = max(len(ends) - 1, 1)
    return {"wall": wall, "rate": steady, "start": ends[0] - started - first_wall,
            "overhead": statistics.median(trips) if trips else None,
            "driver_cpu": (cpu[-1][0] - cpu[0][0]) / steady_episodes,
            "machine_cpu": (cpu[-1][1] - cpu[0][1]) / steady_episodes}


# Answers every request at once with text: `llm` mode episodes are all Python (the agent, the
# openai client, JSON) and no sandbox, so the local runner's GIL is their limit.
TEXT_SERVER = """
import sys
sys.path[:0] = sys.argv[2:]
from fakes.openai_server import FakeOpenAI, reply
with FakeOpenAI(default=lambda request: reply("The answer is 42.")) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


class Clusters:
    """A one-node and a two-node Ray cluster on this machine, started once."""

    def __init__(self, node_cpus: int) -> None:
        from ray.cluster_utils import Cluster

        self.base = tempfile.mkdtemp(prefix="lisrb", dir="/tmp")  # Ray's socket paths: short
        os.environ["RAY_TMPDIR"] = self.base
        node = {"num_cpus": node_cpus, "object_store_memory": 200 << 20}
        self.one = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        self.two = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        self.two.add_node(**node)

    def close(self) -> None:
        self.one.shutdown()
        self.two.shutdown()
        shutil.rmtree(self.base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=16, help="episodes at once, every way")
    parser.add_argument("--node-cpus", type=int, default=2, help="Ray CPUs per node")
    parser.add_argument("--sequential", type=int, default=20, help="episodes for the overhead")
    parser.add_argument("--gil-episodes", type=int, default=800,
                        help="`llm` mode episodes per round of the GIL-bound comparison (0: skip it)")
    args = parser.parse_args()
    _instrument()
    clusters = Clusters(args.node_cpus)
    many = max(2, args.node_cpus // 4)  # the default --ray-worker-cpus (4) on a big node; 2 on a small
    ways = {"local threads": None,
            "ray 1 node": RayOptions(clusters.one.address, cpus=args.node_cpus / args.slots,
                                     worker_cpus=args.node_cpus),
            f"ray 1 node, {many} workers": RayOptions(clusters.one.address, cpus=args.node_cpus / args.slots,
                                                      worker_cpus=args.node_cpus / many),
            "ray 2 nodes": RayOptions(clusters.two.address, cpus=2 * args.node_cpus / args.slots,
                                      worker_cpus=args.node_cpus)}
    runs: dict[str, list[dict]] = {name: [] for name in ways}
    alone: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp, scripted_server() as (url, _):
        n = 0
        for _ in range(args.rounds):
            for name, ray in ways.items():
                n += 1
                runs[name].append(timed_run(url, args.episodes, Path(tmp) / f"r{n}", args.slots, ray))
        for name in ("local threads", "ray 1 node"):
            ray = ways[name] and RayOptions(ways[name].address, cpus=ways[name].cpus,
                                            worker_cpus=args.node_cpus, concurrency=1)
            alone[name] = timed_run(url, args.sequential, Path(tmp) / f"s{name[:3]}", 1, ray)
    gil: dict[str, list[dict]] = {name: [] for name in list(ways)[:3]}
    with tempfile.TemporaryDirectory() as tmp, scripted_server(script=TEXT_SERVER) as (url, _):
        for n in range(args.rounds if args.gil_episodes else 0):
            for name in gil:
                ray = ways[name] and RayOptions(ways[name].address, cpus=ways[name].cpus / 2,
                                                worker_cpus=ways[name].worker_cpus)
                gil[name].append(timed_run(url, args.gil_episodes, Path(tmp) / f"g{n}{name}",
                                           2 * args.slots, ray, modes=("llm",)))
    clusters.close()
    report(args, runs, alone)
    if args.gil_episodes:
        print(f"\nGIL-bound episodes (`llm` mode: one text answer, no sandbox; {args.gil_episodes} x "
              f"{args.rounds} rounds, {2 * args.slots} at once):\n")
        table(gil)


def table(runs: dict[str, list[dict]]) -> None:
    """Each way's steady episodes/s over its rounds, and its ratio to local threads."""
    base = statistics.median(r["rate"] for r in runs["local threads"])
    print("| way | episodes/s (median, min-max) | vs local | worker start (s) |")
    print("| --- | --- | --- | --- |")
    for name, rounds in runs.items():
        rates = [r["rate"] for r in rounds]
        med = statistics.median(rates)
        start = "-" if name == "local threads" else f"{statistics.median(r['start'] for r in rounds):.2f}"
        print(f"| {name} | {med:.1f} ({min(rates):.1f}-{max(rates):.1f}) | {med / base:.2f}x | {start} |")


def report(args: argparse.Namespace, runs: dict[str, list[dict]], alone: dict[str, dict]) -> None:
    print(f"{args.episodes} episodes x {args.rounds} rounds, {args.slots} at once, "
          f"{os.cpu_count()} cores; Ray nodes of {args.node_cpus} CPUs\n")
    table(runs)
    per = {name: 1 / r["rate"] if r["rate"] else float("nan") for name, r in alone.items()}
    local = runs["local threads"]
    driver = statistics.median(r["driver_cpu"] for r in local)
    machine = statistics.median(r["machine_cpu"] for r in local)
    print(f"\nlocal threads, CPU per episode: {driver:.1f} ms in the runner's own process (its "
          f"GIL caps it near {1000 / driver:.0f} episodes/s on any machine), {machine:.1f} ms on "
          f"the whole machine (so about {machine / driver:.1f} cores reach that cap; a Ray worker "
          f"process per that many cores goes past it)")
    print(f"\none at a time ({args.sequential} episodes): local {1000 * per['local threads']:.1f} "
          f"ms/episode, ray {1000 * per['ray 1 node']:.1f} ms/episode; Ray overhead per episode "
          f"(round trip minus the episode's own time, median): "
          f"{1000 * alone['ray 1 node']['overhead']:.1f} ms")


if __name__ == "__main__":
    main()
