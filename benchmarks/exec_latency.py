"""`lis-tui exec -- true` from a shell, against raw bwrap and the peer wrappers; prints a table.

    .venv/bin/python benchmarks/exec_latency.py [--runs 60] [--peers DIR] [--against TREE]

Each round runs every command once, in an order that turns round by round, so all of them see
the same load; the table gives medians. The commands:

- raw bwrap: `bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp
  --die-with-parent --new-session -- bash -c true`, with the bwrap lis-tui uses (isolation/bwrap.py);
- `python -c pass` and `python -I -S -c pass`: the interpreter's own start, with and without site;
- `lis-tui --version`: the interpreter and the entry point, no sandbox;
- `lis-tui exec -- true` of this tree (and of TREE with --against): what a script, a hook or a
  Makefile pays per command. `lis-tui` here is the code of the console script pip writes, run with
  `python -c` and the tree on PYTHONPATH (`python -m lis_tui.cli` pays runpy's imports on top);
- `codex sandbox -- true` (OpenAI's Codex CLI, `npm install @openai/codex@0.169.0`) and `srt -c true`
  (Anthropic's sandbox-runtime, `npm install @anthropic-ai/sandbox-runtime`, with apt's bubblewrap,
  socat and ripgrep), where found: on PATH, or in --peers DIR (an npm folder's node_modules/.bin).
  They are never part of this repository.

A second table says where `lis-tui exec -- true`'s time goes, from one more instrumented run per
round: the interpreter's start, the time until the spawn helper starts (the entry point, the
parser, the first of the sandbox's imports), until bwrap first runs (the rest of the imports, the
config; bwrap's version probe opens a sandbox's first start), the sandbox (its start, `true`, its
close), and the exit. Its marks come from an audit hook (each Popen) and CLOCK_MONOTONIC, which
this process and the child share; the code under test is not changed.

The trees' bytecode is compiled first where this user may write it (PYTHONDONTWRITEBYTECODE, which
the CI sets, would otherwise have every run compile every module from source); where it may not
and a module's bytecode is missing or stale, the script says so, since that figure is not the
one users see.
"""
from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolation import bwrap  # noqa: E402

PACKAGES = ("lis_tui", "isolation", "tools")
CONSOLE_SCRIPT = ("import re, sys\nfrom lis_tui.cli import main\n"
                  "sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\nsys.exit(main())")
"""What pip's `lis-tui` script runs (its template), for a tree that is not the installed one."""
PHASED_SCRIPT = """import os, sys, time
marks = [("python", time.monotonic())]
def popen(event, args):
    if event == "subprocess.Popen" and len(marks) < 10:
        marks.append((os.path.basename(str(args[0] or args[1][0])), time.monotonic()))
sys.addaudithook(popen)
from lis_tui.cli import main
try:
    code = main()
finally:
    marks.append(("main", time.monotonic()))
    import atexit
    atexit.register(lambda: os.write(2, ("MARKS " + repr(marks) + "\\n").encode()))  # the first exit handler
sys.exit(code)
"""
PHASES = ("interpreter start, to its first line", "until the spawn helper starts: entry point, parser, isolation's "
          "first imports", "until bwrap first runs: the sandbox's imports, the config",
          "the sandbox: bwrap found, start, `true`, close", "exit: exit handlers, the interpreter's end")


