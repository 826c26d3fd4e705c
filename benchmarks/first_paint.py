"""How long until the person sees something: `lis-tui --version`, the CPU that `import lis_tui.app.tui`
costs, and the app's first frame (launch until tmux's capture-pane shows the welcome), in wall time
and in the app's own CPU time by then: on a loaded machine the wall time is mostly waiting for a
core, and the CPU time is what an idle one would take.

    .venv/bin/python benchmarks/first_paint.py [--runs 9] [--old /tmp/old]

Baseline, measured in the same run, alternating with this tree run by run: the tree --old names,
e.g. before a change (`git worktree add --detach /tmp/old main && cd /tmp/old && ./install.sh`;
the first lazy imports were measured against f1c1c41), each tree with its own venv. The app is given a model and a base URL nothing listens on, so no setup screen opens
and nothing is asked of a server; config and state go to a temporary folder. Needs tmux.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WELCOME = "Type a task"


def python_of(tree: Path) -> str:
    return str(tree / ".venv" / "bin" / "python")


def env_for(tree: Path, home: Path) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE off: a person's install keeps its .pyc files, and so do both trees here
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL",
                                                             "COLUMNS", "LINES", "PYTHONPATH",
                                                             "PYTHONDONTWRITEBYTECODE", "TMUX")}
    return {**env, "XDG_CONFIG_HOME": str(home / "config"), "XDG_STATE_HOME": str(home / "state"),
            "TERM": "xterm-256color", "PYTHONPATH": str(tree)}


def time_version(tree: Path, home: Path) -> float:
    start = time.perf_counter()
    subprocess.run([python_of(tree), "-m", "lis_tui.cli", "--version"], check=True, capture_output=True,
                   env=env_for(tree, home), cwd=home)
    return time.perf_counter() - start


def import_cpu(tree: Path, home: Path) -> float:
    """CPU seconds (user + system) of importing the app in a fresh interpreter: `lis_tui.app.tui`,
    or in a tree from before the packages (issue 39) `lis_tui.app`, the same module then."""
    code = ("import importlib.util, time; t = time.process_time()\n"
            "name = 'lis_tui.app.tui' if importlib.util.find_spec('lis_tui.app').submodule_search_locations "
            "else 'lis_tui.app'\n"
            "importlib.import_module(name); print(time.process_time() - t)")
    done = subprocess.run([python_of(tree), "-c", code], check=True, capture_output=True, text=True,
                          env=env_for(tree, home), cwd=home)
    return float(done.stdout)


_panes = iter(range(1 << 30))


def time_first_frame(tree: Path, home: Path, size: tuple[int, int]) -> tuple[float, float]:
    """Seconds from starting the app in a fresh tmux pane (a tmux server of its own) until the
    welcome is on the screen, and the CPU seconds the app had used by then (what the wall time
    would be on an idle machine, give or take the terminal's share)."""
    name = f"lis-first-paint-{os.getpid()}-{next(_panes)}"
    env = env_for(tree, home)
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    argv = [python_of(tree), "-m", "lis_tui.cli", "tui", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    # exec: the pane's process is the app itself, whose CPU time /proc/PID/stat then gives
    command = f"cd {shlex.quote(str(home))} && exec env -i {exports} {shlex.join(argv)}"
    tmux = ["tmux", "-L", name]
    start = time.perf_counter()
    started = subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(size[0]),
                              "-y", str(size[1]), command], capture_output=True, text=True)
    if started.returncode:
        raise RuntimeError(f"tmux did not start: {started.stderr}")
    try:
        pid = subprocess.run([*tmux, "display-message", "-p", "-t", "t", "#{pane_pid}"], capture_output=True,
                             text=True).stdout.strip()
        while True:
            shown = subprocess.run([*tmux, "capture-pane", "-p", "-t", "t"], capture_output=True,
                                   text=True).stdout
            if WELCOME in shown:
                wall = time.perf_counter() - start
                return wall, cpu_seconds(pid)
            if time.perf_counter() - start > 60:
                raise RuntimeError(f"no welcome after 60 s:\n{shown}")
            time.sleep(0.01)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def cpu_seconds(pid: str) -> float:
    """User and system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--old", default="/tmp/old", help="the baseline tree, with its own .venv")
    args = parser.parse_args()
    trees = {"before": Path(args.old), "now": ROOT}  # before: whichever tree --old names
    for tree in trees.values():
        if not Path(python_of(tree)).exists():
            sys.exit(f"no venv in {tree}: run ./install.sh there (see this file's docstring)")
    if shutil.which("tmux") is None:
        sys.exit("first_paint needs tmux")
    probes = {("lis-tui --version (s)",): lambda t, h: (time_version(t, h),),
              ("import lis_tui.app.tui (CPU s)",): lambda t, h: (import_cpu(t, h),)}
    for width, height in ((80, 24), (120, 35)):
        probes[(f"first frame {width}x{height} (s)", f"first frame {width}x{height} (CPU s)")] = \
            lambda t, h, size=(width, height): time_first_frame(t, h, size)
    rows = [measure for names in probes for measure in names]
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lis-first-paint-") as tmp:
        home = Path(tmp)
        for names, fn in probes.items():
            for tree in trees.values():  # warm the page cache and the bytecode once, unmeasured
                fn(tree, home)
            for _ in range(args.runs):
                for label, tree in trees.items():  # alternating, so load hits both alike
                    for measure, value in zip(names, fn(tree, home)):
                        results.setdefault((measure, label), []).append(value)
    print(f"median of {args.runs} runs, this machine ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"| {'measure':<30} | {'before':>8} | {'now':>8} | {'now/before':>10} |")
    print(f"|{'-' * 32}|{'-' * 10}|{'-' * 10}|{'-' * 12}|")
    for measure in rows:
        old, new = (statistics.median(results[(measure, label)]) for label in trees)
        print(f"| {measure:<30} | {old:>8.3f} | {new:>8.3f} | {new / old:>10.2f} |")


if __name__ == "__main__":
    main()
