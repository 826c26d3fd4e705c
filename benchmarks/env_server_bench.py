"""The environment server: latency of a `step` of `true` over HTTP, and memory per live environment.

    .venv/bin/python benchmarks/env_server_bench.py [--steps 2000] [--live 500] [--clients 32]

Baselines in the same run: `Shell.run("true")` in a sandbox of this process (the tool alone) and
`SandboxEnv.step` of the same call in process (the tool plus the agent's step, no HTTP). Over
HTTP the server is `lis-tui env serve` in its own process and the client keeps its connection
alive, as a trainer's worker would. Steps alternate between the three, so drift hits all alike.

Memory: `--live` environments reset over HTTP, each stepped once (so its shell runs), then 1.5 s
of quiet (a sandbox's zygote ends 1 s after its last command); PSS from /proc/PID/smaps_rollup of
every sandbox process (the server's descendants but the one spawn helper), per environment; and,
separately, how much the server process itself grew per environment.
Issue targets: step p50 <= 3 ms over HTTP; <= 2 MiB PSS per environment with 500 live.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from isolation import Sandbox  # noqa: E402
from lis_tui.rl import SandboxEnv  # noqa: E402
from lis_tui.rl.client import EnvClient  # noqa: E402
from proctree import pss_kib, sandbox_processes  # noqa: E402
from tools.shell import Shell  # noqa: E402

TOKEN = "bench-token"
TRUE = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c", "type": "function",
     "function": {"name": "execute_bash", "arguments": '{"command": "true"}'}}]}
TASK = {"id": "b", "problem_statement": "Benchmark.", "ground_truth": "x"}


def start_server(max_envs: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "LIS_ENV_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "env", "serve", "--port", "0",
                             "--max-envs", str(max_envs), "--max-steps", "1000000"],
                            env=env, stderr=subprocess.PIPE, text=True)
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("the server did not start")
        if "serving on" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, re.search(r"http://\S+", line).group(0)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def latency(url: str, steps: int) -> dict[str, list[float]]:
    client = EnvClient(url, TOKEN)
    env_id, _ = client.reset(TASK)
    times: dict[str, list[float]] = {"shell": [], "env": [], "http": []}
    with Sandbox() as sandbox, SandboxEnv(max_steps=10**9) as env:
        shell = Shell(sandbox)
        env.reset(TASK)
        calls = {"shell": lambda: shell.run("true"), "env": lambda: env.step(TRUE),
                 "http": lambda: client.step(env_id, TRUE)}
        for fn in calls.values():  # warm up
            for _ in range(50):
                fn()
        for _ in range(steps):
            for name, fn in calls.items():
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
        shell.close()
    client.close(env_id)
    return times


def loaded_latency(url: str, clients: int, steps: int) -> list[float]:
    """Step latency with `clients` workers stepping their own environments at once."""
    times: list[float] = []
    lock = threading.Lock()

    def worker(_: int) -> None:
        client = EnvClient(url, TOKEN)
        env_id, _ = client.reset(TASK)
        mine = []
        for _ in range(steps):
            started = time.perf_counter()
            client.step(env_id, TRUE)
            mine.append(time.perf_counter() - started)
        client.close(env_id)
        with lock:
            times.extend(mine)
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    return times


def memory(url: str, server: int, live: int) -> tuple[float, float, int, float]:
    """(sandbox PSS MiB per env, server growth MiB per env, processes per env, seconds to reset all)."""
    before = pss_kib(server)
    local = threading.local()

    def client() -> EnvClient:
        if not hasattr(local, "c"):
            local.c = EnvClient(url, TOKEN)
        return local.c
    with ThreadPoolExecutor(16) as pool:
        started = time.perf_counter()
        ids = list(pool.map(lambda _: client().reset(TASK)[0], range(live)))
        reset_s = time.perf_counter() - started
        list(pool.map(lambda e: client().step(e, TRUE), ids))
        time.sleep(1.5)
        pids = sandbox_processes(server)
        sandboxes = sum(pss_kib(p) for p in pids)
        grown = pss_kib(server) - before
        list(pool.map(lambda e: client().close(e), ids))
    return sandboxes / live / 1024, grown / live / 1024, len(pids) // live, reset_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--live", type=int, default=500)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    proc, url = start_server(max(args.live, args.clients) + 2)
    try:
        times = latency(url, args.steps)
        loaded = loaded_latency(url, args.clients, max(args.steps // args.clients, 50))
        sandbox_mib, server_mib, procs, reset_s = memory(url, proc.pid, args.live)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    base = pct(times["shell"], 0.5)
    rows = [("`Shell.run(\"true\")` in process (baseline)", times["shell"], ""),
            ("`SandboxEnv.step` of `true`, in process", times["env"], ""),
            ("step of `true` over HTTP, one client", times["http"], "p50 <= 3 ms")]
    print(f"{args.steps} steps each, interleaved\n")
    print("| measure | p50 | p99 | p50 vs baseline | target |\n| --- | --- | --- | --- | --- |")
    for name, values, target in rows:
        print(f"| {name} | {pct(values, 0.5):.3f} ms | {pct(values, 0.99):.3f} ms | "
              f"{pct(values, 0.5) / base:.2f} | {target} |")
    print(f"| step of `true` over HTTP, {args.clients} clients at once | {pct(loaded, 0.5):.3f} ms | "
          f"{pct(loaded, 0.99):.3f} ms | {pct(loaded, 0.5) / base:.2f} | |")
    print(f"\n| memory, {args.live} live environments (each stepped once) | value | target |\n"
          f"| --- | --- | --- |\n"
          f"| PSS of the sandbox processes, per environment ({procs} processes each) | "
          f"{sandbox_mib:.2f} MiB | <= 2 MiB |\n"
          f"| growth of the server process, per environment | {server_mib:.2f} MiB | |\n"
          f"| time to reset {args.live} over HTTP (16 clients) | {reset_s:.1f} s | |")
    print(json.dumps({"http_p50_ms": pct(times["http"], 0.5), "pss_mib": sandbox_mib}), file=sys.stderr)


if __name__ == "__main__":
    main()
