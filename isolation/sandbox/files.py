"""Host-side file operations on a sandbox: reading and writing its files as it sees them (through
openat2 inside its root, or a joined shell where the kernel has no openat2), export, and the
bookkeeping that lets close() wait for the operations under way and refuse new ones: each holds a
descriptor of its own, so none ever uses a number that close freed and something else took."""
from __future__ import annotations

import contextlib
import errno
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..host.inroot import (
    SHELL_READ,
    SHELL_WRITE,
    InRootUnavailable,
    raise_shell_file_error,
    read_ends_in_root,
    read_in_root,
    write_in_root,
)
from ..spec import SandboxError

if TYPE_CHECKING:
    from . import Sandbox


def read_file(sandbox: Sandbox, path: str, limit: int = 1 << 40) -> bytes:
    """A regular file's bytes (at most `limit`) as the sandbox sees them: symlinks and `..`
    resolve against the sandbox's root, never the host's (see inroot.py). Raises
    FileNotFoundError, IsADirectoryError, NotARegularFile (fifos, devices), PermissionError."""
    try:
        with sandbox._readable(path) as (root, inside):
            return read_in_root(root, inside, limit)
    except InRootUnavailable:
        pass
    rc, out, err, _, _ = sandbox._run([sandbox.shell, "-c", SHELL_READ, "sh", path, str(limit)], 60, None, "/", None, limit)
    if rc != 0:
        raise_shell_file_error(err, path)
    return out


def read_file_ends(sandbox: Sandbox, path: str, head: int, tail: int) -> tuple[bytes, int, bytes]:
    """A regular file's first `head` and last `tail` bytes and the count of those between,
    in bounded memory whatever its size (see `read_file` for how paths resolve)."""
    try:
        with sandbox._readable(path) as (root, inside):
            return read_ends_in_root(root, inside, head, tail)
    except InRootUnavailable:  # an old kernel: the head only, with the rest counted as cut
        data = sandbox.read_file(path, head + tail + 1)
        return data[:head + tail], max(0, len(data) - head - tail), b""


def write_file(sandbox: Sandbox, path: str, data: bytes, mode: int = 0o644, exclusive: bool = False) -> None:
    """Write a regular file as the sandbox would, creating missing parent directories. An
    existing file is rewritten in place (mode, owner and hard links kept); a new one gets
    `mode`. `exclusive`: FileExistsError if anything is at `path`, even a dangling symlink."""
    if sandbox.spec.limits.file_size is not None and len(data) > sandbox.spec.limits.file_size:
        raise OSError(errno.EFBIG, "File too large (the sandbox's file_size limit)", path)
    try:
        with sandbox._in_root() as root:
            return write_in_root(root, path, data, mode, exclusive)
    except InRootUnavailable:
        pass
    argv = [sandbox.shell, "-c", SHELL_WRITE, "sh", path, f"{mode:o}", "x" if exclusive else ""]
    rc, _, err, _, _ = sandbox._run(argv, 60, data, "/", None, 1 << 20)
    if rc != 0:
        raise_shell_file_error(err, path)


def export(sandbox: Sandbox, src: str, host_dir: Path | str, force: bool = False, allow_outside_links: bool = False,
           links: bool = True, limit: int | None = None) -> Path:
    """Copy the sandbox directory `src` into `host_dir` (created if missing), never following links;
    existing files are kept unless `force` (see copyout.copy_out for every rule). Holes stay holes;
    at most `limit` bytes of data are written (default: `Limits.export_bytes()`, the export cap,
    else the disk limit, else 4 GiB). What is refused comes in hostwalk.RefusedPaths once the
    rest is copied."""
    from ..host.copyout import copy_out  # noqa: PLC0415
    from ..host.walk import RefusedPaths  # noqa: PLC0415

    dest = Path(host_dir)
    with sandbox._readable(src) as (root, inside):
        copied = copy_out(root, inside, dest, force=force, links=links, allow_outside_links=allow_outside_links,
                          limit=sandbox.spec.limits.export_bytes() if limit is None else limit)
    if copied.refused:
        raise RefusedPaths(f"exported {len(copied.files)} file(s) from {src} to {dest}", copied.refused)
    return dest


def tree_stamp(sandbox: Sandbox, src: str) -> int:
    """A number that differs once anything under the sandbox's directory `src` changed (names, types,
    sizes, modes, times; read as export reads it): to export a folder again only when it changed."""
    from ..host.copyout import stamp  # noqa: PLC0415

    with sandbox._readable(src) as (root, inside):
        return stamp(root, inside)


