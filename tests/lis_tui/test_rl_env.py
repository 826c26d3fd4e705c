"""`SandboxEnv` and `lis-tui env serve`: real sandboxes, the real CLI as a server process, real
HTTP clients (http.client through EnvClient, and curl)."""
from __future__ import annotations

import contextlib
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

import pytest

from lis_tui.rl import SandboxEnv
from proctree import left_behind, run_sandboxes, sandbox_processes
from lis_tui.rl.client import EnvClient, EnvServerError
from lis_tui.rl.env import EnvError

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-123"


def bash(command: str) -> str:
    call = {"name": "execute_bash", "arguments": {"command": command}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


def task(i: int = 0, **more) -> dict:
    return {"id": f"t{i}", "problem_statement": f"Task {i}: what is the word?",
            "ground_truth": f"word-{i}", "input_files": {"note.txt": f"the word is word-{i}"}, **more}


def alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


def wait_until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


class Served:
    def __init__(self, proc: subprocess.Popen, url: str, stderr: list[str]) -> None:
        self.proc, self.url, self.stderr = proc, url, stderr
        self._local = threading.local()

    @property
    def client(self) -> EnvClient:
        if not hasattr(self._local, "client"):
            self._local.client = EnvClient(self.url, TOKEN)
        return self._local.client


@contextlib.contextmanager
def serve(tmp_path: Path, *flags: str):
    """The real CLI's server on a free port; in this process alone (--workers 1) unless `flags`
    name --workers (the default, from the cores, differs from machine to machine)."""
    env = {**os.environ, "LIS_ENV_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    flags = flags if "--workers" in flags else (*flags, "--workers", "1")
    proc = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "env", "serve", "--port", "0", *flags],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if "serving on" in line:
                ready.set()
    threading.Thread(target=read, daemon=True).start()
    assert ready.wait(30), "".join(lines)
    url = re.search(r"http://\S+", next(l for l in lines if "serving on" in l)).group(0)
    try:
        yield Served(proc, url, lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


# -- in process ------------------------------------------------------------------------------------

def test_sandbox_env_runs_an_episode_and_scores_it():
    with SandboxEnv(max_steps=10) as env:
        first = env.reset(task(1, documents={"a.md": "# A"}))
        system, user = first["messages"]
        assert system["role"] == "system" and "/testbed/output" in system["content"]
        assert "Task 1: what is the word?" in user["content"] and "/testbed/documents" in user["content"]
        names = [t["function"]["name"] for t in first["tools"]]
        assert names == ["str_replace_editor", "execute_bash", "submit"]
        out = env.step(bash("cat /testbed/input/note.txt /testbed/documents/a.md"))
        assert out.messages == [{"role": "tool", "tool_call_id": "call_1_0",
                                 "content": "the word is word-1# A"}]
        assert not out.done and out.reward is None
        assert out.assistant["tool_calls"][0]["function"]["name"] == "execute_bash"
        broken = env.step('<tool_call>{"name": "execute_bash", "arguments": {"command": }</tool_call>')
        assert broken.messages[0]["role"] == "user" and "not valid JSON" in broken.messages[0]["content"]
        assert broken.info["format_error"] and not broken.done
        done = env.step(bash("echo word-1 > /testbed/output/answer.txt") + SUBMIT)
        assert (done.done, done.reward, done.finish_reason, done.answer) == (True, 1.0, "submitted", "word-1")
        assert [m["content"] for m in done.messages] == ["(no output)", "Submitted."]
        assert len(env.messages) == 2 + 2 + 2 + 3
        with pytest.raises(EnvError, match="reset"):
            env.step(SUBMIT)
        pids = [env.sandbox.pid]
    assert wait_until(lambda: not alive(pids), 5)


def test_sandbox_env_ends_after_replies_without_a_call():
    with SandboxEnv(max_steps=10) as env:
        env.reset(task(2))
        outs = [env.step("Thinking...") for _ in range(3)]
        assert [o.done for o in outs] == [False, False, True]
        assert outs[-1].finish_reason == "no_action" and outs[-1].reward == 0.0


def test_sandbox_env_ends_at_max_steps_with_the_reward_of_what_is_there():
    with SandboxEnv(max_steps=2) as env:
        env.reset(task(2))
        assert not env.step(bash("echo wrong > /testbed/output/answer.txt")).done
        last = env.step(bash("true"))
        assert (last.done, last.finish_reason, last.reward, last.answer) == (True, "max_steps", 0.0, "wrong")


# -- over HTTP -------------------------------------------------------------------------------------

def test_200_concurrent_environments_over_http(tmp_path):
    n = 200
    with serve(tmp_path, "--max-envs", str(n)) as served:
        with ThreadPoolExecutor(32) as pool:
            ids = list(pool.map(lambda i: served.client.reset(task(i))[0], range(n)))
            assert len(set(ids)) == n and served.client.health()["live"] == n
            server_children = sandbox_processes(served.proc.pid)
            assert len(server_children) >= n  # every environment is a live sandbox
            first = list(pool.map(lambda e: served.client.step(e, bash("true")), ids))
            assert all(r["messages"] == [{"role": "tool", "tool_call_id": "call_1_0",
                                          "content": "(no output)"}] and not r["done"] for r in first)

            def finish(i):  # even environments answer right, odd ones wrong
                word = f"word-{i}" if i % 2 == 0 else "nope"
                return served.client.step(ids[i], bash(f"echo {word} > /testbed/output/answer.txt") + SUBMIT)
            last = list(pool.map(finish, range(n)))
            assert [r["reward"] for r in last] == [1.0 if i % 2 == 0 else 0.0 for i in range(n)]
            assert all(r["done"] and r["finish_reason"] == "submitted" for r in last)
            list(pool.map(lambda e: served.client.close(e), ids))
        assert served.client.health()["live"] == 0
        assert wait_until(lambda: not alive(server_children), 10), "sandbox processes left behind"
        # a sandbox's zygote may outlive its close by a moment; nothing may stay
        assert not (left := left_behind(served.proc.pid)), left
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0


def test_raw_text_and_broken_calls_over_http_are_answered_not_crashed(tmp_path):
    with serve(tmp_path) as served:
        env_id, first = served.client.reset(task(3))
        assert first["messages"][0]["role"] == "system" and first["tools"]
        fenced = served.client.step(env_id, '```json\n{"name": "execute_bash", "arguments": '
                                            '{"command": "cat /testbed/input/note.txt"}}\n```')
        assert fenced["messages"][0]["content"] == "the word is word-3"
        for broken in ('<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"</tool_call>',
                       "I am done thinking."):
            out = served.client.step(env_id, broken)
            assert out["messages"][-1]["role"] == "user" and "tool_call" in out["messages"][-1]["content"]
            assert not out["done"]
        unknown = served.client.step(env_id, '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>')
        assert "Unknown tool" in unknown["messages"][0]["content"]
        for bad, status in ((42, 400), ({"role": "user", "content": "x"}, 400)):
            with pytest.raises(EnvServerError) as err:
                served.client.step(env_id, bad)
            assert err.value.status == status
        with pytest.raises(EnvServerError) as err:
            served.client.step("0123abcd", SUBMIT)
        assert err.value.status == 404
        slow = threading.Thread(target=lambda: served.client.step(env_id, bash("sleep 1")))
        slow.start()
        time.sleep(0.3)
        with pytest.raises(EnvServerError) as err:  # one step at a time per environment
            EnvClient(served.url, TOKEN).step(env_id, bash("true"))
        assert err.value.status == 409 and "one step at a time" in str(err.value)
        slow.join()
        ok = served.client.step(env_id, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]})
        assert ok["done"] and ok["reward"] == 0.0 and ok["messages"] == [
            {"role": "tool", "tool_call_id": "x1", "content": "Submitted."}]
        with pytest.raises(EnvServerError) as err:
            served.client.step(env_id, SUBMIT)
        assert err.value.status == 409 and "over" in str(err.value) and "POST /envs" in str(err.value)
        assert served.proc.poll() is None


