"""What the sandbox changed in its workspace: the changes and their diff, applying them to the
host, saving them as a patch, and the commits it made (with `git_writable`). All of it reads the
/testbed layers on the host (layout.testbed_layers) through the writable layers' descriptor, as
one host-side operation that close() waits for."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..changes import workspace
from ..spec import SandboxError

if TYPE_CHECKING:
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
    """What review leaves out (our mount points) and the patterns it holds back on top of the
    behavioural rules (the spec's, from the user's config)."""
    return {"skip": workspace.mount_points(sandbox.spec), "hold": sandbox.spec.held_back}


def changes(sandbox: Sandbox) -> list[workspace.Change]:
    """What differs under /testbed from the host workspace (or from empty without one)."""
    with sandbox._testbed() as (lower, upper):
        return workspace.changes(lower, upper, **sandbox._rules(), host=sandbox.spec.workspace is not None)


def diff(sandbox: Sandbox) -> str:
    """A unified diff of `changes()`; links, special and binary files are named, not dumped."""
    with sandbox._testbed() as (lower, upper):
        return workspace.diff(lower, upper, sandbox._rules()["skip"])


def apply(sandbox: Sandbox, paths: list[str] | None = None, allow_outside_links: bool = False) -> list[workspace.Change]:
    """Write the changes (or just `paths`) back to the host workspace, refusing host-side conflicts;
    held-back changes (what would configure or run something on the host: isolation.changes.heldback;
    links the sandbox made, new executable bits) only when named, links out of the workspace only when allowed, no mode wider
    than the umask (see workspace.apply; what is refused comes in hostwalk.RefusedPaths, with
    `held_back` naming why, once the rest is written)."""
    if sandbox.spec.workspace is None:
        raise SandboxError("this sandbox has no workspace to apply changes to; use export() to copy files out")
    sandbox._before = {} if sandbox._before is None else sandbox._before
    with sandbox._testbed() as (lower, upper):
        return workspace.apply(lower, upper, sandbox._before, paths, allow_outside_links, **sandbox._rules())


def save_changes(sandbox: Sandbox, out, beside=None) -> SavedPatch:
    """Write what the sandbox changed in its workspace to binary file `out` as a patch that
    `git apply` takes; returns isolation.changes.gitpatch.SavedPatch (the paths, and which of them the
    host changed while the sandbox ran). `beside` (isolation.changes.beside.Beside): where large files
    are kept instead of in the patch, and bases for a 3-way apply."""
    from ..changes.gitpatch import write_patch  # noqa: PLC0415

    if sandbox.spec.workspace is None:
        raise SandboxError("this sandbox has no workspace, so it has no changes to save; use export()")
    with sandbox._testbed() as (lower, upper):
        return write_patch(lower, upper, sandbox._before, out, skip=workspace.mount_points(sandbox.spec),
                           beside=beside)


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
