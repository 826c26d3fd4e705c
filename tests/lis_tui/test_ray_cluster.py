"""`bench --ray` / `rollout --ray` on a real two-node Ray cluster on this machine.

One cluster for the module (`ray.cluster_utils.Cluster`: a head and a second node, each its
own raylet with its own rootfs store). The driver (this process, or a `lis-tui` child) has a
tiny directory rootfs the nodes do not: it must reach them by content. Model: the scripted
OpenAI-compatible server on loopback, reached from the nodes' workers.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fakes.openai_server import FakeOpenAI, call, delay, reply, submit  # noqa: E402
from lis_tui.bench.runner import BenchOptions, BenchRunner  # noqa: E402
from lis_tui.bench.tasks import load_tasks  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402
from lis_tui.ray import RayOptions  # noqa: E402
from proctree import other_sandboxes  # noqa: E402

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[2]
MARKER = "made-on-the-driver-only"
BINARIES = ("bash", "sh", "cat", "ls", "tar", "mkdir", "rm", "env", "sleep", "true", "grep", "head")
NODE = {"num_cpus": 2, "object_store_memory": 100 << 20}
# Seconds, not the default minute, to call a killed node dead.
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}


def tiny_rootfs_tar(path: Path, marker: str = MARKER) -> Path:
    """A few host binaries and their libraries, and /etc/lis-marker: a rootfs of ~6 MB."""
    files = {}
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            files[f"usr/bin/{name}"] = os.path.realpath(found)
            libs = subprocess.run(["ldd", os.path.realpath(found)], capture_output=True, text=True)
            for lib in re.findall(r"(/\S+) \(0x", libs.stdout):
                files[re.sub(r"^(lib|lib64)/", r"usr/\1/", lib.lstrip("/"))] = os.path.realpath(lib)
    with tarfile.open(path, "w") as tar:
        for name in ("usr", "usr/bin", "usr/lib", "usr/lib64", "etc", "etc/apt", "tmp"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for link in ("bin", "lib", "lib64"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
        for arcname, source in sorted(files.items()):
            tar.add(source, arcname=arcname)
        info = tarfile.TarInfo("etc/lis-marker")
        info.size = len(marker)
        tar.addfile(info, io.BytesIO(marker.encode()))
    return path


class Env:
    """The module's cluster and the folders each part of it uses."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="lisray", dir="/tmp"))  # Ray's sockets: short
        self.scratch = self.base / "scratch"
        self.cluster = None

    def node_env(self, store: str) -> dict[str, str]:
        return {"RAY_TMPDIR": str(self.base), "LIS_SCRATCH": str(self.scratch),
                "LIS_DATA_HOME": str(self.base / store), "XDG_CONFIG_HOME": str(self.base / "cfg")}

    def add_node(self, store: str, extra_env: dict | None = None, **args):
        """A node whose processes see `store` as their data home (a raylet keeps the environment
        it started with, and its workers inherit it)."""
        saved = dict(os.environ)
        os.environ.update({**self.node_env(store), **(extra_env or {})})
        try:
            if self.cluster is None:
                from ray.cluster_utils import Cluster

                self.cluster = Cluster(initialize_head=True, head_node_args={
                    **NODE, "include_dashboard": False, "_system_config": FAST_HEALTH, **args})
                return self.cluster.head_node
            return self.cluster.add_node(**NODE, **args)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def sandbox_processes(self) -> list[str]:
        """The cluster's sandboxes' processes: every live sandbox's but this test process's own (no
        host path is in a sandbox's argv; its marker is)."""
        return [str(pid) for pid in other_sandboxes(os.getpid())]


@pytest.fixture(scope="module")
def env():
    env = Env()
    env.add_node("head")
    env.add_node("second")
    saved = dict(os.environ)
    os.environ.update(env.node_env("driver"))
    from isolation.rootfs import RootfsStore

    RootfsStore().import_tar("tiny", tiny_rootfs_tar(env.base / "tiny.tar"))
    try:
        yield env
    finally:
        os.environ.clear()
        os.environ.update(saved)
        env.cluster.shutdown()
        shutil.rmtree(env.base, ignore_errors=True)


