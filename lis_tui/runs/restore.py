"""A resumed run's work put back into a fresh sandbox: the workspace changes of its `changes.patch`
applied INSIDE the sandbox (its copy-on-write layer; the host project is never written), and its
`files/` (a copy of its output folder) written back to the output folder.

The patch is applied by the sandbox's own `git apply`, one path at a time, so a file the project
changed since the run is named and the others still go in; a large file kept beside the patch
(RUN/blobs/, up to FILE_LIMIT) is written inside where the sandbox's file is the one it replaces.
git runs with a throw-away empty repository as GIT_DIR, as `lis-tui apply` does on the host: the project's repository (a subfolder
of one included) is not read, and paths are taken from /testbed.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from isolation import SandboxError
from lis_tui.runs.changes import BLOBS, PATCH, ApplyRefused, load_run

SCRATCH = "/tmp/.lis-tui-resume"
FILE_LIMIT = 64 << 20
"""Bytes of one output file put back at most (a bigger one stays in the run's files/, named)."""
_APPLY = r"""
d=$1
command -v git >/dev/null 2>&1 || { echo "no-git"; exit 3; }
git init -q --bare --template= "$d/git" || exit 4
export GIT_DIR="$d/git" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$d" LC_ALL=C
for p in "$d"/*.patch; do
  out=$(git apply --whitespace=nowarn "$p" 2>&1) || printf '%s\t%s\n' "${p##*/}" "$(printf '%s\n' "$out" | tail -n 1)"
done
rm -rf "$d"
"""


def put_back(sandbox: Any, run_dir: Path, name: str) -> tuple[str, list[str]]:
    """Put run `name`'s changes and output files into `sandbox`; one line saying what was done, and
    "path (why)" of each change or file that was not put back."""
    done: list[str] = []
    missed: list[str] = []
    if sandbox.spec.workspace is not None and (run_dir / PATCH).exists():
        applied, failed = reapply(sandbox, run_dir)
        if applied:
            done.append(f"{applied} changed file{'' if applied == 1 else 's'} of the workspace (inside "
                        "the sandbox; the project on the host is unchanged)")
        missed += failed
    restored, skipped = restore_output(sandbox, run_dir / "files", sandbox.spec.places.output)
    if restored:
        done.append(f"{restored} output file{'' if restored == 1 else 's'} in {sandbox.spec.places.output}")
    missed += skipped
    line = f"put back from {name}: {', '.join(done)}" if done else f"nothing to put back from {name}"
    if missed:
        shown = ", ".join(missed[:5]) + (f" and {len(missed) - 5} more" if len(missed) > 5 else "")
        line += f"; not put back: {shown}"
    return line, missed


def reapply(sandbox: Any, run_dir: Path) -> tuple[int, list[str]]:
    """Apply the run's saved patch inside; (paths applied, "path (why)" of those that did not)."""
    try:
        _, patch, _ = load_run(run_dir, Path(sandbox.spec.workspace))
    except ApplyRefused as exc:
        return 0, [f"{PATCH} ({exc})"]
    kept = [entries[0] for entries in patch.values() if entries[0].kept]
    put, missed = _put_kept(sandbox, run_dir, kept)
    paths = sorted(p for p, entries in patch.items() if not entries[0].kept)
    if not paths:
        return put, missed
    try:
        for number, path in enumerate(paths):
            sandbox.write_file(f"{SCRATCH}/{number:06d}.patch", b"".join(e.text for e in patch[path]))
        done = sandbox.exec([sandbox.shell, "-c", _APPLY, "sh", SCRATCH], timeout=300,
                            cwd=sandbox.spec.places.working)
    except (OSError, SandboxError) as exc:
        return put, missed + [f"the workspace's changes (the sandbox refused: {exc})"]
    if done.stdout.startswith("no-git"):
        return 0, [f"the workspace's changes (no git in the rootfs {sandbox.spec.rootfs} to apply them; "
                   f"they are in {run_dir / PATCH})"]
    if done.exit_code != 0:
        return 0, [f"the workspace's changes (git failed: {' '.join(done.stderr.split())[:200]})"]
    failed = {}
    for line in done.stdout.splitlines():
        name, _, why = line.partition("\t")
        number = name.removesuffix(".patch")
        if number.isdigit() and int(number) < len(paths):
            path = paths[int(number)]  # git's last line: "error: PATH: patch does not apply"
            failed[path] = why.removeprefix("error: ").removeprefix(f"{path}: ").strip()[:160]
    missed += [f"{path} ({why}: the project changed since the run)" for path, why in failed.items()]
    return put + len(paths) - len(failed), missed


def _put_kept(sandbox: Any, run_dir: Path, kept: list) -> tuple[int, list[str]]:
    """The large files kept beside the patch (patchapply.Entry, `kept`), written inside where the
    sandbox's file is still the one each replaces; (how many, "path (why)" of those not)."""
    done, missed = 0, []
    for entry in kept:
        where = f"{sandbox.spec.places.working}/{entry.path}"
        try:
            if _blob_inside(sandbox, where) != (entry.old_id if entry.old_mode else None):
                missed.append(f"{entry.path} (the project changed since the run)")
                continue
            data, _ = _read(run_dir / BLOBS / entry.new_id, "it stays beside the patch; lis-tui apply writes it")
            if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != entry.new_id:
                raise OSError(0, f"{run_dir / BLOBS / entry.new_id} is not the file the run kept")
            sandbox.write_file(where, data, 0o755 if entry.new_mode == "100755" else 0o644)
            done += 1
        except (OSError, SandboxError) as exc:
            missed.append(f"{entry.path} ({getattr(exc, 'strerror', None) or exc})")
    return done, missed


def _blob_inside(sandbox: Any, where: str) -> str | None:
    """The blob id of the sandbox's file at `where` (None: there is none)."""
    try:
        data = sandbox.read_file(where, FILE_LIMIT + 1)
    except FileNotFoundError:
        return None
    if len(data) > FILE_LIMIT:
        raise OSError(0, f"over {FILE_LIMIT >> 20} MiB in the sandbox: lis-tui apply writes it to the project")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def restore_output(sandbox: Any, files: Path, output: str) -> tuple[int, list[str]]:
    """Write the run's files/ (regular files and folders; what a sandbox made, read without
    following a link) back to `output` inside; (files written, "path (why)" of those not)."""
    written, skipped = 0, []
    for top, dirs, names in os.walk(files, followlinks=False):
        dirs.sort()
        for entry in sorted(names):
            host = Path(top) / entry
            rel = host.relative_to(files).as_posix()
            try:
                data, mode = _read(host)
                sandbox.write_file(f"{output}/{rel}", data, mode)
            except (OSError, SandboxError) as exc:
                skipped.append(f"{rel} ({getattr(exc, 'strerror', None) or exc})")
                continue
            written += 1
    return written, skipped


def _read(path: Path, over: str = "it stays in the run's files/") -> tuple[bytes, int]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if st.st_size > FILE_LIMIT:
            raise OSError(0, f"over {FILE_LIMIT >> 20} MiB: {over}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(FILE_LIMIT + 1)
    finally:
        os.close(fd)
    return data, 0o755 if st.st_mode & stat.S_IXUSR else 0o644
