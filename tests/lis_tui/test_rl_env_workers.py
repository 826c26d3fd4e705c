"""`lis-tui env serve --workers N`: one port, the environments in N worker processes. The real
CLI as a server process, real sandboxes, the real client; workers found in /proc."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from lis_tui.rl.client import EnvClient, EnvServerError
from proctree import fork_servers, run_sandboxes, sandbox_processes, spawn_helpers, worker_processes
from test_bench_workers import _alive, _stamps
from test_rl_env import SUBMIT, TOKEN, bash, serve, task, wait_until

pytestmark = pytest.mark.sandbox


def edit(path: str, text: str) -> str:
    call = {"name": "str_replace_editor", "arguments": {"command": "create", "path": path, "file_text": text}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def script(client: EnvClient) -> list:
    """A fixed sequence of resets and steps on 4 environments, interleaved; what it was answered,
    without the environment ids (random)."""
    seen: list = []
    ids = []
    for i in range(4):
        env_id, first = client.reset(task(i), max_steps=5 if i == 3 else None)
        ids.append(env_id)
        seen.append(first)
    turns = [bash("cat /testbed/input/note.txt; ls /testbed"),
             edit("/testbed/output/answer.txt", "word-{i}"),
             '<tool_call>{"name": "execute_bash", "arguments": {"command": }</tool_call>',
             bash("cat /testbed/output/answer.txt; echo $((6 * 7))"),
             SUBMIT]
    for turn in turns:
        for i, env_id in enumerate(ids):
            text = turn.replace("{i}", str(i) if i % 2 == 0 else "nope")
            seen.append(client.step(env_id, text))
    with pytest.raises(EnvServerError) as err:
        client.step(ids[0], SUBMIT)
    seen.append((err.value.status, str(err.value)))
    for env_id in ids:
        client.close(env_id)
    with pytest.raises(EnvServerError) as err:
        client.step(ids[1], SUBMIT)
    seen.append((err.value.status, str(err.value).replace(ids[1], "ID")))
    return seen


def test_one_worker_and_two_give_the_same_answers(tmp_path):
    answers = {}
    for workers in ("1", "2"):
        with serve(tmp_path, "--workers", workers) as served:
            answers[workers] = script(served.client)
            assert len(worker_processes(served.proc.pid)) == (0 if workers == "1" else 2)
            assert served.client.health()["live"] == 0
    assert answers["1"] == answers["2"]
    rewards = [a["reward"] for a in answers["1"] if isinstance(a, dict) and a.get("done")]
    assert rewards == [1.0, 0.0, 1.0, 0.0]


def sandboxes_of(workers: list[int]) -> dict[int, int]:
    """Live sandboxes per worker, by the marker their bwrap and pid 1 carry."""
    counts = {}
    for worker in workers:
        marks = set()
        for pid in sandbox_processes(worker):
            try:
                words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            marks |= {w for w in words if w.startswith(b"lis-sandbox-")}
        counts[worker] = len(marks)
    return counts


def test_environments_spread_over_the_workers_which_own_their_sandboxes(tmp_path):
    with serve(tmp_path, "--workers", "2", "--max-envs", "5") as served:
        workers = worker_processes(served.proc.pid)
        assert len(workers) == 2 and "in 2 worker processes" in "".join(served.stderr)
        ids = [served.client.reset(task(i))[0] for i in range(4)]
        assert len(set(ids)) == 4
        assert sandboxes_of(workers) == {workers[0]: 2, workers[1]: 2}  # the least loaded, each time
        assert not spawn_helpers(served.proc.pid)  # the server itself starts no sandbox
        served.client.close(ids[0])
        served.client.close(ids[2])  # both on the first worker: the next two go there
        fifth, _ = served.client.reset(task(5))
        sixth, _ = served.client.reset(task(6))
        assert sandboxes_of(workers) == {workers[0]: 2, workers[1]: 2}
        served.client.reset(task(7))
        with pytest.raises(EnvServerError) as err:  # the cap is the server's, not per worker
            served.client.reset(task(8))
        assert err.value.status == 503 and "--max-envs" in str(err.value)
        assert served.client.health()["live"] == 5
        for env_id in (ids[1], ids[3], fifth, sixth):
            assert served.client.step(env_id, bash("echo ok"))["messages"][0]["content"] == "ok"


def _running(workers: list[int], cmdline: bytes) -> int | None:
    """The worker under which a sandbox runs `cmdline`."""
    for worker in workers:
        for pid in sandbox_processes(worker):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(cmdline):
                    return worker
            except OSError:
                pass
    return None


def test_a_worker_killed_mid_step_its_environments_say_so_and_the_server_serves_on(tmp_path):
    with serve(tmp_path, "--workers", "2", "--max-envs", "4") as served:
        server = served.proc.pid
        workers = worker_processes(server)
        ids = [served.client.reset(task(i))[0] for i in range(4)]  # two on each
        answer: dict = {}

        def step():
            try:
                answer["out"] = EnvClient(served.url, TOKEN).step(ids[0], bash("sleep 300"))
            except EnvServerError as exc:
                answer["error"] = exc
        stepping = threading.Thread(target=step)
        stepping.start()
        victim = wait_until(lambda: _running(workers, b"sleep\x00300"), 30)
        assert victim, "the step never began"
        others = [w for w in workers if w != victim]
        stamps = _stamps([victim, *sandbox_processes(victim)])
        helpers = spawn_helpers(victim)
        assert len(stamps) > 2 and helpers
        os.kill(victim, signal.SIGKILL)
        stepping.join(60)
        assert not stepping.is_alive() and "out" not in answer
        assert answer["error"].status == 410 and "killed by SIGKILL" in str(answer["error"]), answer
        # the dead worker's other environment says so too; the live worker's go on
        outcomes = {}
        for env_id in ids[1:]:
            try:
                outcomes[env_id] = served.client.step(env_id, bash("echo alive"))["messages"][0]["content"]
            except EnvServerError as exc:
                outcomes[env_id] = exc
        gone = [e for e, o in outcomes.items() if isinstance(o, EnvServerError)]
        assert len(gone) == 1 and outcomes[gone[0]].status == 410
        assert "lost with its worker process" in str(outcomes[gone[0]]) and "SIGKILL" in str(outcomes[gone[0]])
        assert sorted(o for o in outcomes.values() if isinstance(o, str)) == ["alive", "alive"]
        with pytest.raises(EnvServerError) as err:
            served.client.step(ids[0], bash("true"))
        assert err.value.status == 410 and "SIGKILL" in str(err.value)
        assert served.client.health()["live"] == 2  # the lost ones no longer count against the cap
        # nothing of the dead worker is left: its sandboxes, shells, zygotes and spawn helper
        assert wait_until(lambda: not _alive(stamps) and not spawn_helpers(victim), 15), \
            [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive(stamps)]
        # new environments: a worker starts in the dead one's place, and the cap holds
        new = [served.client.reset(task(10 + i))[0] for i in range(2)]
        now = worker_processes(server)
        assert len(now) == 2 and others[0] in now and victim not in now
        for env_id in new:
            assert served.client.step(env_id, bash("echo new"))["messages"][0]["content"] == "new"
        with pytest.raises(EnvServerError) as err:
            served.client.reset(task(20))
        assert err.value.status == 503
        assert served.proc.poll() is None
        everything = _stamps([*now, *fork_servers(server), *run_sandboxes(server), *spawn_helpers(*now)])
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(60) == 0
        assert wait_until(lambda: not _alive(everything), 15), \
            [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive(everything)]
    assert "Traceback" not in "".join(served.stderr)
    assert "killed by SIGKILL" in "".join(served.stderr)


def test_ctrl_c_stops_every_worker_and_sandbox(tmp_path):
    with serve(tmp_path, "--workers", "2") as served:
        server = served.proc.pid
        ids = [served.client.reset(task(i))[0] for i in range(4)]
        for env_id in ids:
            served.client.step(env_id, bash("sleep 300 & echo started"))
        workers = worker_processes(server)
        everything = _stamps([*workers, *fork_servers(server), *run_sandboxes(server), *spawn_helpers(*workers)])
        assert len(workers) == 2 and len(everything) > 10
        served.proc.send_signal(signal.SIGINT)
        assert served.proc.wait(60) == 0
        assert wait_until(lambda: not _alive(everything), 15), \
            [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive(everything)]
    assert "every sandbox closed" in "".join(served.stderr)


def test_a_negative_workers_count_says_what_is_allowed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    from lis_tui.cli import main

    assert main(["env", "serve", "--port", "0", "--workers", "-1"]) == 2
    assert "--workers 0 (one per 2 cores) or more" in capsys.readouterr().err