def curl(url: str, *args: str) -> tuple[int, str]:
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", *args, url],
                         capture_output=True, text=True, timeout=30).stdout
    body, _, code = out.rpartition("\n")
    return int(code), body


def test_a_token_is_required(tmp_path):
    with serve(tmp_path) as served:
        body = json.dumps({"task": task(4)})
        for headers in ([], ["-H", "Authorization: Bearer wrong"], ["-H", f"Authorization: {TOKEN}"]):
            code, answer = curl(f"{served.url}/envs", "-X", "POST", "-d", body, *headers)
            assert code == 401 and "Bearer" in json.loads(answer)["error"]
        assert served.client.health()["live"] == 0 and sandbox_processes(served.proc.pid) == []
        code, answer = curl(f"{served.url}/health")
        assert code == 200 and json.loads(answer)["status"] == "ok"
        code, answer = curl(f"{served.url}/envs", "-X", "POST", "-d", body,
                            "-H", f"Authorization: Bearer {TOKEN}")
        assert code == 201 and json.loads(answer)["env_id"]


def test_a_nesting_bomb_is_a_bad_request_not_a_server_failure(tmp_path):
    with serve(tmp_path) as served:
        code, answer = curl(f"{served.url}/envs", "-X", "POST", "-d", '{"task": ' + "[" * 100_000,
                            "-H", f"Authorization: Bearer {TOKEN}")
        assert code == 400 and "nests too deeply" in json.loads(answer)["error"], answer
        assert served.client.health()["status"] == "ok"
    assert "Traceback" not in "".join(served.stderr)


