"""What the sandbox changed in its workspace: the changes and their diff, applying them to the
host, saving them as a patch, and the commits it made (with `git_writable`). All of it reads the
/testbed layers on the host (layout.testbed_layers) through the writable layers' descriptor, as
one host-side operation that close() waits for. The changes package is imported when a review
or an apply is asked for: a sandbox that never reviews (`lis-tui exec`) does not load it."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..spec import SandboxError

if TYPE_CHECKING:
    from ..changes import workspace
    from ..changes.gitpatch import SavedPatch
    from . import Sandbox


@contextlib.contextmanager
def _testbed(sandbox: Sandbox) -> Iterator[tuple[Path, Path]]:
    from ..layout import _empty_dir, testbed_layers  # noqa: PLC0415

    with sandbox._writable_now() as writable:
        lower, upper = testbed_layers(sandbox.spec, writable)
        if lower is None:  # no workspace: everything under /testbed is new
            lower = _empty_dir()
        yield lower, upper


def _rules(sandbox: Sandbox) -> dict:
    """What review leaves out (our mount points), the patterns it holds back on top of the
    behavioural rules (the spec's, from the user's config), and when the sandbox started (the
    host's later entries are the host's)."""
    from ..changes import workspace  # noqa: PLC0415 (see the module's docstring)

    return {"skip": workspace.mount_points(sandbox.spec), "hold": sandbox.spec.held_back, "since": sandbox._since}


def review(sandbox: Sandbox, diff: bool = True) -> workspace.Review:
    """What differs under /testbed from the host workspace (or from empty without one), in one walk:
    `.changes`, `.diff` (None unless `diff`) made from the same reads, and what apply() is to write.
    It is kept as `sandbox.last_review`, which apply() writes from unless given another."""
    from ..changes import workspace  # noqa: PLC0415 (see the module's docstring)

    with sandbox._testbed() as (lower, upper):
        found = workspace.review(lower, upper, **sandbox._rules(), host=sandbox.spec.workspace is not None, text=diff)
        if sandbox._host is not None:  # what can be told now of the host's part in these paths is learnt
            sandbox._host.moved(lower, [c.path.rstrip("/") for c in found.changes if c.kind != "host"], upper)
    sandbox.last_review = found
    return found


def changes(sandbox: Sandbox) -> list[workspace.Change]:
    """What differs under /testbed from the host workspace (or from empty without one); a review."""
    return sandbox.review(diff=False).changes


def diff(sandbox: Sandbox) -> str:
    """A unified diff of the changes; links, special and binary files are named, not dumped; a review."""
    return sandbox.review().diff


def apply(sandbox: Sandbox, paths: list[str] | None = None, allow_outside_links: bool = False,
          reviewed: workspace.Review | None = None) -> list[workspace.Change]:
    """Write the changes of `reviewed` (else of the last review: review(), changes() or diff()), or
    just `paths` of them, back to the host workspace, byte for byte as that review read them:
    a file changed in the sandbox since is refused by name, one that appeared since is not applied
    by an "apply all" and is named. Without any review, what is there at apply time is applied.
    Host-side conflicts are refused; held-back changes (what would configure or run something on
    the host: isolation.changes.heldback; links the sandbox made, new executable bits, the other
    half of a held-back move) go only when named, links out of the workspace only when allowed, no
    mode wider than the umask (see writeback.apply; what is refused comes in walk.RefusedPaths,
    with `held_back` naming why, once the rest is written)."""
    from ..changes import writeback  # noqa: PLC0415 (see the module's docstring)

    if sandbox.spec.workspace is None:
        raise SandboxError("this sandbox has no workspace to apply changes to; use export() to copy files out")
    with sandbox._testbed() as (lower, upper):
        return writeback.apply(lower, upper, sandbox._host, paths, allow_outside_links, **sandbox._rules(),
                               reviewed=reviewed or sandbox.last_review)


def save_changes(sandbox: Sandbox, out, beside=None) -> SavedPatch:
    """Write what the sandbox changed in its workspace to binary file `out` as a patch that
    `git apply` takes; returns isolation.changes.gitpatch.SavedPatch (the paths, and which of them the
    host changed while the sandbox ran). `beside` (isolation.changes.beside.Beside): where large files
    are kept instead of in the patch, and bases for a 3-way apply."""
    from ..changes import workspace  # noqa: PLC0415 (see the module's docstring)
    from ..changes.gitpatch import write_patch  # noqa: PLC0415

    if sandbox.spec.workspace is None:
        raise SandboxError("this sandbox has no workspace, so it has no changes to save; use export()")
    with sandbox._testbed() as (lower, upper):
        return write_patch(lower, upper, sandbox._host, out, skip=workspace.mount_points(sandbox.spec),
                           beside=beside, since=sandbox._since)


def learn_host(sandbox: Sandbox) -> None:
    """For a kept session at its close: what can be told now of the host's part in each path the
    sandbox changed is learnt (baseline.py), so that the person's work in the project until it is
    resumed does not make its new files conflicts. A walk of what the sandbox wrote, no file read."""
    from ..changes.workspace import written_paths  # noqa: PLC0415
    from ..layout import testbed_layers  # noqa: PLC0415

    lower, upper = testbed_layers(sandbox.spec, sandbox.writable)
    sandbox._host.moved(lower, written_paths(upper), upper)


def new_commits(sandbox: Sandbox) -> int:
    """How many commits the sandbox made on the workspace's HEAD since it started (with `git_writable`)."""
    from ..changes.gitbundle import count_commits  # noqa: PLC0415

    return 0 if sandbox.git_base is None else count_commits(sandbox, sandbox.git_base)


def bundle_commits(sandbox: Sandbox) -> tuple[bytes, int] | None:
    """The sandbox's new commits as a git bundle made inside, read out within the export cap, and
    their count; None when there are none (isolation.changes.gitbundle)."""
    from ..changes.gitbundle import make_bundle  # noqa: PLC0415

    return None if sandbox.git_base is None else make_bundle(sandbox, sandbox.git_base, sandbox.spec.limits.export_bytes())


def committed_paths(sandbox: Sandbox) -> list[str] | None:
    """The paths the sandbox's new commits change (its git says; None when it cannot, or no base)."""
    from ..changes.gitbundle import committed_paths as paths  # noqa: PLC0415

    return None if sandbox.git_base is None else paths(sandbox, sandbox.git_base)