@pytest.fixture(autouse=True)
def _driver_env(env, monkeypatch):
    for name, value in env.node_env("driver").items():
        monkeypatch.setenv(name, value)  # over conftest's per-test scratch: the nodes use ours


def write_tasks(path: Path, count: int, prefix: str = "t", marker: str = MARKER) -> Path:
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "problem_statement": f"Task {i}: "
                                        "read the marker.", "ground_truth": marker,
                                        "reward": "exact"}) + "\n" for i in range(count)))
    return path


def marker_model(seconds: float = 0.0):
    """Reads /etc/lis-marker into the answer (only the shipped rootfs has it), then submits."""
    def answer(request):
        if not request.tool_outputs:
            step = reply(tool_calls=[call("execute_bash", {
                "command": "cat /etc/lis-marker > /testbed/output/answer.txt"})])
        else:
            step = submit()
        return delay(seconds, step) if seconds else step
    return answer


def config_for(server):
    return load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0,
        "sandbox.rootfs": "tiny"})


def bench(env, server, tasks_file, out, progress=None, rootfs="tiny", **ray):
    from isolation import SandboxSpec

    options = RayOptions(address=env.cluster.address, cpus=0.5, **ray)
    runner = BenchRunner(load_tasks(tasks_file), config_for(server), SandboxSpec(rootfs=rootfs),
                         BenchOptions(output=out, progress=progress, ray=options))
    return runner, runner.run()


def keys(out: Path) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "results.jsonl").read_text().splitlines()
            if line.strip()]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def worker_folders() -> set[Path]:
    from lis_tui.ray.worker import SCRATCH_PREFIX

    return {p for parent in (Path("/dev/shm"), Path(tempfile.gettempdir()))
            for p in parent.glob(f"{SCRATCH_PREFIX}*")}


def test_episodes_spread_over_both_nodes_and_the_rootfs_reaches_each_by_content(env, tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 8)
    folders = worker_folders()
    with FakeOpenAI(default=marker_model(0.2)) as server:
        _, outcome = bench(env, server, tasks, tmp_path / "out")
    assert worker_folders() <= folders  # the workers' folders went with them
    assert not outcome.interrupted and len(outcome.results) == 8
    assert all(r["correct"] for r in outcome.results), outcome.results  # the shipped rootfs ran
    assert sorted(keys(tmp_path / "out")) == sorted(f"t{i}|sandbox|0" for i in range(8))
    assert len({r["node"] for r in outcome.results}) == 2
    for store in ("head", "second"):  # kept under its hash, imported by the safe import
        kept = list((env.base / store / "rootfs").glob("ray-*/root/etc/lis-marker"))
        assert [p.read_text() for p in kept] == [MARKER]
    trajectory = json.loads((tmp_path / "out" / outcome.results[0]["trajectory"]).read_text())
    assert trajectory["finish_reason"] == "submitted"  # each episode's folder came back
    assert env.sandbox_processes() == []

    # A second run moves nothing: the nodes find the rootfs under its hash.
    stamp = {p: p.stat().st_mtime for p in env.base.glob("*/rootfs/ray-*/meta.json")}
    with FakeOpenAI(default=marker_model()) as server:
        _, again = bench(env, server, write_tasks(tmp_path / "two.jsonl", 2), tmp_path / "two")
    assert all(r["correct"] for r in again.results)
    assert {p: p.stat().st_mtime for p in env.base.glob("*/rootfs/ray-*/meta.json")} == stamp


def test_a_node_gets_a_worker_process_per_worker_cpus(env, tmp_path):
    # Nodes of 2 CPUs, a worker per CPU: two workers on each, so a node's episodes' Python runs
    # in two processes (two GILs), as a many-core node's does with the default of 4.
    with FakeOpenAI(default=marker_model(0.5)) as server:
        _, outcome = bench(env, server, write_tasks(tmp_path / "tasks.jsonl", 8), tmp_path / "out",
                           worker_cpus=1)
    assert all(r["correct"] for r in outcome.results), outcome.results
    workers = {r["node"] for r in outcome.results}
    assert len(workers) == 4, workers
    assert {w.split(", worker ")[1] for w in workers} == {"1 of 2)", "2 of 2)"}
    assert len({w.split(", worker ")[0] for w in workers}) == 2  # two nodes
    assert env.sandbox_processes() == []


