"""Episodes in local worker processes (`--workers N`): the same results as one process, and a
worker killed with SIGKILL loses nothing and leaves nothing running."""
from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, reply
from lis_tui.bench.runner import BenchOptions, BenchRunner
from lis_tui.bench.tasks import Task
from lis_tui.bench.workers.pool import default_workers
from lis_tui.config.settings import load_config
from lis_tui.rl import rollout
from proctree import sandbox_processes, worker_processes

pytestmark = pytest.mark.sandbox


def config_for(server):
    return load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0})


def one_step(request):
    """Write the number the task asks for (from its text), in one command, and submit (the call
    ids fixed: the server's own count would differ with the order episodes run in)."""
    task = next(m["content"] for m in request.messages if m["role"] == "user")
    number = task.split("number ", 1)[1].split(".", 1)[0]
    if request.tool_outputs:
        return reply(tool_calls=[call("submit", {}, id=f"call_s{number}")])
    return reply("Writing.", [call("execute_bash", {
        "command": f"cat /testbed/documents/* 2>/dev/null; echo {number} > /testbed/output/answer.txt"},
        id=f"call_c{number}")])


def number_tasks(tmp_path, count):
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "note.txt").write_text("a host folder the worker reads where it is\n")
    tasks = [Task(f"n{i}", f"Write the number {i}. (task n{i})", str(i), reward="numeric",
                  documents_dir=docs if i == 1 else None) for i in range(count)]
    gone = tmp_path / "gone"  # staging a folder that is not there crashes inside the episode
    tasks.append(Task("crash", "Write the number 9. (task crash)", "9", documents_dir=gone))
    return tasks


def unstamped(path: Path) -> list[dict]:
    """The records of a results file by key, without what differs run to run (times)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(({k: v for k, v in r.items() if k not in ("wall_time",)} for r in records),
                  key=lambda r: r["key"])


def trajectory(out: Path, record: dict) -> dict:
    doc = json.loads((out / record["trajectory"]).read_text())
    doc = {k: v for k, v in doc.items() if k not in ("created", "updated", "duration")}
    for step in doc.get("steps", []):
        for key in ("started", "duration", "model_duration"):
            step.pop(key, None)
        for tool_call in step.get("tool_calls", []):
            tool_call.pop("duration", None)
    return doc


def test_workers_give_the_single_process_results_bench_and_rollout(tmp_path):
    tasks = number_tasks(tmp_path, 4)
    shown = io.StringIO()
    with FakeOpenAI(default=one_step) as server:
        for workers in (1, 2):
            out = tmp_path / f"bench{workers}"
            BenchRunner(tasks, config_for(server), None, BenchOptions(
                output=out, concurrency=4, workers=workers,
                progress=shown if workers == 2 else None)).run()
            rollout(tasks[:2], policy_url=server.base_url, model="m", n=2, output=tmp_path / f"rl{workers}",
                    config=config_for(server), concurrency=4, workers=workers, progress=None)
    assert "workers 2" in shown.getvalue()  # the second run did use two processes
    one, two = unstamped(tmp_path / "bench1/results.jsonl"), unstamped(tmp_path / "bench2/results.jsonl")
    assert one == two and len(one) == 5
    assert [r["correct"] for r in one] == [False, True, True, True, True]  # crash first by key
    assert one[0]["crashed"] and "FileNotFoundError" in one[0]["message"]
    for run in ("bench1", "bench2"):
        error = (tmp_path / run / "episodes/crash.sandbox.0/error.txt").read_text()
        assert "Traceback" in error  # the worker's episode keeps its trace too
    for record in one:
        assert trajectory(tmp_path / "bench1", record) == trajectory(tmp_path / "bench2", record)
    train = [unstamped(tmp_path / f"rl{w}/train.jsonl") for w in (1, 2)]
    assert train[0] == train[1] and len(train[0]) == 4
    assert all(r["messages"] and r["sequence"] for r in train[0])


def test_default_workers_follow_the_cores_and_the_concurrency():
    assert default_workers(32, cores=2) == 1
    assert default_workers(32, cores=16) == 8
    assert default_workers(3, cores=16) == 3
    assert default_workers(1, cores=1) == 1


def _alive(pids: dict[int, str]) -> list[int]:
    """The pids still running the process they were (start time checked: pids are reused)."""
    live = []
    for pid, stamp in pids.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[19] == stamp and stat[0] != "Z":
            live.append(pid)
    return live


def _stamps(pids: list[int]) -> dict[int, str]:
    stamps = {}
    for pid in pids:
        try:
            stamps[pid] = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            pass
    return stamps


def test_a_worker_killed_mid_run_loses_nothing_leaves_nothing_and_resume_completes(tmp_path):
    tasks = [t for t in number_tasks(tmp_path, 6) if t.id != "crash"]
    arrived, go = [], threading.Event()

    def held(request):  # every episode's first call waits until the test has killed workers
        if not request.tool_outputs:
            arrived.append(1)
            go.wait(60)
        return one_step(request)

    me, killed, known, result = os.getpid(), {}, set(), {}

    def kill_one_worker(seen: int) -> None:
        """Once `seen` first calls arrived, SIGKILL a worker not seen at the last kill."""
        deadline = time.monotonic() + 60
        while len(arrived) < seen and time.monotonic() < deadline:
            time.sleep(0.02)
        victim = next(p for p in worker_processes(me) if p not in known)
        known.update(worker_processes(me))
        killed[victim] = _stamps([victim, *sandbox_processes(victim)])
        os.kill(victim, signal.SIGKILL)

    with FakeOpenAI(default=held) as server:
        runner = BenchRunner(tasks, config_for(server), None, BenchOptions(
            output=tmp_path / "out", concurrency=2, workers=2, progress=None))
        thread = threading.Thread(target=lambda: result.update(outcome=runner.run()))
        thread.start()
        kill_one_worker(2)  # each worker runs one episode (one queued behind it, two more here)
        kill_one_worker(3)  # the new worker took the dead one's episodes: this one dies too
        go.set()
        thread.join(120)
        assert not thread.is_alive()
        outcome = result["outcome"]
        assert len(outcome.results) == 6 and not outcome.interrupted  # none lost
        crashed = [r for r in outcome.results if r["crashed"]]
        assert crashed and all("lost 2 times" in r["message"] for r in crashed)
        assert all(r["correct"] for r in outcome.results if not r["crashed"])
        assert not worker_processes(me)  # no worker left, and no sandbox of the killed ones
        # A dead worker's sandboxes end with it (their pid 1 reads its pipe; its spawn helper
        # kills the rest), in bounded time, not in the same instant.
        stamps = {p: s for found in killed.values() for p, s in found.items()}
        deadline = time.monotonic() + 15
        while _alive(stamps) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive(stamps)]
        assert len(killed) == 2 and all(len(stamps) > 1 for stamps in killed.values())

        again = BenchRunner(tasks, config_for(server), None, BenchOptions(
            output=tmp_path / "out", concurrency=2, workers=2, progress=None, resume=True)).run()
    assert again.ran == len(crashed) and len(again.results) == 6
    assert all(r["correct"] for r in again.results)


def test_workers_flag_errors_name_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    from lis_tui.cli import main

    for args, said in ((["--workers", "2", "--ray", "auto"], "--workers goes without --ray"),
                       (["--workers", "-1"], "workers")):
        assert main(["bench", "demo", "--output", str(tmp_path / "o"), *args]) == 2
        assert said in capsys.readouterr().err
