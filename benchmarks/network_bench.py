"""Egress proxy speed: throughput, added latency, and set-up cost; prints a table.

    .venv/bin/python benchmarks/network_bench.py [--mb 100] [--requests 200] [--rounds 7] [--sandboxes 30]

Targets (issue 6): a 100 MB download through the proxy (curl inside a sandbox) from a loopback
server runs at >= 0.8x the same download on the host without the proxy, same run; the proxy adds
<= 1 ms per request at p50; opening the proxy port when a sandbox starts costs <= 5 ms.
The server is a separate process (sendfile, one thread per connection) on 127.0.0.2.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isolation import Sandbox, SandboxSpec
from isolation.net.proxy import PROXY_PORT
from isolation.net import EgressProxy, NetworkPolicy

HOST = "127.0.0.2"

SERVER = r'''
import http.server, os, sys
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def copyfile(self, source, out):
        out.flush()
        self.connection.sendfile(source)
class S(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
os.chdir(sys.argv[1])
s = S((sys.argv[2], 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'''

# The same client on both sides: a fresh connection per request, absolute URL when proxied.
CLIENT = r'''
import socket, sys, time
host, port, path, n, proxied = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
target = f"http://{proxied}{path}" if proxied != "-" else path
request = f"GET {target} HTTP/1.1\r\nHost: {proxied if proxied != '-' else host}\r\nConnection: close\r\n\r\n".encode()
times = []
for i in range(n + 20):
    t = time.perf_counter()
    s = socket.create_connection((host, port))
    s.sendall(request)
    while s.recv(65536):
        pass
    s.close()
    if i >= 20:
        times.append((time.perf_counter() - t) * 1000)
times.sort()
print(times[len(times) // 2], times[int(len(times) * 0.9)])
'''


def start_server(root: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(root), HOST], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def curl_mbps(run, url: str, extra: list[str]) -> float:
    out = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", *extra, url])
    return float(out) / 1e6


def host_run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def throughput(sb, env, url, rounds: int, mb: int) -> list[tuple[str, str, str]]:
    """Medians over `rounds`; each round downloads directly, plain through the proxy, and tunnelled,
    one after the other, so that all three see the same load from the rest of the machine. The
    proxy's CPU time is this process's (only the proxy thread works while a download runs)."""
    inside = lambda argv: sb.exec(argv, env=env, timeout=300).stdout  # noqa: E731
    direct, plain, tunnel, cpu = [], [], [], 0.0
    for _ in range(rounds):
        direct.append(curl_mbps(host_run, url, []))
        for speeds, extra in ((plain, []), (tunnel, ["-p"])):
            before = _cpu()
            speeds.append(curl_mbps(inside, url, extra))
            cpu += _cpu() - before
    med = statistics.median
    ratio = lambda xs: med(x / d for x, d in zip(xs, direct))  # noqa: E731
    return [("download, host curl, no proxy (median)", f"{med(direct):,.0f} MB/s", ""),
            ("download, sandbox curl, proxy, plain http", f"{med(plain):,.0f} MB/s",
             f"ratio {ratio(plain):.2f} (target >= 0.8)"),
            ("download, sandbox curl, proxy, CONNECT", f"{med(tunnel):,.0f} MB/s",
             f"ratio {ratio(tunnel):.2f} (target >= 0.8)"),
            (f"proxy CPU per {mb} MB relayed", f"{cpu / (2 * rounds) * 1000:.0f} ms", "user + system")]


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def latency(sb, env, port, requests: int, rounds: int) -> list[tuple[str, str, str]]:
    """p50 per round of `requests` fresh-connection GETs, host and proxied rounds alternating;
    the added latency is the median of the per-round differences."""
    host_argv = ["/usr/bin/python3", "-c", CLIENT, HOST, str(port), "/small.txt", str(requests), "-"]
    proxied = ["python3", "-c", CLIENT, "127.0.0.1", str(PROXY_PORT), "/small.txt", str(requests),
               f"{HOST}:{port}"]
    host, through, cpu = [], [], 0.0
    for _ in range(rounds):
        host.append(float(host_run(host_argv).split()[0]))
        before = _cpu()
        through.append(float(sb.exec(proxied, env=env, timeout=300).stdout.split()[0]))
        cpu += _cpu() - before
    med = statistics.median
    return [("request, host, no proxy (p50)", f"{med(host):.3f} ms", ""),
            ("request, sandbox, through proxy (p50)", f"{med(through):.3f} ms", ""),
            ("added latency per request (p50)", f"{med(t - h for t, h in zip(through, host)):.3f} ms",
             "target <= 1 ms"),
            ("proxy CPU per request", f"{cpu / (rounds * (requests + 20)) * 1000:.3f} ms", "user + system")]


def setup_cost(proxy, sandboxes: int) -> list[tuple[str, str, str]]:
    """Opening the proxy port in a fresh sandbox, each way this machine can take."""
    times = []
    for _ in range(sandboxes):
        with Sandbox() as sb:
            start = time.perf_counter()
            handle = proxy.attach(sb, NetworkPolicy("on"))
            times.append((time.perf_counter() - start) * 1000)
            handle.detach()
    return [("proxy set-up per sandbox (p50 / p90)", _p50_p90(times), "target <= 5 ms")]


def start_cost(sandboxes: int) -> list[tuple[str, str, str]]:
    """Whole Sandbox.start with the network off and on (only once Sandbox opens the port itself)."""
    if not hasattr(Sandbox, "set_network"):
        return []
    rows = []
    for mode in ("off", "on"):
        times = []
        for _ in range(sandboxes):
            start = time.perf_counter()
            with Sandbox(SandboxSpec(network=mode)):
                times.append((time.perf_counter() - start) * 1000)
        rows.append((f"Sandbox start, network {mode} (p50 / p90)", _p50_p90(times), ""))
    return rows


def _p50_p90(times: list[float]) -> str:
    times = sorted(times)
    return f"{times[len(times) // 2]:.2f} / {times[int(len(times) * 0.9)]:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--requests", type=int, default=200, help="requests per latency round")
    parser.add_argument("--sandboxes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=7, help="rounds of downloads and of requests")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with open(root / "blob.bin", "wb") as f:
            f.write(os.urandom(args.mb << 20))
        (root / "small.txt").write_text("ok\n")
        server, port = start_server(root)
        proxy = EgressProxy()
        try:
            rows = setup_cost(proxy, args.sandboxes) + start_cost(args.sandboxes)
            with Sandbox() as sb:
                handle = proxy.attach(sb, NetworkPolicy("on", allow=[f"{HOST}:{port}"]))
                env = handle.environment(sb.env)
                rows += throughput(sb, env, f"http://{HOST}:{port}/blob.bin", args.rounds, args.mb)
                rows += latency(sb, env, port, args.requests, args.rounds)
                handle.detach()
        finally:
            proxy.close()
            server.kill()
    print(f"network bench: {args.mb} MB downloads and {args.requests}-request rounds, {args.rounds} rounds each, "
          f"{args.sandboxes} sandboxes; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, uid {os.getuid()}")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>22}  {note}")


if __name__ == "__main__":
    main()
