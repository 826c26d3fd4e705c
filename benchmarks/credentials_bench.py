"""Issue 19's speed targets: MCP `execute_bash` round trips, and the proxy with TLS ended for a credential.

    .venv/bin/python benchmarks/credentials_bench.py [--mb 100] [--rounds 5] [--calls 300]

Targets: an MCP `execute_bash` of `true` over stdio answers in <= 5 ms at p50 (baseline: the same
call through Toolbox.dispatch in-process, no MCP); a 100 MB HTTPS download by curl inside a sandbox
from a loopback server runs at >= 0.5x through the proxy ending TLS to add a credential, against
the same download through a plain CONNECT tunnel, rounds alternating in the same run. The server is
a separate process (Python ssl, 256 KiB writes) on 127.0.0.2.
"""
from __future__ import annotations

import argparse
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "isolation")]

from isolation import Sandbox, SandboxSpec  # noqa: E402
from isolation.net.ca import SandboxCA  # noqa: E402
from isolation.net.credentials import Credential  # noqa: E402
from isolation.net.proxy import default_proxy  # noqa: E402
from netfixtures import HOST, make_test_ca  # noqa: E402
from network_bench import _p50_p90  # noqa: E402

SERVER = r'''
import http.server, os, ssl, sys
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def copyfile(self, source, out):
        while chunk := source.read(256 << 10):
            out.write(chunk)
class S(http.server.ThreadingHTTPServer):
    daemon_threads = True
    def get_request(self):
        sock, addr = self.socket.accept()
        return context.wrap_socket(sock, server_side=True), addr
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[3], sys.argv[4])
os.chdir(sys.argv[1])
s = S((sys.argv[2], 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'''


def proxy_rows(tmp: Path, mb: int, rounds: int) -> list[tuple[str, str, str]]:
    (tmp / "www").mkdir()
    with open(tmp / "www" / "blob.bin", "wb") as f:
        f.write(os.urandom(mb << 20))
    ca_file, _ = make_test_ca(tmp / "test-ca")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp / "www"), HOST,
                               str(tmp / "test-ca" / "server.pem"), str(tmp / "test-ca" / "server.key")],
                              stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    proxy = default_proxy()
    proxy.ca = SandboxCA(tmp / "sandbox-ca")
    proxy.upstream_tls = ssl.create_default_context(cafile=str(ca_file))
    os.environ["LIS_BENCH_TOKEN"] = "bench-token"
    url, allow = f"https://{HOST}:{port}/blob.bin", (f"{HOST}:{port}",)
    credential = Credential(HOST, "Authorization", "Bearer ${env:LIS_BENCH_TOKEN}", port)
    curl = "curl -sS -o /dev/null -w %{speed_download} "
    tunnel, ended = [], []
    try:
        with Sandbox(SandboxSpec(network="on", allow_hosts=allow)) as plain, \
                Sandbox(SandboxSpec(network="on", allow_hosts=allow, credentials=(credential,))) as creds:
            plain.write_file("/tmp/test-ca.pem", ca_file.read_bytes())
            for _ in range(rounds):
                tunnel.append(float(plain.exec(f"{curl} --cacert /tmp/test-ca.pem {url}", timeout=300).stdout) / 1e6)
                ended.append(float(creds.exec(f"{curl} {url}", timeout=300).stdout) / 1e6)
    finally:
        server.kill()
    ratio = statistics.median(e / t for e, t in zip(ended, tunnel))
    med = statistics.median
    return [(f"{mb} MB HTTPS, sandbox curl, plain CONNECT tunnel", f"{med(tunnel):,.0f} MB/s", "baseline"),
            (f"{mb} MB HTTPS, sandbox curl, TLS ended + credential", f"{med(ended):,.0f} MB/s",
             f"ratio {ratio:.2f} (target >= 0.5)")]


def mcp_rows(tmp: Path, calls: int) -> list[tuple[str, str, str]]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {"LIS_SCRATCH": str(tmp / "scratch"), "XDG_CONFIG_HOME": str(tmp / "xdg"),
           "XDG_STATE_HOME": str(tmp / "state"), "PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=sys.executable, args=["-m", "lis_tui.cli", "mcp"], env=env, cwd=str(ROOT))

    async def run() -> list[float]:
        times = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for i in range(calls + 20):
                start = time.perf_counter()
                result = await session.call_tool("execute_bash", {"command": "true"})
                if i >= 20:  # the first makes the sandbox; a few more warm up
                    times.append((time.perf_counter() - start) * 1000)
                assert not result.is_error
        return times

    over_mcp = anyio.run(run)
    from tools import Toolbox
    from tools.shell import Shell

    direct = []
    with Sandbox() as sb:
        box = Toolbox(sb, shell=Shell(sb))
        for i in range(calls + 20):
            start = time.perf_counter()
            box.dispatch("execute_bash", {"command": "true"})
            if i >= 20:
                direct.append((time.perf_counter() - start) * 1000)
        box.close()
    return [("execute_bash `true`, Toolbox.dispatch in-process (p50 / p90)", _p50_p90(direct), "baseline"),
            ("execute_bash `true`, MCP over stdio (p50 / p90)", _p50_p90(over_mcp), "target p50 <= 5 ms")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5, help="download rounds (each: tunnel, then TLS ended)")
    parser.add_argument("--calls", type=int, default=300, help="MCP calls timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LIS_SCRATCH", str(Path(tmp) / "scratch"))
        rows = mcp_rows(Path(tmp), args.calls) + proxy_rows(Path(tmp), args.mb, args.rounds)
    print(f"credentials bench: {args.calls} MCP calls, {args.mb} MB downloads x {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, uid {os.getuid()}")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>18}  {note}")


if __name__ == "__main__":
    main()