def test_generated_token_is_printed_and_demanded(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LIS_ENV_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "env", "serve", "--port", "0"],
                            cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE,
                            text=True)
    try:
        lines = [proc.stderr.readline() for _ in range(3)]
        token, url = lines[1].strip(), re.search(r"http://\S+", lines[2]).group(0)
        assert len(token) >= 24 and "WARNING" not in "".join(lines)
        assert curl(f"{url}/envs", "-X", "POST", "-d", "{}")[0] == 401
        assert curl(f"{url}/envs", "-X", "POST", "-d", "{}", "-H", f"Authorization: Bearer {token}")[0] == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_cap_and_idle_reaping(tmp_path, workers):
    # An idle timeout of seconds, not one: a loaded machine may take most of a second per step,
    # and b must never look idle while it is stepped. With 2 workers the cap is the server's.
    with serve(tmp_path, "--max-envs", "2", "--idle-timeout", "3", "--workers", workers) as served:
        a, _ = served.client.reset(task(5))
        b, _ = served.client.reset(task(6))
        with pytest.raises(EnvServerError) as err:
            served.client.reset(task(7))
        assert err.value.status == 503 and "--max-envs" in str(err.value)
        sandboxes = run_sandboxes(served.proc.pid)
        served.client.close(a)
        c, _ = served.client.reset(task(7))  # a closed one frees its place
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 4.5:  # b stays busy; c goes idle
            served.client.step(b, bash("true"))
            time.sleep(0.3)
        with pytest.raises(EnvServerError) as err:
            served.client.step(c, bash("true"))
        assert err.value.status == 410 and "--idle-timeout" in str(err.value)
        assert served.client.health()["live"] == 1
        assert wait_until(lambda: served.client.health()["live"] == 0, 15)
        assert wait_until(lambda: not alive(sandboxes), 10) and run_sandboxes(served.proc.pid) == []


def test_http_tasks_bring_files_by_content_not_host_paths(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("host secret")
    allowed = tmp_path / "allowed"
    (allowed / "docs").mkdir(parents=True)
    (allowed / "docs" / "d.txt").write_text("allowed doc")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**task(8), "documents_dir": "secret"}) + "\n")  # inside the file's folder
    with serve(tmp_path, "--tasks", str(tasks)) as served:
        for bad in ({**task(9), "documents_dir": str(secret)}, {**task(9), "input_dir": "secret"},
                    {**task(9), "input_files": {"../../etc/x": "y"}}):
            with pytest.raises(EnvServerError) as err:
                served.client.reset(bad)
            assert err.value.status == 400 and str(tmp_path) not in str(err.value)
        # the operator's own --tasks file may name host folders inside its own folder
        env_id, _ = served.client.reset("t8")
        shown = served.client.step(env_id, bash("cat /testbed/documents/key.txt"))["messages"]
        assert shown[0]["content"] == "host secret"
        with pytest.raises(EnvServerError) as err:
            served.client.reset("nope")
        assert err.value.status == 404
    with serve(tmp_path, "--allow-dir", str(allowed)) as served:
        env_id, _ = served.client.reset({**task(10), "documents_dir": "docs"})
        shown = served.client.step(env_id, bash("cat /testbed/documents/d.txt"))["messages"]
        assert shown[0]["content"] == "allowed doc"
        for outside in ("../secret", str(secret)):
            with pytest.raises(EnvServerError) as err:
                served.client.reset({**task(11), "documents_dir": outside})
            assert "--allow-dir" in str(err.value) and str(tmp_path) not in str(err.value)
        with pytest.raises(EnvServerError) as err:
            served.client.reset("t8")
        assert "--tasks" in str(err.value)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_closes_every_sandbox(tmp_path, workers):
    with serve(tmp_path, "--workers", workers) as served:
        ids = [served.client.reset(task(i))[0] for i in range(3)]
        for env_id in ids:
            served.client.step(env_id, bash("sleep 300 &"))
        sandboxes = run_sandboxes(served.proc.pid)
        assert len(sandboxes) >= 3
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0
        assert wait_until(lambda: not alive(sandboxes), 10), "sandbox processes outlived the server"