def raw_bwrap() -> list[str]:
    """The sandbox a person would write by hand for the same protection (issue 54)."""
    return [bwrap.find_bwrap().path, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--die-with-parent", "--new-session", "--", "bash", "-c", "true"]


def stale_bytecode(tree: Path) -> list[str]:
    """The tree's modules whose cached bytecode is missing or older than their source."""
    stale = []
    for package in PACKAGES:
        for source in (tree / package).rglob("*.py"):
            cached = Path(importlib.util.cache_from_source(str(source)))
            if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
                stale.append(str(source.relative_to(tree)))
    return stale


def compile_tree(tree: Path) -> None:
    for package in PACKAGES:
        if os.access(tree / package, os.W_OK):
            compileall.compile_dir(tree / package, quiet=1)
    stale = stale_bytecode(tree)
    if stale:
        print(f"note: {len(stale)} modules of {tree} have no up-to-date bytecode ({stale[0]}, ...) and this "
              f"user may not write it: those runs compile them each time. Run the script once as the "
              f"tree's owner first.", file=sys.stderr)


def tree_env(tree: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def peer(name: str, peers: Path | None) -> str | None:
    if peers is not None and (peers / name).exists():
        return str(peers / name)
    return shutil.which(name)


def commands(args: argparse.Namespace) -> list[tuple[str, list[str], dict[str, str] | None]]:
    """(label, argv, environment) of each command to time; None: this process's environment."""
    python = sys.executable
    rows: list[tuple[str, list[str], dict[str, str] | None]] = [
        ("raw bwrap (by hand, baseline)", raw_bwrap(), None),
        ("`python -I -S -c pass`", [python, "-I", "-S", "-c", "pass"], None),
        ("`python -c pass`", [python, "-c", "pass"], tree_env(ROOT)),
        ("`lis-tui --version`", [python, "-c", CONSOLE_SCRIPT, "--version"], tree_env(ROOT)),
    ]
    exec_true = [python, "-c", CONSOLE_SCRIPT, "exec", "--", "true"]
    if args.against is not None:
        rows.append((f"`lis-tui exec -- true`, {args.against}", exec_true, tree_env(args.against)))
    rows.append(("`lis-tui exec -- true`, this tree", exec_true, tree_env(ROOT)))
    codex, srt = peer("codex", args.peers), peer("srt", args.peers)
    if codex:
        rows.append(("`codex sandbox -- true`", [codex, "sandbox", "--", "true"], None))
    else:
        print("codex not found: npm install @openai/codex@0.169.0 in a scratch folder, then --peers "
              "FOLDER/node_modules/.bin", file=sys.stderr)
    if srt:
        rows.append(("`srt -c true`", [srt, "-c", "true"], None))
    else:
        print("srt not found: npm install @anthropic-ai/sandbox-runtime (needs bubblewrap, socat, ripgrep), "
              "then --peers FOLDER/node_modules/.bin", file=sys.stderr)
    return rows


def run_once(argv: list[str], env: dict[str, str] | None, cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-500:]}")
    return took


def run_phased(env: dict[str, str], cwd: Path) -> list[float]:
    """Seconds of each of PHASES in one `lis-tui exec -- true`."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PHASED_SCRIPT, "exec", "--", "true"], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.monotonic()
    line = next((line for line in done.stderr.splitlines() if line.startswith("MARKS ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"the instrumented exec failed ({done.returncode}): {done.stderr[-500:]}")
    marks = eval(line[6:])  # noqa: S307 (our own child's repr of a list of (str, float))
    helper = next(t for name, t in marks[1:] if name.startswith("python"))  # the spawn helper's Popen
    bwrap_at = next(t for name, t in marks if name == "bwrap")
    points = [start, marks[0][1], helper, bwrap_at, marks[-1][1], end]
    return [after - before for before, after in zip(points, points[1:])]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=60, help="rounds; each runs every command once")
    parser.add_argument("--peers", type=Path, help="a folder holding `codex` and `srt` (node_modules/.bin)")
    parser.add_argument("--against", type=Path, help="another checkout's `lis-tui exec -- true` too, e.g. main")
    args = parser.parse_args()
    for tree in (ROOT, args.against):
        if tree is not None:
            compile_tree(tree)
    rows = commands(args)
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))  # not a project folder: nothing reads it
    for _, argv, env in rows * 2:  # warm-up: page cache, bwrap's probe, the sweep
        run_once(argv, env, scratch)
    times: list[list[float]] = [[] for _ in rows]
    phased: list[list[float]] = []
    for round_ in range(args.runs):
        shift = round_ % len(rows)
        for index in list(range(len(rows)))[shift:] + list(range(len(rows)))[:shift]:
            times[index].append(run_once(rows[index][1], rows[index][2], scratch))
        phased.append(run_phased(tree_env(ROOT), scratch))
    base = median(times[0])
    print(f"\n`exec -- true` from a shell, {args.runs} rounds, {os.cpu_count()} cores, uid {os.getuid()}, load "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print("| command | median ms | p90 ms | vs raw bwrap |\n|---|---|---|---|")
    for (label, _, _), values in zip(rows, times):
        p90 = sorted(values)[min(len(values) - 1, int(len(values) * 0.9))]
        print(f"| {label} | {median(values) * 1000:.1f} | {p90 * 1000:.1f} | {median(values) / base:.2f} |")
    print("\n| where this tree's `lis-tui exec -- true` goes (one more run per round) | median ms |\n|---|---|")
    for phase, values in zip(PHASES, zip(*phased)):
        print(f"| {phase} | {median(list(values)) * 1000:.1f} |")
    print(f"| sum of the medians | {sum(median(list(v)) for v in zip(*phased)) * 1000:.1f} |")


if __name__ == "__main__":
    main()
