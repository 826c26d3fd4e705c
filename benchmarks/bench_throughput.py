"""Throughput of `lis-tui bench`: 3-step episodes against a scripted server that answers at once.

    .venv/bin/python benchmarks/bench_throughput.py [--episodes 256] [--rounds 3] [--concurrency 32]
                                                    [--live 256] [--rootfs host] [--paper]

Each episode is the real thing: a fresh sandbox (created and destroyed), the persistent shell,
the agent with the real openai client over HTTP, trajectory.json per episode, scoring and a line
in results.jsonl. The three steps are `execute_bash true`, `str_replace_editor create` of the
answer, and `submit`. The scripted server runs in a process of its own, as a real one would.

Each round runs --episodes episodes; the table gives the median round (and the slowest and
fastest), since a shared 2-core machine varies by a fifth from one run to the next.

Memory per live episode: with --live N episodes held open at once (the server holds each
episode's second reply, as a model that takes its time would), in --live-workers processes, the
proportional set size (PSS, so shared libraries are split fairly) of lis-tui's processes: this
process, every process under it but the scripted model server, and the sandbox processes of it
and its workers (under their spawn helpers), minus the idle baseline, divided by the live
sandboxes; measured once the sandboxes' zygotes have left (they do after IDLE seconds without
work; while one lives, it adds about 0.85 MiB to its episode). The model server stands in for
a model that runs elsewhere, so it is no cost of an episode; the total that counted it (as
before) is printed beside.

The same for `lis-tui env serve --workers N` (each N of --live-workers): the server in a process
of its own, --live environments reset over HTTP and each stepped once (`true`, so its shell
runs), then the same quiet; PSS of the server, its workers and their sandboxes, minus the
server's own process idle (so the workers' interpreters count, once), per live environment.
`--live-only` skips the throughput rounds:

    bench_throughput.py --live 1000 --live-workers 1,2 --live-only
Issue target: >= 100 agent steps/s and >= 30 episodes/s at concurrency 32 on a 2-core machine.

Where episodes run, compared in one run (rounds alternate, so drift hits each alike):

    bench_throughput.py --workers 1,auto [--ray] [--concurrency 32,128] [--live 0]

`--workers` lists worker-process counts (1: this process alone, as before; auto: one per 2
cores, at most the concurrency); `--ray` adds a Ray cluster of this machine (one started here,
or yours: `ray start --head`), joined once before the rounds; `--concurrency` may list several.
The table gives each one's median episodes/s and its ratio to the first (1 worker at the first
concurrency).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from isolation import SandboxSpec  # noqa: E402
from lis_tui.rl.client import EnvClient  # noqa: E402
from isolation.spawn.helper import IDLE  # noqa: E402
from lis_tui.bench.runner import BenchOptions, BenchRunner  # noqa: E402
from lis_tui.bench.tasks import Task  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402
from proctree import descendants, pss_kib  # noqa: E402

SERVER = """
import sys, threading
sys.path[:0] = sys.argv[2:]
from fakes.openai_server import FakeOpenAI, call, reply
hold = float(sys.argv[1])
release = threading.Event()

def answer(request):
    done = len(request.tool_outputs)
    if done == 0:
        return reply(tool_calls=[call("execute_bash", {"command": "true"})])
    if done == 1:
        step = reply(tool_calls=[call("str_replace_editor", {
            "command": "create", "path": "/testbed/output/answer.txt", "file_text": "42"})])
        release.wait(hold)  # held here (a handler thread each) until the benchmark says go
        return step
    return reply(tool_calls=[call("submit", {})])

with FakeOpenAI(default=answer) as server:
    print(server.base_url, flush=True)
    for line in sys.stdin:
        release.set()
"""


@contextlib.contextmanager
def scripted_server(hold: float = 0.0, script: str = SERVER):
    """(base URL, process) of `script` (SERVER: the 3-step episodes) in a process of its own."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(hold), str(ROOT), str(ROOT / "tests")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip(), proc
    finally:
        proc.stdin.close()
        proc.wait(10)


def tasks(count: int) -> list[Task]:
    return [Task(f"t{i:04d}", f"What is 6 * 7? (episode {i})", "42", reward="numeric")
            for i in range(count)]


