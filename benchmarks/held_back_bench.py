"""Issue 34's speed target: deciding what to hold back of a 20,000-file change (a venv) takes
under 2 s on the 2-core machine.

    .venv/bin/python benchmarks/held_back_bench.py [--files 20000] [--rounds 5]

`isolation.changes.heldback.hold_reasons` over a real git repository (its config read, its ignore rules
asked in one `git check-ignore`), against today's rule in the same run: the ten name patterns of
before issue 34, matched one by one per path. The change lists are this checkout's own .venv
(a real venv's layout) as made in the sandbox, the same with pyvenv.cfg on the host, as many
plain source files that no rule holds (each one then goes to git: the slowest case), the same
spread over 20 nested clones (issue 52: each repository is asked too, one query each), and new
caches and dot-files (held by class, with no git asked for them).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from isolation.changes.heldback import _matches, hold_reasons  # noqa: E402

TODAY = (".git/**", "lis-tui.toml", ".lis-tui/**", ".envrc", ".env*", ".vscode/**", ".idea/**",
         ".devcontainer/**", ".github/workflows/**", "*.pth")
"""The held-back patterns before issue 34: the baseline."""


def todays_rule(paths: list[str]) -> int:
    held = 0
    for path in paths:
        path = path.strip("/")
        names, slashed = path.split("/"), f"/{path}/"
        held += any(_matches(names, slashed, pattern) for pattern in TODAY)
    return held


def venv_paths(count: int) -> list[str]:
    """`count` entries of a real venv's tree, as a change list would name them under `.venv/`."""
    venv = Path(sys.prefix)
    found = [".venv/", ".venv/pyvenv.cfg"]
    for folder, dirs, files in os.walk(venv):
        rel = os.path.relpath(folder, venv)
        for name in sorted(dirs):
            found.append(f".venv/{name}/" if rel == "." else f".venv/{rel}/{name}/")
        for name in sorted(files):
            if name != "pyvenv.cfg":
                found.append(f".venv/{name}" if rel == "." else f".venv/{rel}/{name}")
        if len(found) >= count:
            break
    return found[:count]


NESTED = 20


def source_paths(count: int, top: str = "src") -> list[str]:
    return [f"{top}/pkg{i // 100}/mod{i % 100}.py" for i in range(count)]


def nested_paths(count: int) -> list[str]:
    return [path for i in range(NESTED) for path in source_paths(count // NESTED, f"vendor/clone{i}")]


def class_paths(count: int) -> list[str]:
    kinds = ("src/pkg{0}/__pycache__/mod{1}.cpython-311.pyc", "src/pkg{0}/.cache{1}/x.json", "src/pkg{0}/.cfg{1}")
    return [kinds[i % 3].format(i // 300, i % 100) for i in range(count)]


def project(where: Path, venv_on_host: bool, nested: int = 0) -> Path:
    root = where / ("host-venv" if venv_on_host else "nested" if nested else "plain")
    root.mkdir()
    (root / ".gitignore").write_text("build/\n*.log\n")
    if venv_on_host:
        (root / ".venv").mkdir()
        (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for i in range(nested):
        subprocess.run(["git", "init", "-q", str(root / "vendor" / f"clone{i}")], check=True)
    return root


def median_ms(run, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, host_venv = project(Path(tmp), False), project(Path(tmp), True)
        nested = project(Path(tmp), False, NESTED)
        venv = venv_paths(args.files)
        cases = [("a venv made in the sandbox", plain, venv),
                 ("a venv on the host, changed inside", host_venv, [p for p in venv if p != ".venv/pyvenv.cfg"]),
                 ("plain source, none held (all asked of git)", plain, source_paths(args.files)),
                 (f"the same in {NESTED} nested clones (each asked)", nested, nested_paths(args.files)),
                 ("new caches and dot-files, all held", plain, class_paths(args.files))]
        print(f"deciding what to hold back, median of {args.rounds} (target: under 2000 ms)\n")
        print(f"| {'change':44} | {'paths':>6} | {'today: ms':>9} | {'held':>6} | {'now: ms':>8} | {'held':>6} |")
        print(f"|{'-' * 46}|{'-' * 8}|{'-' * 11}|{'-' * 8}|{'-' * 10}|{'-' * 8}|")
        for name, root, paths in cases:
            changes = [(p, "added") for p in paths]
            old_ms, old_held = median_ms(lambda: todays_rule(paths), args.rounds)  # noqa: B023
            new_ms, reasons = median_ms(lambda: hold_reasons(root, changes), args.rounds)  # noqa: B023
            print(f"| {name:44} | {len(paths):>6} | {old_ms:>9.0f} | {old_held:>6} | {new_ms:>8.0f} | "
                  f"{len(reasons):>6} |")


if __name__ == "__main__":
    main()
