"""What ties every sandbox's life to this process's: the pipe each pid 1 reads until we exit, and
the lasting thread bwrap is forked from (its parent-death signal follows the forking thread)."""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import threading
from typing import TYPE_CHECKING, Callable, ContextManager

from ..host import nodes as hostnodes

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_lifeline_fds: tuple[int, int, int] | None = None  # (read end, write end, the pid that made them)
_lifeline_lock = threading.Lock()
_launcher: ThreadPoolExecutor | None = None
_launcher_lock = threading.Lock()


def _lifeline() -> int:
    """The read end of a pipe whose write end this process alone holds, open until it exits:
    every sandbox's pid 1 reads it as its stdin and exits at EOF, when we are gone. One pipe for
    all of them (nobody writes to it), so a sandbox holds no descriptor here for it; a forked
    child makes its own."""
    global _lifeline_fds
    with _lifeline_lock:
        if _lifeline_fds is None or _lifeline_fds[2] != os.getpid():
            _lifeline_fds = (*os.pipe(), os.getpid())
        return _lifeline_fds[0]


def _popen_from_lasting_thread(argv: list[str], prepare: Callable[[], ContextManager] | None = None,
                               **kwargs) -> subprocess.Popen:
    """subprocess.Popen, called from a thread that lives as long as this process.

    bwrap's --die-with-parent is Linux's parent-death signal, which fires when the *thread* that
    forked bwrap ends, not the process: a sandbox started on a short-lived thread (an HTTP
    handler, a Textual or anyio worker, a trainer's pool) would be killed when that thread ends.

    A caller that owns the host's device nodes (root) always hops: the launching threads see them
    read-only (host/nodes.py), and the main thread keeps the host's view; so does one with a
    `prepare`, a context to start bwrap in there (as a subordinate id, for a root caller: idmap.py)."""
    global _launcher
    if threading.current_thread() is threading.main_thread() and not _host_nodes_exposed() and prepare is None:
        # The main thread ends only with the process (the interpreter exits from it), so it needs no hop.
        return subprocess.Popen(argv, **kwargs)
    with _launcher_lock:
        if _launcher is None:  # its threads wait for work until the interpreter exits
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 (only callers that hop)

            _launcher = ThreadPoolExecutor(2, thread_name_prefix="lis-bwrap-launch")
    return _launcher.submit(_popen_protected, argv, prepare, **kwargs).result()


def _popen_protected(argv: list[str], prepare: Callable[[], ContextManager] | None, **kwargs) -> subprocess.Popen:
    hostnodes.protect_this_thread()
    with prepare() if prepare else contextlib.nullcontext():
        return subprocess.Popen(argv, **kwargs)


@functools.lru_cache(maxsize=1)
def _host_nodes_exposed() -> bool:
    return bool(hostnodes.exposed())