def test_a_node_killed_mid_run_loses_and_doubles_nothing(env, tmp_path):
    node = env.add_node("third")
    tasks = write_tasks(tmp_path / "tasks.jsonl", 16)
    progress = io.StringIO()
    with FakeOpenAI(default=marker_model(2.0)) as server:
        result = {}

        def go():
            result["outcome"] = bench(env, server, tasks, tmp_path / "out", progress=progress)[1]
        run = threading.Thread(target=go)
        run.start()
        # Kill the third node while its episodes run: some of them have begun their sandboxes.
        wait_for(lambda: "nodes 3" in progress.getvalue() and len(server.chat_requests) >= 12,
                 90, "episodes running on all three nodes")
        env.cluster.remove_node(node, allow_graceful=False)
        run.join(timeout=180)
    assert not run.is_alive()
    outcome = result["outcome"]
    assert "its episodes run again elsewhere" in progress.getvalue()
    assert sorted(keys(tmp_path / "out")) == sorted(f"t{i}|sandbox|0" for i in range(16))
    assert all(r["correct"] and not r["crashed"] for r in outcome.results)
    wait_for(lambda: env.sandbox_processes() == [], 30, "the dead node's sandboxes to go")


def bench_cli(env, tasks_file, server, out, *extra, ray=None):
    # Bare `--ray` finds the cluster by RAY_ADDRESS here. (Ray's own address file is no use with
    # several nodes on one machine: a driver that finds it makes actors that never start.)
    return subprocess.Popen(
        [sys.executable, "-m", "lis_tui.cli", "bench", str(tasks_file), "--output", str(out),
         "--base-url", server.base_url, "--model", "m", "--rootfs", "tiny",
         *(["--ray", ray] if ray else ["--ray"]), "--ray-cpus", "0.5", *extra],
        cwd=out.parent, env={**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": env.cluster.address},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_on_the_driver_leaves_no_sandbox_on_any_node(env, tmp_path, stop):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 8)
    with FakeOpenAI(default=marker_model(2.0)) as server:
        proc = bench_cli(env, tasks, server, tmp_path / "out", ray=env.cluster.address)
        wait_for(lambda: len(env.sandbox_processes()) >= 4 or proc.poll() is not None, 90,
                 "sandboxes on the nodes")
        proc.send_signal(stop)  # SIGTERM too: ray.init's own handler must not replace ours
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    assert env.sandbox_processes() == []  # gone before the driver returned, on every node


def test_resume_after_the_driver_is_killed_runs_each_episode_once(env, tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 10)
    out = tmp_path / "out"
    with FakeOpenAI(default=marker_model(0.3)) as server:
        proc = bench_cli(env, tasks, server, out, ray=env.cluster.address)
        results = out / "results.jsonl"
        wait_for(lambda: results.exists() and len(results.read_text().splitlines()) >= 2, 90,
                 "two results")
        proc.kill()  # no chance to clean up: the cluster ends the job's workers
        proc.wait()
        first = keys(out)
        assert 2 <= len(first) < 10
        try:
            # Ray ends a dead owner's actors (its workers), and their sandboxes die with them; how
            # soon is Ray's: once, on a loaded CI machine, it took more than a minute.
            wait_for(lambda: env.sandbox_processes() == [], 150, "the killed driver's sandboxes to go")
        except AssertionError:
            left = env.sandbox_processes()
            tree = subprocess.run(["ps", "-o", "pid,ppid,stat,etimes,cmd", "-p", ",".join(left) or "1",
                                   "--ppid", ",".join(left) or "1"], capture_output=True, text=True)
            workers = subprocess.run(["pgrep", "-af", "ray::"], capture_output=True, text=True)
            raise AssertionError(f"left: {tree.stdout}\nray workers: {workers.stdout}") from None
        resumed = bench_cli(env, tasks, server, out, "--resume")
        table, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    final = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    assert sorted(r["key"] for r in final) == sorted(f"t{i}|sandbox|0" for i in range(10))
    assert all(r["correct"] for r in final)
    assert "[10/10]" in err and "nodes 2" in err
    assert "(n=10)" in table and (out / "report.html").exists()


def test_doctor_over_the_cluster_prints_one_row_per_node(env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lis_tui.cli", "doctor", "--ray",
                           env.cluster.address], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.search(r"node [0-9a-f]{8}\)", line)]
    assert len(rows) >= 2 and all(" work " in row for row in rows), proc.stdout
    assert f"sandboxes work on {len(rows)} of {len(rows)} node(s)." in proc.stdout


def test_a_node_where_sandboxes_cannot_run_is_named_and_skipped(env, tmp_path):
    broken = env.add_node("broken", extra_env={"LIS_BWRAP": "/bin/false"})
    try:
        progress = io.StringIO()
        with FakeOpenAI(default=marker_model()) as server:
            _, outcome = bench(env, server, write_tasks(tmp_path / "tasks.jsonl", 6),
                               tmp_path / "out", progress=progress)
    finally:
        env.cluster.remove_node(broken, allow_graceful=False)
    said = progress.getvalue()
    assert re.search(r"node \S+ \([\d.]+, node [0-9a-f]{8}\) skipped: .*bwrap", said), said
    assert "nodes 2, 1 skipped" in said
    assert re.search(r"running [1-9]", said), said  # episodes on the nodes count as running
    assert len(outcome.results) == 6 and all(r["correct"] for r in outcome.results)
    skipped = re.search(r"node [0-9a-f]{8}\) skipped", said).group(0)[5:13]
    assert all(skipped not in r["node"] for r in outcome.results)


def test_rollout_on_the_cluster_writes_groups_with_advantages(env, tmp_path):
    from isolation import SandboxSpec
    from lis_tui.rl.runner import rollout

    tasks = load_tasks(write_tasks(tmp_path / "tasks.jsonl", 2))
    with FakeOpenAI(default=marker_model()) as server:
        config = config_for(server)
        outcome = rollout(tasks, policy_url=server.base_url, model="m", n=4, config=config,
                          spec=SandboxSpec(rootfs="tiny"), output=tmp_path / "out",
                          token_ids=False, progress=None,
                          ray=RayOptions(address=env.cluster.address, cpus=0.5))
    assert not outcome.incomplete and len(outcome.groups) == 2 and len(outcome.episodes) == 8
    lines = [json.loads(x) for x in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in lines) == sorted(f"t{t}|sandbox|{s}" for t in range(2)
                                                     for s in range(4))
    assert all(r["messages"] and r["reward"] == 1.0 for r in lines)  # trajectories came back
    assert {len(r["turns"]) for r in lines} == {2}  # what the server sent, recorded on the node


def test_rootfs_dir_carries_the_rootfs_through_a_shared_folder(env, tmp_path):
    from isolation.rootfs import RootfsStore

    RootfsStore().import_tar("tiny2", tiny_rootfs_tar(tmp_path / "t2.tar", "the-second-one"))
    shared = tmp_path / "shared"
    with FakeOpenAI(default=marker_model()) as server:
        _, outcome = bench(env, server, write_tasks(tmp_path / "t.jsonl", 4, marker="the-second-one"),
                           tmp_path / "out", rootfs="tiny2", rootfs_dir=shared)
    assert all(r["correct"] for r in outcome.results)
    [tarball] = shared.glob("*.tar")
    for store in ("head", "second"):
        assert (env.base / store / "rootfs" / f"ray-{tarball.stem[:16]}" / "root" / "etc" /
                "lis-marker").read_text() == "the-second-one"


def test_a_task_folder_on_the_driver_travels_with_its_episode(env, tmp_path):
    rows = []
    for i in range(4):
        folder = tmp_path / "inputs" / f"f{i}"
        (folder / "deep").mkdir(parents=True)
        (folder / "deep" / "secret.txt").write_text(f"only-on-the-driver-{i}")
        rows.append({"id": f"f{i}", "problem_statement": "Copy the secret.", "reward": "exact",
                     "ground_truth": f"only-on-the-driver-{i}", "input_dir": f"inputs/f{i}",
                     "input_files": {"note.txt": "inline too"}})
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def model(request):
        if request.tool_outputs:
            return submit()
        return reply(tool_calls=[call("execute_bash", {"command": (
            "cat /testbed/input/note.txt >&2; "
            "cat /testbed/input/deep/secret.txt > /testbed/output/answer.txt")})])
    with FakeOpenAI(default=model) as server:
        _, outcome = bench(env, server, tmp_path / "tasks.jsonl", tmp_path / "out")
    assert sorted(r["answer"] for r in outcome.results) == [f"only-on-the-driver-{i}" for i in range(4)]
    assert all(r["correct"] for r in outcome.results)
    outputs = [t for r in server.chat_requests for t in r.tool_outputs]
    assert len(outputs) == 4 and all("inline too" in t for t in outputs)  # inline files too


def test_a_dead_workers_folder_goes_with_the_next_worker_and_a_live_ones_stays():
    from lis_tui.ray.worker import _own_scratch

    made = "import sys; from lis_tui.ray.worker import _own_scratch; print(_own_scratch()[0])"
    child = {**os.environ, "PYTHONPATH": str(ROOT)}
    dead = Path(subprocess.run([sys.executable, "-c", made], capture_output=True, text=True,
                               env=child, check=True).stdout.strip())
    assert dead.is_dir() and (dead / ".lock").is_file()  # its worker died without close()
    (dead / "episodes").mkdir()
    live = subprocess.Popen([sys.executable, "-c", made + "; sys.stdout.flush(); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child)
    try:
        alive = Path(live.stdout.readline().strip())
        mine, lock = _own_scratch()
        try:
            assert not dead.exists()
            assert alive.is_dir() and mine.is_dir()
            if os.access("/dev/shm", os.W_OK):
                assert mine.parent == Path("/dev/shm")  # in RAM: no file system churn
        finally:
            shutil.rmtree(mine)
            os.close(lock)
    finally:
        live.stdin.close()
        live.wait()
        shutil.rmtree(alive, ignore_errors=True)


def test_a_node_keeps_the_copies_used_last_and_never_removes_one_in_use(tmp_path, monkeypatch):
    import hashlib

    from isolation.rootfs import RootfsStore
    from lis_tui.ray.parcel import KEEP_COPIES

    monkeypatch.setenv("LIS_DATA_HOME", str(tmp_path / "node"))
    parcels = []
    for i in range(KEEP_COPIES + 2):  # a rootfs that changed five times
        tar = tiny_rootfs_tar(tmp_path / f"r{i}.tar", marker=f"version-{i}")
        parcels.append([hashlib.sha256(tar.read_bytes()).hexdigest(), f"r{i}", str(tar)])
    use = ("import sys; from lis_tui.ray.parcel import RootfsParcel, unpack_rootfs\n"
           "print(unpack_rootfs(RootfsParcel(sys.argv[1], sys.argv[2], path=sys.argv[3]), None), flush=True)\n"
           "sys.stdin.read()\n")  # a worker: holds its copy until it ends
    child = {**os.environ, "PYTHONPATH": str(ROOT)}

    def worker(parcel, stay=False):
        proc = subprocess.Popen([sys.executable, "-c", use, *parcel], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=child)
        assert proc.stdout.readline().strip().endswith("/root")
        if not stay:
            proc.stdin.close()
            assert proc.wait(60) == 0
        return proc

    def kept():
        return sorted(r.path.joinpath("etc", "lis-marker").read_text()
                      for r in RootfsStore().list() if r.name.startswith("ray-"))

    live = worker(parcels[0], stay=True)  # the oldest copy, in use all along
    for parcel in parcels[1:]:
        worker(parcel)
    assert kept() == ["version-0", "version-2", "version-3", "version-4"]  # 1 went, 0 is in use
    live.stdin.close()
    live.wait(60)
    worker(parcels[4])
    assert kept() == ["version-2", "version-3", "version-4"]