def test_a_non_loopback_address_is_warned_about(capsys):
    from lis_tui.commands.env import _warn_if_exposed

    _warn_if_exposed("127.0.0.1")
    _warn_if_exposed("localhost")
    assert capsys.readouterr().err == ""
    _warn_if_exposed("0.0.0.0")
    assert "WARNING" in capsys.readouterr().err


def test_the_request_log_shows_client_strings_made_safe(tmp_path):
    import socket

    with serve(tmp_path, "-v") as served:
        host, port = served.url[len("http://"):].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /\x1b]0;pwned\x07\x1b[2J HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b"401" in sock.recv(4096).split(b"\r\n", 1)[0]
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0
        log = "".join(served.stderr)
        assert "\\x1b]0;pwned\\x07\\x1b[2J" in log and "\x1b" not in log and "\x07" not in log


def test_judge_rewards_need_a_judge_and_are_graded_by_it(tmp_path):
    from fakes.openai_server import FakeOpenAI, reply

    def grader(request):
        answer = request.last_content.split("<answer>\n")[1].split("\n</answer>")[0]
        return reply("CORRECT" if answer == "Paris" else "INCORRECT")

    judged = {**task(12), "reward": "judge", "ground_truth": "Paris"}
    with serve(tmp_path) as served:
        with pytest.raises(EnvServerError) as err:
            served.client.reset(judged)
        assert err.value.status == 400 and "--judge-model" in str(err.value)
    with FakeOpenAI(default=grader) as judge, \
            serve(tmp_path, "--judge-model", "j", "--judge-base-url", judge.base_url) as served:
        rewards = []
        for word in ("Paris", "Lyon"):
            env_id, _ = served.client.reset(judged)
            out = served.client.step(env_id, bash(f"echo {word} > /testbed/output/answer.txt") + SUBMIT)
            rewards.append(out["reward"])
        assert rewards == [1.0, 0.0] and len(judge.chat_requests) == 2


def test_a_sandbox_outlives_the_thread_that_reset_it():
    # bwrap --die-with-parent fires when the starting *thread* ends: a trainer's short-lived
    # worker, or one HTTP connection's handler thread, must not take the sandbox with it
    env = SandboxEnv(max_steps=10)
    try:
        worker = threading.Thread(target=env.reset, args=(task(13),))
        worker.start()
        worker.join()
        time.sleep(0.3)
        assert env.step(bash("cat /testbed/input/note.txt")).messages[0]["content"] == "the word is word-13"
    finally:
        env.close()


def test_close_after_bash_died_between_steps():
    with SandboxEnv(max_steps=10) as env:
        env.reset(task(14))
        env.step(bash("(sleep 0.2; kill -9 $$) >/dev/null 2>&1 &"))
        time.sleep(0.8)
        pids = [env.sandbox.pid]
        env.close()  # no BrokenPipeError from the dead shell's reader
        assert wait_until(lambda: not alive(pids), 5)


def test_an_environment_reset_over_a_closed_connection_lives_on(tmp_path):
    with serve(tmp_path) as served:
        code, answer = curl(f"{served.url}/envs", "-X", "POST", "-d", json.dumps({"task": task(15)}),
                            "-H", f"Authorization: Bearer {TOKEN}")
        assert code == 201
        time.sleep(0.3)  # curl's connection, and the server thread that served it, are gone
        out = served.client.step(json.loads(answer)["env_id"], bash("cat /testbed/input/note.txt"))
        assert out["messages"][0]["content"] == "the word is word-15"
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0
        assert "Traceback" not in "".join(served.stderr)
