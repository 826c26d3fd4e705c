"""Without --ray nothing imports Ray; without Ray installed, --ray names the install line."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_bench_and_rollout_import_no_ray_without_the_flag():
    done = python(
        "import sys\n"
        "from lis_tui.cli import build_parser\n"
        "from lis_tui.bench.runner import BenchRunner\n"
        "from lis_tui.rl.runner import RolloutRunner\n"
        "p = build_parser()\n"
        "for argv in (['bench', 'demo'], ['rollout', 'demo', '--policy-url', 'u', '--output', 'o']):\n"
        "    p.parse_args(argv)\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_only_the_ray_package_imports_ray():
    import ast

    def imports_ray(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n and n.split(".")[0] == "ray" for n in names):
                return True
        return False
    found = {str(p.relative_to(ROOT)) for package in ("lis_tui", "isolation", "tools")
             for p in (ROOT / package).rglob("*.py") if imports_ray(p)}
    assert found and all(p.startswith("lis_tui/ray/") for p in found), found


def test_ray_flags_without_ray_and_a_missing_ray_say_what_to_do(tmp_path):
    with FakeOpenAI() as server:
        common = ["bench", "demo", "--base-url", server.base_url, "--model", "m", "--output",
                  str(tmp_path / "out")]
        code = ("import sys; sys.modules['ray'] = None  # as if Ray were not installed\n"
                "from lis_tui.cli import main\n"
                f"sys.exit(main({common!r} + sys.argv[1:]))\n")
        cpus = subprocess.run([sys.executable, "-c", code, "--ray-cpus", "2"], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        missing = subprocess.run([sys.executable, "-c", code, "--ray"], capture_output=True,
                                 text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cpus.returncode == 2 and "--ray-cpus go with --ray" in cpus.stderr
    assert missing.returncode == 1, missing.stderr
    assert "./install.sh --ray" in missing.stderr and "-m pip install " in missing.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists() or \
        (tmp_path / "out" / "results.jsonl").read_text() == ""


def test_doctor_over_a_cluster_that_is_not_there_says_how_to_start_one(tmp_path):
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-m", "lis_tui.cli", "doctor", "--ray"], text=True,
                          capture_output=True, timeout=120,
                          env={**env, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(tmp_path)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no Ray cluster of yours on this machine or at RAY_ADDRESS" in done.stderr
    assert "ray start --head" in done.stderr


def test_a_task_file_after_a_bare_ray_is_named_not_taken_for_an_address(capsys):
    from lis_tui.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--ray", "tasks.jsonl", "--model", "m"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "'tasks.jsonl' is not a Ray address" in err and "give TASKS before --ray" in err
    from lis_tui.cli import build_parser  # `bench TASKS --ray` and `--ray HOST:PORT` parse as before

    for argv in (["bench", "t.jsonl", "--ray"], ["bench", "--ray", "10.0.0.1:6379", "t.jsonl"]):
        args = build_parser().parse_args(argv)
        assert args.tasks == "t.jsonl" and args.ray in ("auto", "10.0.0.1:6379")


@pytest.mark.parametrize("cpus, episode, worker, shares", [
    (2, 0.25, 4, [8]),             # a small node: one worker
    (8, 0.25, 4, [16, 16]),        # a worker per 4 CPUs
    (6, 0.5, 4, [6, 6]),           # 1.5 workers' worth rounds up
    (5, 0.5, 4, [10]),             # 1.25 rounds down
    (64, 0.25, 4, [16] * 16),
    (3, 1, 4, [3]),
    (4, 1, 1, [1, 1, 1, 1]),
    (2, 1, 0.5, [1, 1]),           # never more workers than slots
    (7, 0.5, 2, [4, 4, 3, 3]),     # the slots shared out evenly
    (1, 2, 4, []),                 # not one episode fits
])
def test_a_node_gets_a_worker_per_worker_cpus_with_its_slots_shared_out(cpus, episode, worker, shares):
    pytest.importorskip("ray")
    from lis_tui.ray.cluster import worker_slots

    assert worker_slots(cpus, episode, worker) == shares


def test_ray_worker_cpus_is_checked():
    from lis_tui.cli import build_parser
    from lis_tui.ray.cli import ray_from_args

    parse = build_parser().parse_args
    assert ray_from_args(parse(["bench", "t.jsonl", "--ray", "--ray-worker-cpus", "2"])).worker_cpus == 2
    with pytest.raises(ValueError, match="--ray-worker-cpus must be more than 0"):
        ray_from_args(parse(["bench", "t.jsonl", "--ray", "--ray-worker-cpus", "0"]))
    with pytest.raises(ValueError, match="--ray-worker-cpus go with --ray"):
        ray_from_args(parse(["bench", "t.jsonl", "--ray-worker-cpus", "2"]))
