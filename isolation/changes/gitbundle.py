"""A commit made inside (`git_writable`) comes home as a commit: objects and one new branch.

The sandbox's `.git` is the model's: its config can name an fsmonitor, its hooks anything, so
host git never runs on it. Instead the sandbox bundles its own new commits (`git bundle create`
over /testbed/.git, from the host's HEAD recorded at start), the bundle is read out with the
sandbox's bounded file read, and the host fetches just its tip into `refs/heads/lis-tui/RUN`
(`--no-tags`, objects checked by fsck, no FETCH_HEAD): no hook, config or other ref of the
sandbox's reaches the host, and nothing of the work tree changes.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..spec import SandboxError

INSIDE = "/tmp/lis-tui-commits.bundle"  # outside /testbed: the bundle is no change to review
_SHA = re.compile(r"^[0-9a-f]{40}$")
_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")


class BundleError(SandboxError):
    """The commits cannot be bundled or fetched; nothing was written."""


def head_commit(workspace: Path) -> str | None:
    """The commit the workspace's HEAD names, read from `.git`'s files (no git runs): the base a
    sandbox's new commits are counted from. None: not a repository's top, or no commit yet."""
    git = workspace / ".git"
    try:
        head = (git / "HEAD").read_text(encoding="ascii").strip()
        if _SHA.match(head):
            return head
        if not head.startswith("ref: refs/"):
            return None
        ref = head[len("ref: "):]
        loose = git / ref
        if loose.is_file():
            sha = loose.read_text(encoding="ascii").strip()
            return sha if _SHA.match(sha) else None
        for line in (git / "packed-refs").read_text(encoding="ascii").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _SHA.match(sha):
                return sha
    except (OSError, UnicodeDecodeError):
        pass
    return None


# safe.directory: run by root, the sandbox's uid 0 is not the files' owner (the host's root is nobody inside).
_GIT = ["git", "-C", "/testbed", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]


def count_commits(sandbox: Any, base: str) -> int:
    """How many commits HEAD has inside that `base` has not (the sandbox's git says: a label only)."""
    count = sandbox.exec(shlex.join(_GIT + ["rev-list", "--count", f"{base}..HEAD"]), timeout=120)
    if count.exit_code != 0 or not count.stdout.strip().isdigit():
        raise BundleError(f"the sandbox's git could not list its commits: {_said(count)}")
    return int(count.stdout)


def make_bundle(sandbox: Any, base: str, limit: int) -> tuple[bytes, int] | None:
    """(the bundle's bytes, how many commits) of the sandbox's commits since `base`; None when there
    are none. Made inside by the sandbox's own git, read out with its bounded file read."""
    count = count_commits(sandbox, base)
    if count == 0:
        return None
    made = sandbox.exec(shlex.join(_GIT + ["bundle", "create", "-q", INSIDE, f"{base}..HEAD"]), timeout=300)
    if made.exit_code != 0:
        raise BundleError(f"the sandbox's git could not bundle its commits: {_said(made)}")
    try:
        data = sandbox.read_file(INSIDE, limit + 1)
    except OSError as exc:
        raise BundleError(f"the bundle could not be read out of the sandbox: {exc}") from None
    if len(data) > limit:
        raise BundleError(f"the commits' bundle is over {limit:,} bytes (the export cap); not saved")
    bundle_tip(data)  # a bundle of the sandbox's making: checked before it is kept
    return data, count


def committed_paths(sandbox: Any, base: str) -> list[str] | None:
    """The paths the sandbox's commits since `base` change, as its git says (a label only: what the
    patch holds too is said, nothing is decided by it); None when its git cannot say."""
    done = sandbox.exec(shlex.join(_GIT + ["diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", base,
                                           "HEAD"]), timeout=120)
    if done.exit_code != 0:
        return None
    return sorted({name for name in done.stdout.split("\0") if name})


def _said(result: Any) -> str:
    return " ".join((result.stderr or result.stdout).split())[:300] or f"exit {result.exit_code}"


def bundle_tip(data: bytes) -> str:
    """The commit the bundle's HEAD (its only ref) names, read from its header; BundleError if it is
    no bundle git made."""
    if not data.startswith(_SIGNATURES):
        raise BundleError("it is not a git bundle")
    header = data[:1 << 16].split(b"\n\n", 1)[0].decode("ascii", errors="replace").splitlines()[1:]
    tips = [line.split(" ", 1) for line in header if line and line[0] not in "-@"]
    heads = [sha for sha, *name in tips if name == ["HEAD"] and _SHA.match(sha)]
    if len(heads) != 1:
        raise BundleError("the bundle names no single HEAD commit")
    return heads[0]


def check_target(project: Path, branch: str) -> None:
    """BundleError, with the fix, unless `project` is in a git repository without `branch`."""
    _target(project, branch)


def fetch_bundle(project: Path, bundle: Path, branch: str) -> str:
    """Fetch the bundle's HEAD commit into `refs/heads/<branch>` of the repository at `project`, and
    nothing else; refused if that branch exists. Returns the commit."""
    with open(bundle, "rb") as handle:
        tip = bundle_tip(handle.read(1 << 16))
    git, env, ref = _target(project, branch)
    done = _run(git, project, env, "-c", "transfer.fsckObjects=true", "fetch", "--no-tags", "--no-write-fetch-head",
                "--quiet", str(Path(bundle).absolute()), f"{tip}:{ref}")
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:400] or f"exit {done.returncode}"
        raise BundleError(f"git fetch refused the commits' bundle, so nothing was fetched: {why}")
    return tip


def _target(project: Path, branch: str) -> tuple[str, dict, str]:
    git = shutil.which("git")
    if git is None:
        raise BundleError("git is not installed. Fix: install git (apt-get install git)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"), "LC_ALL": "C",
           "GIT_TERMINAL_PROMPT": "0"}
    top = _run(git, project, env, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise BundleError(f"{project} is not a git repository, so the commits have nowhere to go. Fix: apply "
                          "them to the run's repository (--workspace DIR)")
    ref = f"refs/heads/{branch}"
    if _run(git, project, env, "check-ref-format", ref).returncode != 0:
        raise BundleError(f"{branch!r} is not a valid branch name")
    if _run(git, project, env, "show-ref", "--verify", "--quiet", ref).returncode == 0:
        raise BundleError(f"the branch {branch} already exists in {top.stdout.strip()}; nothing was fetched. "
                          f"Fix: delete it (git branch -D {branch}) or look at it there")
    return git, env, ref


def _run(git: str, project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([git, *args], cwd=project, env=env, capture_output=True, text=True, errors="replace",
                          timeout=600)
