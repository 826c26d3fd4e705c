"""`lis-tui env serve` under clients that hold connections open, and closes that race a step:
the real CLI as a server process, real sockets, real sandboxes."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from lis_tui.rl.client import EnvClient, EnvServerError
from proctree import run_sandboxes
from test_rl_env import TOKEN, alive, bash, serve, task, wait_until

pytestmark = pytest.mark.sandbox
PATIENCE = 60  # seconds a test waits on a socket before it calls the server stuck


def connect(served) -> socket.socket:
    host, port = served.url[len("http://"):].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=PATIENCE)
    return sock


def closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket.timeout if it never does)."""
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def trickle(sock: socket.socket, data: bytes) -> int:
    """Send `data` a byte every 0.2 s; how many went before the server closed the connection."""
    for sent, byte in enumerate(data):
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # reset or broken pipe: the server gave up on us
            return sent
        time.sleep(0.2)
        sock.setblocking(False)
        try:
            if sock.recv(4096, socket.MSG_PEEK) == b"":
                return sent + 1
        except BlockingIOError:
            pass
        except OSError:
            return sent + 1
        finally:
            sock.setblocking(True)
    return len(data)


def test_idle_and_byte_at_a_time_connections_are_closed_and_a_long_step_is_not(tmp_path):
    with serve(tmp_path, "--read-timeout", "1") as served:
        idle = [connect(served) for _ in range(5)]  # connect, send nothing
        assert all(closed_by_server(sock) == b"" for sock in idle)
        # slowloris: headers that never end, a byte every 0.2 s, would renew a per-read timeout
        slow = connect(served)
        head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 300
        sent = trickle(slow, head)
        assert sent < len(head), "a client sending a byte at a time kept its connection"
        # a body that trickles in gets a 408 naming the option, then the close
        body = json.dumps({"task": task(1)}).encode()
        slow_body = connect(served)
        slow_body.sendall(b"POST /envs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                          + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
        answer = closed_by_server(slow_body)
        assert answer.startswith(b"HTTP/1.1 408") and b"--read-timeout" in answer, answer
        # the work a request asks for is not on the clock: a step that runs past it is answered
        client = EnvClient(served.url, TOKEN)
        env_id, _ = client.reset(task(2))
        out = client.step(env_id, bash("sleep 3; echo slept"))
        assert out["messages"][0]["content"] == "slept"
        # its kept-alive connection is closed once idle past the timeout; the client opens another
        assert closed_by_server(client._conn.sock) == b""
        assert client.step(env_id, bash("echo again"))["messages"][0]["content"] == "again"
        client.close(env_id)
        assert served.proc.poll() is None
    assert "Traceback" not in "".join(served.stderr)


def test_connections_past_the_cap_are_refused_until_the_held_ones_time_out(tmp_path):
    with serve(tmp_path, "--read-timeout", "2", "--max-connections", "4") as served:
        held = [connect(served) for _ in range(4)]
        for sock in held:  # each one is being served: a request on it is answered
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        extra = connect(served)
        answer = closed_by_server(extra)
        assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections" in answer, answer
        for sock in held:  # kept alive, then closed once idle past --read-timeout
            assert b"HTTP/1.1" not in closed_by_server(sock)
        assert wait_until(lambda: _health(served) == 200, 10)
        assert "--max-connections allows" in "".join(served.stderr)


def _health(served) -> int:
    try:
        return 200 if EnvClient(served.url, TOKEN).health()["status"] == "ok" else 0
    except (OSError, EnvServerError):
        return 0


def edit(path: str, text: str) -> str:
    call = {"name": "str_replace_editor", "arguments": {"command": "create", "path": path, "file_text": text}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_close_during_a_step_fails_the_step_and_its_editor_writes_nothing(tmp_path, monkeypatch, workers):
    """DELETE while a step's command runs: the command is cut, and the editor call after it in
    the same reply must not write into the sandbox being torn down, nor be reported as done."""
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("LIS_SCRATCH", str(scratch))  # this server's sandboxes only
    with serve(tmp_path, "--workers", workers) as served:
        env_id, _ = served.client.reset(task(3))
        answer: dict = {}

        def step():
            try:
                answer["out"] = EnvClient(served.url, TOKEN).step(
                    env_id, bash("sleep 300") + edit("/testbed/output/late.txt", "late"))
            except EnvServerError as exc:
                answer["error"] = exc
        stepping = threading.Thread(target=step)
        stepping.start()
        assert wait_until(lambda: _running(served.proc.pid, b"sleep\x00300"), 30), "the step never began"
        sandboxes = run_sandboxes(served.proc.pid)
        served.client.close(env_id)
        stepping.join(PATIENCE)
        assert not stepping.is_alive()
        assert "out" not in answer, answer["out"]["messages"]  # no "File created successfully"
        error = answer["error"]
        assert error.status == 410 and "closed while this step ran" in str(error), error
        with pytest.raises(EnvServerError) as err:
            served.client.step(env_id, bash("true"))
        assert err.value.status == 404
        assert wait_until(lambda: not alive(sandboxes), 10)
        # but records and the folder every sandbox mounts its layers' tmpfs on, each in its own namespace
        assert wait_until(lambda: not [p for p in scratch.iterdir() if not p.name.endswith((".lock", ".owner"))
                                       and p.name != "layers"], 10), list(scratch.iterdir())
        assert not list(scratch.rglob("late.txt"))
        assert served.client.health()["live"] == 0
    assert "Traceback" not in "".join(served.stderr)


def _running(server_pid: int, cmdline: bytes) -> bool:
    for pid in run_sandboxes(server_pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(cmdline):
                return True
        except OSError:
            pass
    return False