@contextlib.contextmanager
def _in_root(sandbox: Sandbox) -> Iterator[int]:
    """A descriptor of the sandbox's / for one host-side file operation. close() lets the
    operations under way end before it tears anything down, and none starts once it began: a
    write racing a close (an editor call in a step that a DELETE ends) would otherwise land in
    a scratch being removed, or through the descriptor's number once close freed it and a
    sibling sandbox's root or a host folder took it. A descriptor of its own, so even an
    operation that outlasts close's wait never uses a number that was reused."""
    with sandbox._file_op(sandbox._open_running_root) as fd:
        yield fd


def _open_running_root(sandbox: Sandbox) -> int:
    sandbox._require_running()
    return sandbox._open_root()


@contextlib.contextmanager
def _file_op(sandbox: Sandbox, opener, writes: bool = True) -> Iterator[int]:
    """`opener()`'s descriptor, counted as a file operation under way until it is closed.
    `writes`: it may change the sandbox's files (the watchers' own measures do not), so it stirs
    the sandbox (`_stirs_now`)."""
    with sandbox._file_ops:
        fd = opener()
        sandbox._file_ops_running += 1
        sandbox._writers += writes
    try:
        yield fd
    finally:
        os.close(fd)
        with sandbox._file_ops:
            sandbox._file_ops_running -= 1
            sandbox._writers -= writes
            sandbox._stirs += writes
            sandbox._file_ops.notify_all()


def _stir(sandbox: Sandbox) -> None:
    """Something was started in the sandbox (a command): a watcher that found it quiet looks again."""
    with sandbox._file_ops:
        sandbox._stirs += 1


def _stirs_now(sandbox: Sandbox) -> int | None:
    """How many times something started in the sandbox or wrote to it from here (limits/activity.py);
    None while a host-side write is under way."""
    with sandbox._file_ops:
        return None if sandbox._writers else sandbox._stirs


@contextlib.contextmanager
def _readable(sandbox: Sandbox, path: str) -> Iterator[tuple[int, str]]:
    """(root, path) for a host-side read of `path`: the sandbox's / while it runs. Once a limit
    stopped it (every process killed, so its / is gone), what it wrote under /testbed (or the
    workspace's own path, its other name) stays readable until close(): the answer and the
    output files a run, an episode or a review copies out are not lost with it. That is the
    /testbed layer on the host (without a workspace, /testbed itself; with one, what the sandbox
    wrote over it), read with `path` resolved inside that folder alone, as inside the sandbox's
    root; any other path is refused."""
    if not sandbox._stopped:
        with sandbox._in_root() as root:
            yield root, path
        return
    inside = os.path.normpath("/" + path.lstrip("/"))
    places = sandbox.spec.places  # a workspace's own path is /testbed by another name
    top = next((top for top in ("/testbed", places.working, places.output.rsplit("/", 1)[0])
                if inside == top or inside.startswith(f"{top}/")), None)
    if top is None:
        raise SandboxError(sandbox._not_running())
    layer_of = "/testbed" if top == places.working else top
    with sandbox._file_op(functools.partial(sandbox._open_remains, layer_of)) as layer:
        yield layer, inside[len(top):] or "/"


def _open_remains(sandbox: Sandbox, top: str) -> int:
    """The layer that holds `top` (/testbed, or /agent beside a workspace) on the host."""
    if sandbox._closing or sandbox.pid is None:
        raise SandboxError(sandbox._not_running())
    from ..layout import testbed_layers  # noqa: PLC0415

    layer = testbed_layers(sandbox.spec, sandbox.writable)[1] if top == "/testbed" else sandbox.writable / top[1:]
    return os.open(layer, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


@contextlib.contextmanager
def _writable_now(sandbox: Sandbox) -> Iterator[Path]:
    """`writable` for one host-side operation, which close() waits for: the tmpfs through a
    descriptor of its own, whose number no other sandbox can take meanwhile."""
    if sandbox._rw_fd is None:
        yield sandbox.layers
        return
    with sandbox._file_op(sandbox._dup_rw) as fd:
        yield Path(f"/proc/self/fd/{fd}")


def _dup_rw(sandbox: Sandbox) -> int:
    if sandbox._closing or sandbox._rw_fd is None:
        raise SandboxError(sandbox._not_running())
    return os.dup(sandbox._rw_fd)