def run(base_url: str, count: int, concurrency: int, rootfs: str, out: Path,
        watch=None, observation: str = "", workers: int = 1, ray=None) -> tuple[float, list[dict]]:
    overrides = {"model.base_url": base_url, "model.model": "m", "model.max_retries": 3,
                 "model.retry_base_delay": 0.05, "model.timeout": 300.0}
    if observation:  # "paper": the package's tools (tools/paper.py), as paper suites run them
        overrides["agent.observation"] = observation
    config = load_config(env={}, paths=[], overrides=overrides)
    runner = BenchRunner(tasks(count), config, SandboxSpec(rootfs=rootfs),
                         BenchOptions(output=out, concurrency=concurrency, progress=None,
                                      workers=workers, ray=ray))
    started = time.perf_counter()
    if watch is not None:
        threading.Thread(target=watch, args=(runner,), daemon=True).start()
    outcome = runner.run()
    return time.perf_counter() - started, outcome.results


def tree_pss_kib(root: int) -> tuple[int, int]:
    """PSS (KiB) of `root` and all its descendants, and how many processes that is."""
    pids = [root, *descendants(root)]
    return sum(pss_kib(pid) for pid in pids), len(pids)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def run_pss_kib(root: int, leave_out: tuple[int, ...] = ()) -> tuple[int, int, int]:
    """(PSS in KiB, processes, live sandboxes) of the whole run: `root`, its descendants but
    `leave_out` and theirs, and the sandbox processes of `root` and of each worker process under
    it, with their spawn helpers (a helper is no child of its owner: isolation.spawn); sandboxes
    are counted by the marker their bwrap and pid 1 carry."""
    skip = {*leave_out, *descendants(*leave_out)} if leave_out else set()
    mine = [p for p in [root, *descendants(root)] if p not in skip]
    owners = mine  # this process and its workers
    helpers = [int(d.name) for d in Path("/proc").glob("[0-9]*")
               if (c := _cmdline(int(d.name))) and any(w.endswith(b"spawn/helper.py") for w in c)
               and c[-2:-1] and c[-2] in {str(o).encode() for o in owners}]
    pids = set(mine) | set(helpers) | set(descendants(*helpers)) if helpers else set(mine)
    marks = {w for p in pids for w in _cmdline(p) if w.startswith(b"lis-sandbox-")}
    return sum(pss_kib(pid) for pid in pids), len(pids), len(marks)


def memory_per_live_episode(live: int, rootfs: str, tmp: Path, workers: int = 1) -> tuple[float, int, float, float]:
    """(MiB and processes per live episode, episodes live at once, MiB per episode with the
    scripted model server counted as before) with `live` held open, in `workers` processes
    (their interpreters count once, in the total)."""
    baseline, base_procs, _ = run_pss_kib(os.getpid())
    peak = {"kib": 0, "live": 0, "procs": 0, "old": 0}
    with scripted_server(hold=120.0) as (url, server):
        def watch(runner):
            deadline = time.monotonic() + 100
            while True:
                time.sleep(0.5)
                n = run_pss_kib(os.getpid())[2]
                if n >= live or time.monotonic() > deadline:
                    # Let the last shells settle, and each sandbox's zygote leave as it does while
                    # an episode waits on its model (isolation/spawn: IDLE seconds without work).
                    time.sleep(1.0 + IDLE)
                    kib, procs, n = run_pss_kib(os.getpid(), leave_out=(server.pid,))
                    old = run_pss_kib(os.getpid())[0]
                    peak.update(kib=kib - baseline, procs=procs - base_procs, live=n, old=old - baseline)
                    server.stdin.write("go\n")
                    server.stdin.flush()
                    return
        _, results = run(url, live, live, rootfs, tmp / "live", watch, workers=workers)
    failed = [r["message"] for r in results if r["finish_reason"] != "submitted"]
    if failed:
        print(f"{len(failed)} held episodes failed, e.g. {failed[0]}", file=sys.stderr)
    n = max(peak["live"], 1)
    return peak["kib"] / 1024 / n, peak["live"], peak["procs"] / n, peak["old"] / 1024 / n


