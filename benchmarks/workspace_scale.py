"""What a workspace costs as the project grows: start, a one-change review, save and apply, and the
memory a start takes, at 1,000 to 1,000,000 files, against a start without a workspace in the same run.

    .venv/bin/python benchmarks/workspace_scale.py [--files 1000 10000 100000 1000000] [--runs 5]
                                                   [--against TREE] [--dir DIR]

Each round starts a sandbox without a workspace and one over the project (alternating which goes
first), makes one new file in the project's sandbox, then times `review()`, `save_changes()` (the
patch a run saves after each step) and `apply()`, and removes the applied file from the host. Memory:
the Python heap a start over the project allocates and keeps (tracemalloc, one start of its own).
The project is made once per size under DIR (default: a temporary folder on the disk /tmp is on;
folders of 200 files); a size the disk has no room or inodes for is skipped, and said.
--against TREE (another checkout, e.g. `git worktree add --detach /tmp/wscost-base main`): the same
rounds with TREE's code too, alternating with this tree's, each in a process of its own.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_FOLDER = 200


def worker(tree: Path) -> None:
    """A tree's sandboxes: one line "PROJECT ROUND" in, one line of JSON (seconds, bytes) out."""
    sys.path[:0] = [str(tree)]
    import tracemalloc  # noqa: PLC0415

    from isolation import Sandbox, SandboxSpec  # noqa: PLC0415

    Sandbox(SandboxSpec(rootfs="host")).start().close()  # warm: the bwrap probe, the sweep
    print("ready", flush=True)
    for line in sys.stdin:
        project, round_ = line.split()
        project, order = Path(project), int(round_) % 2
        took: dict[str, float] = {}
        for with_workspace in ((False, True) if order == 0 else (True, False)):
            spec = SandboxSpec(rootfs="host", workspace=project if with_workspace else None)
            began = time.perf_counter()
            sb = Sandbox(spec).start()
            took["start_ws" if with_workspace else "start"] = time.perf_counter() - began
            try:
                if with_workspace:
                    name = f"new-{round_}.txt"
                    assert sb.exec(f"echo one change > /testbed/{name}").exit_code == 0
                    for what, call in (("review", lambda: sb.review()),
                                       ("save", lambda: sb.save_changes(io.BytesIO())),
                                       ("apply", lambda: sb.apply())):
                        began = time.perf_counter()
                        call()
                        took[what] = time.perf_counter() - began
            finally:
                sb.close()
            if with_workspace:
                os.unlink(project / name)
        if round_ == "0":  # the heap a start keeps, once per size
            tracemalloc.start()
            sb = Sandbox(SandboxSpec(rootfs="host", workspace=project)).start()
            took["heap"] = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            sb.close()
        print(json.dumps(took), flush=True)


def make_project(where: Path, files: int) -> None:
    for folder in range(max(files // PER_FOLDER, 1)):
        inside = where / f"d{folder}"
        inside.mkdir(parents=True)
        for n in range(min(PER_FOLDER, files)):
            with open(inside / f"f{n}.txt", "w") as out:
                out.write(f"{folder} {n}\n")


def room_for(where: Path, files: int) -> str:
    """Why the disk under `where` cannot hold `files` small files (and their folders), or ""."""
    disk = os.statvfs(where)
    need_inodes, need_bytes = files * 1.1 + 1000, files * disk.f_frsize * 1.2 + (1 << 30)
    if disk.f_favail < need_inodes:
        return f"{disk.f_favail:,} free inodes, {int(need_inodes):,} needed"
    if disk.f_bavail * disk.f_frsize < need_bytes:
        return f"{disk.f_bavail * disk.f_frsize / 2**30:.1f} GiB free, {need_bytes / 2**30:.1f} GiB needed"
    return ""


def spawn(tree: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(tree)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline() != "ready\n":
        raise SystemExit(f"the worker for {tree} did not start")
    return proc


def ask(proc: subprocess.Popen, project: Path, round_: int) -> dict:
    proc.stdin.write(f"{project} {round_}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=5, help="rounds per size (and per tree)")
    parser.add_argument("--against", type=Path, help="another checkout, measured alternating with this one")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the projects are made")
    args = parser.parse_args()
    trees = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    procs = {name: spawn(tree) for name, tree in trees.items()}
    rows, skipped = [], []
    scratch = Path(tempfile.mkdtemp(prefix="lis-ws-scale-", dir=args.dir))
    try:
        for files in args.files:
            why = room_for(scratch, files)
            if why:
                skipped.append(f"{files:,} files: skipped, the disk under {scratch} has {why}")
                continue
            project = scratch / f"p{files}"
            made = time.perf_counter()
            make_project(project, files)
            print(f"{files:,} files made in {time.perf_counter() - made:.1f} s", file=sys.stderr, flush=True)
            seen: dict[str, list[dict]] = {name: [] for name in trees}
            for round_ in range(args.runs):
                for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
                    seen[name].append(ask(procs[name], project, round_))
            rows.append((files, seen))
            shutil.rmtree(project)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nmedians of {args.runs} rounds; one new file in the project's sandbox; heap: what one start keeps\n")
    print("| files | code | start, no workspace ms | start over the project ms | ratio | review ms | save ms "
          "| apply ms | heap after start KiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for files, seen in rows:
        for name, rounds in seen.items():
            def med(key: str) -> float:
                return statistics.median(r[key] for r in rounds if key in r)
            heap = next(r["heap"] for r in rounds if "heap" in r)
            print(f"| {files:,} | {name} | {med('start') * 1e3:.1f} | {med('start_ws') * 1e3:.1f} | "
                  f"{med('start_ws') / med('start'):.2f} | {med('review') * 1e3:.1f} | {med('save') * 1e3:.1f} | "
                  f"{med('apply') * 1e3:.1f} | {heap / 1024:,.0f} |")
    for line in skipped:
        print(line)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]).resolve())
    else:
        main()
