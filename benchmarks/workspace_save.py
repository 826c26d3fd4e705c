"""What saving the work after every step costs a run in a workspace: 20-step runs (`lis_tui.run_task`,
a real sandbox) in a project of 1,000 and 100,000 files, the per-step save on and off, alternating.

    .venv/bin/python benchmarks/workspace_save.py [--files 1000 100000] [--runs 3] [--steps 20] [--model-ms 0]

Each step writes a new file and appends to an existing one (so each save holds one more file than the
last), against a scripted model server in a process of its own that answers at once (or after
--model-ms): the save, which runs beside the next model call, shows whenever the model answers
faster than the save, and its CPU (the patch's Python) contends with the agent's for the GIL. A
step's time runs from one StepStarted to the next (the model call, the command, the events and the
trajectory's rewrite, and any wait for the last save). The project is made once per size, in a
temporary folder (100,000 files: 500 folders of 200).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lis_tui.api import run_task  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402
from lis_tui.runs.autosave import WorkSaver  # noqa: E402

SERVER = """
import sys
sys.path[:0] = sys.argv[3:]
from fakes.openai_server import FakeOpenAI, call, delay, reply, submit
steps, latency = int(sys.argv[1]), float(sys.argv[2]) / 1000

def step(request):
    done = sum(1 for m in request.messages if m.get("role") == "assistant")
    if done >= steps:
        return submit()
    answer = reply(tool_calls=[call("execute_bash", {"command":
        f"echo {done} > /testbed/new_{done}.txt && echo {done} >> /testbed/d0/f0.txt"})])
    return delay(latency, answer) if latency else answer

with FakeOpenAI(default=step) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def make_project(where: Path, files: int) -> None:
    per = 200 if files >= 200 else files
    for d in range(max(files // per, 1)):
        folder = where / f"d{d}"
        folder.mkdir(parents=True)
        for f in range(per):
            (folder / f"f{f}.txt").write_text(f"{d} {f}\n")


def one_run(base_url: str, project: Path, out: Path, saving: bool) -> tuple[list[float], float, float]:
    """(each step's seconds, the run's wall seconds, the size of its changes.patch in KiB)."""
    WorkSaver.enabled = saving
    config = load_config(overrides={"model.base_url": base_url, "model.model": "m", "sandbox.rootfs": "host",
                                    "model.max_retries": 0}, env={}, paths=[])
    started = time.perf_counter()
    result = run_task("work", config=config, workspace=project, output_dir=out)
    wall = time.perf_counter() - started
    assert result.finish_reason == "submitted", result.message
    steps = json.loads((out / "trajectory.json").read_text())["steps"]
    return [s["duration"] for s in steps[:-1]], wall, (out / "changes.patch").stat().st_size / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--runs", type=int, default=3, help="runs of each setting, alternating")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--model-ms", type=float, default=0.0,
                        help="the scripted model's time to answer, in ms (default 0: at once)")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.steps), str(args.model_ms), str(ROOT),
                               str(ROOT / "tests")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="lis-save-bench-") as scratch:
            for files in args.files:
                project = Path(scratch) / f"p{files}"
                made = time.perf_counter()
                make_project(project, files)
                print(f"{files:,} files made in {time.perf_counter() - made:.1f}s", file=sys.stderr)
                seen: dict[bool, tuple[list, list, float]] = {True: ([], [], 0.0), False: ([], [], 0.0)}
                for run in range(args.runs):
                    for saving in (True, False) if run % 2 == 0 else (False, True):
                        out = Path(scratch) / f"run-{files}-{run}-{saving}"
                        steps, wall, patch = one_run(base_url, project, out, saving)
                        seen[saving][0].extend(steps)
                        seen[saving][1].append(wall)
                        seen[saving] = (seen[saving][0], seen[saving][1], patch)
                rows.append((files, seen))
    finally:
        WorkSaver.enabled = True
        server.stdin.close()
        server.wait(10)
    answers = f"a model that answers in {args.model_ms:g} ms" if args.model_ms else "a model that answers at once"
    print(f"\n{args.steps}-step runs, {answers}, {args.runs} of each setting (median of every step; median run)\n")
    print("| files | saving after each step | step p50 ms | step p90 ms | run s | step ratio on/off | patch KiB |")
    print("|---|---|---|---|---|---|---|")
    for files, seen in rows:
        off = statistics.median(seen[False][0])
        for saving in (False, True):
            steps, walls, patch = seen[saving]
            p50 = statistics.median(steps)
            p90 = statistics.quantiles(steps, n=10)[-1]
            ratio = f"{p50 / off:.2f}" if saving else "1.00"
            print(f"| {files:,} | {'on' if saving else 'off'} | {p50 * 1e3:.1f} | {p90 * 1e3:.1f} | "
                  f"{statistics.median(walls):.2f} | {ratio} | {patch:.0f} |")


if __name__ == "__main__":
    main()