def memory_per_live_env(live: int, rootfs: str, tmp: Path, workers: int) -> tuple[float, int, float]:
    """(MiB and processes per live environment, environments live) of `lis-tui env serve
    --workers N` with `live` environments reset and stepped once over HTTP."""
    token = "bench-token"
    proc = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "env", "serve", "--port", "0",
                             "--workers", str(workers), "--max-envs", str(live), "--idle-timeout", "3600",
                             "--rootfs", rootfs], cwd=tmp, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LIS_ENV_TOKEN": token, "PYTHONPATH": str(ROOT)})
    try:
        while "serving on" not in (line := proc.stderr.readline()):
            if not line:
                raise RuntimeError("env serve did not start")
        url = line.split("serving on ")[1].split()[0]
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # never let its pipe fill
        baseline = pss_kib(proc.pid)  # the server's own process, idle; its workers count in full
        local = threading.local()

        def one(i: int) -> None:
            if not hasattr(local, "client"):
                local.client = EnvClient(url, token)
            env_id, _ = local.client.reset({"id": f"t{i}", "problem_statement": "What is 6 * 7?",
                                            "ground_truth": "42"})
            local.client.step(env_id, {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c", "type": "function",
                "function": {"name": "execute_bash", "arguments": '{"command": "true"}'}}]})
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(live)))
        time.sleep(1.0 + IDLE)
        kib, procs, n = run_pss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(300)
    n = max(n, 1)
    return (kib - baseline) / 1024 / n, n, (procs - 1) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256, help="episodes per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="32", help="episodes at once (a list: 32,128)")
    parser.add_argument("--workers", help="worker processes to compare, e.g. 1,auto")
    parser.add_argument("--ray", action="store_true", help="also run on a Ray cluster of this machine")
    parser.add_argument("--live", type=int, default=256, help="episodes held open for the memory "
                        "measurement (0 skips it; the paper reports 512 Docker sandboxes at ~200 MB)")
    parser.add_argument("--live-workers", default="1", help="worker processes that hold the --live "
                        "episodes (their interpreters count once); a list (1,2) measures each, and "
                        "env serve with as many workers")
    parser.add_argument("--live-only", action="store_true", help="measure memory per live episode "
                        "(bench and env serve) only, no throughput rounds")
    parser.add_argument("--rootfs", default="host")
    parser.add_argument("--paper", action="store_true", help="also run each round in paper mode "
                        "(a fresh bash -c per command, the package's editor), alternating with "
                        "the default mode, and print both")
    args = parser.parse_args()
    if args.live_only or "," in args.live_workers:
        return compare_live(args)
    if args.workers or args.ray or "," in args.concurrency:
        return compare_places(args)
    args.concurrency = int(args.concurrency)
    if args.paper:
        return compare_paper(args)
    with tempfile.TemporaryDirectory(prefix="lis-bench-") as tmp:
        rounds = []
        with scripted_server() as (url, _):
            run(url, 16, 16, args.rootfs, Path(tmp) / "warm")  # page cache, imports, first sweep
            for i in range(args.rounds):
                wall, results = run(url, args.episodes, args.concurrency, args.rootfs, Path(tmp) / f"run{i}")
                rounds.append((len(results) / wall, sum(r["steps"] for r in results) / wall, wall, results))
        rounds.sort(key=lambda r: r[0])
        eps, sps, wall, results = rounds[len(rounds) // 2]
        ok = sum(r["correct"] for r in results)
        spread = lambda k: f"{rounds[0][k]:.1f} .. {rounds[-1][k]:.1f}"  # noqa: E731
        rows = [("episodes per round (all correct?)",
                 f"{len(results)} ({'yes' if ok == len(results) else ok})"),
                ("rounds", str(args.rounds)),
                ("concurrency", str(args.concurrency)),
                ("CPU cores", str(os.cpu_count())),
                ("wall time of the median round", f"{wall:.2f} s"),
                ("episodes / s, median (sandbox create + destroy included)", f"{eps:.1f}"),
                ("episodes / s, slowest .. fastest round", spread(0)),
                ("agent steps / s, median", f"{sps:.1f}"),
                ("agent steps / s, slowest .. fastest round", spread(1)),
                ("mean episode wall time",
                 f"{sum(r['wall_time'] for r in results) / len(results) * 1000:.0f} ms")]
        if args.live:
            mib, seen, procs, old = memory_per_live_episode(args.live, args.rootfs, Path(tmp),
                                                            int(args.live_workers))
            rows.append((f"memory per live episode ({seen} live, {args.live_workers} worker(s), PSS)",
                         f"{mib:.2f} MiB"))
            rows.append(("the same with the scripted model server counted (as before)", f"{old:.2f} MiB"))
            rows.append(("processes per live episode", f"{procs:.1f}"))
    width = max(len(k) for k, _ in rows)
    print(f"\nlis-tui bench throughput ({args.rootfs} rootfs, 3-step episodes)\n")
    print(f"| {'measure':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for key, value in rows:
        print(f"| {key:<{width}} | {value} |")
    print(json.dumps(dict(rows)), file=sys.stderr)


def compare_live(args) -> None:
    """Memory per live episode, bench and env serve, for each --live-workers count."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="lis-bench-") as tmp:
        for n in (int(w) for w in args.live_workers.split(",")):
            mib, seen, procs, old = memory_per_live_episode(args.live, args.rootfs, Path(tmp) / f"b{n}", n)
            rows.append(("bench", n, seen, mib, procs, f"{old:.2f}"))
            (Path(tmp) / f"s{n}").mkdir()
            mib, seen, procs = memory_per_live_env(args.live, args.rootfs, Path(tmp) / f"s{n}", n)
            rows.append(("env serve", n, seen, mib, procs, "(no model server)"))
    print(f"\nmemory per live episode ({args.rootfs} rootfs, {len(os.sched_getaffinity(0))} cores; "
          "PSS of lis-tui's processes: parent, workers, sandboxes; the parent's idle baseline "
          "taken off)\n")
    print("| runs in | workers | live | MiB per live episode | vs first row | processes per episode "
          "| MiB with the scripted model server (as before) |\n|---|---|---|---|---|---|---|")
    for what, n, seen, mib, procs, old in rows:
        print(f"| {what} | {n} | {seen} | {mib:.2f} | {mib / rows[0][3]:.2f}x | {procs:.1f} | {old} |")


def compare_places(args) -> None:
    """Episodes/s of each (place, concurrency), rounds alternating; median of each."""
    from lis_tui.bench.workers.pool import default_workers

    levels = [int(c) for c in args.concurrency.split(",")]
    places = []
    for word in (args.workers or "1").split(","):
        for c in levels:
            n = default_workers(c) if word == "auto" else int(word)
            places.append((f"{n} worker{'s' * (n > 1)}" + (" (auto)" if word == "auto" else ""), c,
                           {"workers": n}))
    if args.ray:
        from lis_tui.ray import connect, require_ray

        connect("auto")  # once: every round then uses this cluster
        places += [("ray (one node: this machine)", c, {"ray": "auto"}) for c in levels]
    eps: dict[int, list[float]] = {i: [] for i in range(len(places))}
    correct = {i: True for i in range(len(places))}
    with tempfile.TemporaryDirectory(prefix="lis-bench-") as tmp, scripted_server() as (url, _):
        for i, (_, c, how) in enumerate(places):  # warm each: imports, workers' page cache
            run(url, 16, min(c, 16), args.rootfs, Path(tmp) / f"warm{i}", **how)
        for r in range(args.rounds):
            for i, (_, c, how) in enumerate(places):
                wall, results = run(url, args.episodes, c, args.rootfs, Path(tmp) / f"{i}-{r}", **how)
                eps[i].append(len(results) / wall)
                correct[i] &= len(results) == args.episodes and all(x["correct"] for x in results)
    if args.ray:
        require_ray().shutdown()
    median = {i: sorted(v)[len(v) // 2] for i, v in eps.items()}
    print(f"\nwhere episodes run ({args.rootfs} rootfs, 3-step episodes, {args.episodes} a round, "
          f"median of {args.rounds} rounds, {len(os.sched_getaffinity(0))} cores)\n")
    print("| runs in | concurrency | episodes / s, median | slowest .. fastest | vs first row | "
          "all correct |\n|---|---|---|---|---|---|")
    for i, (name, c, _) in enumerate(places):
        print(f"| {name} | {c} | {median[i]:.1f} | {min(eps[i]):.1f} .. {max(eps[i]):.1f} | "
              f"{median[i] / median[0]:.2f}x | {'yes' if correct[i] else 'no'} |")


def compare_paper(args) -> None:
    """Default and paper mode, round by round in turn on one server, median of each."""
    eps: dict[str, list[float]] = {"default": [], "paper": []}
    correct = {"default": True, "paper": True}
    with tempfile.TemporaryDirectory(prefix="lis-bench-") as tmp, scripted_server() as (url, _):
        run(url, 16, 16, args.rootfs, Path(tmp) / "warm")
        run(url, 16, 16, args.rootfs, Path(tmp) / "warm-paper", observation="paper")
        for i in range(args.rounds):
            for mode in ("default", "paper"):
                wall, results = run(url, args.episodes, args.concurrency, args.rootfs,
                                    Path(tmp) / f"{mode}{i}", observation=mode * (mode == "paper"))
                eps[mode].append(len(results) / wall)
                correct[mode] &= all(r["correct"] for r in results)
    median = {m: sorted(v)[len(v) // 2] for m, v in eps.items()}
    print(f"\nlis-tui bench throughput, default and paper mode ({args.rootfs} rootfs, 3-step "
          f"episodes, {args.episodes} a round, concurrency {args.concurrency}, "
          f"{os.cpu_count()} cores)\n")
    print("| mode | episodes / s, median | slowest .. fastest | all correct |\n|---|---|---|---|")
    for mode, values in eps.items():
        print(f"| {mode} | {median[mode]:.1f} | {min(values):.1f} .. {max(values):.1f} | "
              f"{'yes' if correct[mode] else 'no'} |")
    print(f"\npaper / default: {median['paper'] / median['default']:.2f}x")


if __name__ == "__main__":
    main()
