"""The spawn helper, and the per-sandbox zygotes it forks.

The helper is started once per lis-tui process (`python -I -S helper.py FD`, an empty
environment, no terminal) and is single-threaded, as joining a user namespace requires. For a
sandbox it forks a zygote, which:
1. joins the sandbox's namespaces (user, mount, network, ipc, uts, cgroup; the pid namespace for
   its children) and chroots to the sandbox's root;
2. has its imports sealed: no module can be loaded, since every path now resolves in the
   sandbox's files (modules already loaded keep working); the helper sealed its own once
   everything was imported, before it forked any zygote, so every fork starts sealed;
3. confines itself as the sandbox's processes must be: the helper's own empty session keyring
   (joined once, at its start; never the user's), the sandbox's resource limits, an empty
   bounding set, no_new_privs and the syscall filter (these right after the join, before the
   chroot, which still needs the capability it holds), then, chrooted, every capability it holds
   dropped.
A fork asked to `pick` joins the same way, but hands back resize contexts of the sandbox's
tmpfs (_pick) and exits, confined in nothing but the chroot, having run nothing of the sandbox's.
The sandbox's first zygote also, before any command ran, caps the sandbox's per-user counters
(inotify) in its user namespace, joined alone first, and sizes every tmpfs and caps the ptys,
chrooted and still capable, loading the filter after that (see _bound_user_ns, _remount).
Only then does it serve requests, starting each command with posix_spawn (vfork and exec: no
Python runs in the child), and the command inherits all of the above. So nothing from the
sandbox's filesystem is executed or loaded while a capability is held, and a command costs one
exec, not a chain of nsenter, setpriv and a shell.

The helper and the zygotes are not dumpable and were exec'd outside the sandbox: nothing inside
can ptrace them or open their /proc files (they are not in its pid namespace at all). A zygote
reports each command's pid (with a pidfd) and, later, its wait status on a socket the caller
handed in with the request. A forked Python costs most of a MiB, so a zygote idle for IDLE
seconds exits: it hands its running commands to the helper (a child subreaper, which inherits
them as children and reports their end) and closes its channel; the caller forks a new one when
it needs one again.

Standard library only, imported by path, everything imported up front.
"""
from __future__ import annotations

import errno
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import sys
import termios
import warnings  # noqa: F401 (os.execvpe imports it: it must be loaded before imports are sealed)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402
import seccomp  # noqa: E402

IDLE = 1.0  # seconds a zygote waits for work before it exits
_FILTERS = {nested: linux.SeccompProgram(seccomp.program(nested_userns=nested)) for nested in (False, True)}
_LAST_CAP = linux.last_cap()


class _State:
    """What a serving process (the helper, or a zygote) tracks."""

    def __init__(self) -> None:
        self.watched: dict[int, socket.socket] = {}  # pid -> where its status goes
        self.unclaimed: dict[int, int] = {}  # pid -> status, reaped before its handoff came
        self.zygotes: set[int] = set()
        self.handoffs: dict[int, socket.socket] = {}  # fd -> a zygote's handoff socket
        self.spare: tuple[int, socket.socket, socket.socket] | None = None  # pid, control, handoff
        self.markers: set[bytes] = set()  # our owner's live sandboxes' markers (records.Record.marker)


_keyring_error: OSError | None = None  # why the helper has no keyring of its own: each zygote says so


def main(channel_fd: int) -> None:
    global _keyring_error
    helper = os.fork()
    if helper:  # we go, the helper stays: no child of our owner's (spawn._Helper says why)
        socket.socket(fileno=channel_fd).send(f"H {helper}".encode())
        os._exit(0)
    linux.prctl(linux.PR_SET_DUMPABLE, 0)
    linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)  # a zygote's commands become ours when it exits
    # One fresh keyring for every zygote to inherit, not one each: an ordinary user may own only
    # kernel.keys.maxkeys (200) keys, which capped a user at about 200 live sandboxes.
    try:
        linux.join_new_session_keyring()
    except OSError as exc:
        _keyring_error = exc
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Sealed here, once, not in each fork: clearing the import caches in a fork frees objects,
    # and every page that touches is copied, per sandbox. Everything is imported by now.
    _seal_imports()
    gc.freeze()  # what the collector would touch stays shared with the forks
    state = _State()
    _fork_spare(state)
    _serve(socket.socket(fileno=channel_fd), _serve_owner, state, idle=None)
    _end_sandboxes(state)


def _end_sandboxes(state: _State) -> None:
    """Our owner is gone: kill every process that carries one of its sandboxes' markers. Each
    sandbox's pid 1 ends with its owner (the pipe it reads), but a bwrap child that was still
    waiting to be let go by its parent, killed with the owner (parent-death signal), would wait
    forever."""
    if not state.markers:
        return
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if state.markers.intersection(f.read().split(b"\0")):
                    os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile, or not ours


def _serving(channel: socket.socket) -> tuple[select.poll, int]:
    """The poller of _serve, and the descriptor that SIGCHLD wakes it through."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd does the work
    poller = select.poll()
    poller.register(channel, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    return poller, wake_r


def _serve(channel: socket.socket, handle, state: _State, idle: float | None,
           loop: tuple[select.poll, int] | None = None, first: float | None = None) -> None:
    """Answer requests on `channel` until it closes (or, with `idle`, until that long without
    one; `first`: how long to wait for the first one); reap children as they end. `loop`: what
    _serving made for it, if it was made earlier."""
    poller, wake_r = loop or _serving(channel)
    while True:
        helper = idle is None  # else a zygote, which forks no spares
        wait = 0 if helper and state.spare is None else first or idle  # no spare: forked once nothing waits
        events = poller.poll(None if wait is None else wait * 1000)
        if not events:
            if helper:
                _fork_spare(state)
                continue
            return  # idle: the caller hands off what runs
        for fd, _ in events:
            if fd == wake_r:
                _drain(wake_r)
                _reap(state)
            elif fd in state.handoffs:
                _take_handoff(state, fd, poller)
            elif not _request(channel, handle, state, poller):
                return  # our owner is gone
            else:
                first = None


def _request(channel: socket.socket, handle, state: _State, poller) -> bool:
    try:
        payload, fds = _recv(channel, 16)
    except InterruptedError:
        return True
    except ConnectionResetError:  # gone with a message of ours unread (the helper's pid): gone all the same
        return False
    if not payload:
        return False
    if payload == b"@":  # a big request travels in a memfd, the last descriptor
        payload = _read_all(fds.pop())
    reply = socket.socket(fileno=fds.pop(0))
    kept = False
    try:
        kept = handle(json.loads(payload), fds, reply, state, poller)
    except Exception as exc:  # noqa: BLE001 (told to the caller; a traceback could read files)
        _send(reply, f"E {_why(exc)}".encode())
    finally:
        for fd in fds:
            os.close(fd)
        if not kept:
            reply.close()
    return True


def _reap(state: _State) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = state.watched.pop(pid, None)
        if reply is not None:
            _send(reply, f"S {status}".encode())
            reply.close()
        elif pid in state.zygotes:
            state.zygotes.discard(pid)
        else:
            state.unclaimed[pid] = status  # handed off, its handoff not read yet


def _recv(sock: socket.socket, maxfds: int) -> tuple[bytes, list[int]]:
    """A message and the descriptors that came with it, made close-on-exec: a descriptor we are
    handed must never leak into a command. (socket.recv_fds drops its flags argument, so
    MSG_CMSG_CLOEXEC cannot be asked of it.)"""
    payload, fds, _, _ = socket.recv_fds(sock, 1 << 16, maxfds)
    for fd in fds:
        os.set_inheritable(fd, False)
    return payload, fds


def _send(reply: socket.socket, message: bytes, fds: list[int] = ()) -> None:
    try:  # never block on a caller that stopped reading, never die of one that left
        socket.send_fds(reply, [message], list(fds), socket.MSG_DONTWAIT)
    except OSError:
        pass


# ---- the helper: a zygote per sandbox -----------------------------------------------------------

def _serve_owner(request: dict, fds: list[int], reply: socket.socket, state: _State, poller) -> bool:
    """A request of our owner's: a zygote, or a sandbox's marker, whose processes end with it (or not)."""
    if request["op"] == "marker":
        (state.markers.add if request["live"] else state.markers.discard)(request["marker"].encode())
        return False
    if request.get("marker"):  # a sandbox's first zygote, asked for with its marker (Zygote.ask_early)
        state.markers.add(request["marker"].encode())
    return _fork_zygote(request, fds, reply, state, poller)


def _fork_zygote(request: dict, fds: list[int], reply: socket.socket, state: _State, poller) -> bool:
    """fds: the pidfd of the sandbox's pid 1 and its root directory; `reply` becomes the channel.
    The spare forked earlier becomes the zygote; the next spare is forked as soon as no request
    waits, or now, when one comes first. A sandbox's first zygote is asked for before bwrap
    starts, so that fork runs while bwrap starts and our process waits for it (a core is free
    then), not later, while bwrap builds the sandbox or the first command starts: on 2 cores
    forking after 5 ms idle had landed there, 0.3-0.5 ms more per start."""
    if state.spare is None:
        _fork_spare(state)
    pid, control, handoff = state.spare
    try:
        socket.send_fds(control, [json.dumps(request).encode()], [reply.fileno(), *fds])
    except OSError:  # the spare died: a fresh one, and once more
        state.zygotes.add(pid)
        _fork_spare(state)
        return _fork_zygote(request, fds, reply, state, poller)
    finally:
        control.close()
    state.zygotes.add(pid)
    state.handoffs[handoff.fileno()] = handoff
    poller.register(handoff, select.POLLIN)
    state.spare = None
    return False  # the zygote has `reply` now; ours is closed


def _fork_spare(state: _State) -> None:
    """A fork that waits for its sandbox, so that a zygote's start costs no fork."""
    control, control_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handoff, handoff_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        _spare(control_theirs, handoff_theirs)  # never returns
    control_theirs.close()
    handoff_theirs.close()
    state.spare = (pid, control, handoff)


def _spare(control: socket.socket, handoff: socket.socket) -> None:
    try:
        signal.set_wakeup_fd(-1)
        keep = [control.fileno(), handoff.fileno()]
        for fd in range(3, max(keep)):
            if fd not in keep:
                _close(fd)  # the helper's socket, other zygotes' channels
        linux.close_from(max(keep) + 1)
        payload, fds = _recv(control, 16)
        if not payload:
            os._exit(0)
        control.close()
    except BaseException:  # noqa: BLE001
        os._exit(0)
    _zygote(json.loads(payload), fds[1:], socket.socket(fileno=fds[0]), handoff)


def _take_handoff(state: _State, fd: int, poller) -> None:
    """A zygote that is about to exit gives us the commands it still runs, and their sockets."""
    sock = state.handoffs[fd]
    try:
        payload, fds = _recv(sock, 1024)
    except InterruptedError:
        return
    if not payload:  # the zygote is gone
        poller.unregister(fd)
        del state.handoffs[fd]
        sock.close()
        return
    for pid, reply_fd in zip(json.loads(payload), fds):
        reply = socket.socket(fileno=reply_fd)
        if pid in state.unclaimed:
            _send(reply, f"S {state.unclaimed.pop(pid)}".encode())
            reply.close()
        else:
            state.watched[pid] = reply


def _zygote(request: dict, fds: list[int], channel: socket.socket, handoff: socket.socket) -> None:
    try:
        unblock = None  # with layers: bwrap's --userns-block-fd, written once they are ready
        early = None  # asked for before the sandbox's pid 1 existed: how to reach it once it runs
        if not fds:  # its pidfd comes now, with pid 1's readiness pipe
            payload, fds = _recv(channel, 3)
            if not payload or len(fds) < 2:  # the start failed, or our owner is gone
                os._exit(0)
            if request.get("layers") and len(fds) == 3:
                unblock = fds.pop()
            # the host's /proc and pid 1's pid there, taken before the join hides them
            early = (fds.pop(), os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), _pid_of(fds[0]))
        if request.get("cgroup"):  # first: once joined, the sandbox's cgroup namespace hides the way there
            _write_all(request["cgroup"], str(os.getpid()))
        if request["take_uid_0"]:
            os.setgroups([])  # root's groups, here where we may still drop them (the sandbox denies setgroups)
        # the sandbox's first zygote only: sysctl (_bound_user_ns), masks (_mask), remounts (_remount)
        sysctl, remounts, masks = (request.get(key) or [] for key in ("sysctl", "remounts", "masks"))
        _join(fds[0], [] if _OWN_PROC else sysctl)
        if request.get("layers"):  # the sandbox's writable layers' own tmpfs, before bwrap mounts them
            if request["take_uid_0"]:  # the folders are the sandbox's uid 0's (mapped: the caller wrote the map)
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
            layers = _mount_layers(*request["layers"])
            if unblock is not None:  # bwrap goes on now: the caller need not wake up in between
                os.write(unblock, b"x")
                os.close(unblock)
            _send(channel, b"L", [layers])
        pick = request.get("pick")  # None: a zygote; else a fork that hands back resize contexts and exits
        # calls the filter refuses, done chrooted
        late = remounts or masks or pick is not None or (sysctl if _OWN_PROC else [])
        _confine_before_root(request, filtered=not late)
        loop = _serving(channel)  # now, not once the root came: the first command waits on what follows it
        if early is not None:  # joined while bwrap still builds the sandbox: its root, once pid 1 runs
            fds.append(_root_of_pid_1(fds[0], *early))
        if request["take_uid_0"]:
            # Joining kept the host's root, which the sandbox does not map: its commands would run
            # as that. Its uid 0 is root's subordinate id (idmap.py), mapped once pid 1 runs (an
            # early zygote joins before bwrap writes the map); the capabilities stay.
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
        os.fchdir(fds[1])
        os.chroot(".")
        if pick is not None:  # chrooted and capable; it runs nothing and exits
            _send(channel, b"K", _pick(pick, fds[2] if request.get("pick_layers") else None))
            os._exit(0)
        for fd in fds:
            os.close(fd)
        if _OWN_PROC and sysctl:
            _bound_user_ns(sysctl, own_proc=True)
        if masks:
            _mask(masks)
        if remounts:
            _remount(remounts)
        if late:
            linux.install_seccomp(_FILTERS[request["nested_userns"]])
        _confine(request)
    except BaseException as exc:  # noqa: BLE001
        _send(channel, f"E could not join the sandbox: {_why(exc)}".encode())
        os._exit(0)
    _send(channel, f"Z {os.getpid()}".encode())
    state = _State()
    try:
        # Forked for a request on its way (Zygote._channel_now): wait for that one as long as the
        # caller waits for its answer, however slow a loaded machine makes the caller.
        _serve(channel, _zygote_request, state, idle=IDLE, loop=loop, first=request.get("first_wait"))
        _last_requests(channel, state, loop[0])
        channel.close()
        _reap(state)
        if state.watched:
            socket.send_fds(handoff, [json.dumps(list(state.watched)).encode()],
                            [reply.fileno() for reply in state.watched.values()])
    finally:
        os._exit(0)


def _last_requests(channel: socket.socket, state: _State, poller) -> None:
    """Idle: stop reading, then answer what came before that. Once our reading end is shut, the
    caller's next send fails at once (EPIPE), undelivered, and it forks another zygote: a request
    is never dropped unread because it crossed our exit."""
    try:
        channel.shutdown(socket.SHUT_RD)
    except OSError:
        return  # our owner is gone
    while _request(channel, _zygote_request, state, poller):  # b"": none queued any more
        pass


def _join(pidfd: int, sysctls: list) -> None:
    """Enter the sandbox's namespaces: its user namespace first, where `sysctls` are written
    (before its mount namespace, where /proc/sys is read-only), then the others."""
    try:
        linux.setns(pidfd, linux.CLONE_NEWUSER)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a kernel before 5.8, which takes no pidfd here
            raise
        pid = _pid_of(pidfd)
        joins = [(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC), flag)
                 for name, flag in linux.NAMESPACES]
        for fd, flag in joins:
            linux.setns(fd, flag)
            os.close(fd)
            if flag == linux.CLONE_NEWUSER:
                _bound_user_ns(sysctls)
        return
    _bound_user_ns(sysctls)
    linux.setns(pidfd, linux.ALL_NAMESPACES & ~linux.CLONE_NEWUSER)


def _bound_user_ns(sysctls: list, own_proc: bool = False) -> None:
    """Set the sandbox's per-user counters (/proc/sys/user/max_inotify_*, ...): the kernel counts
    them per user namespace, and a new one starts unlimited, so the sandbox could otherwise take
    all of the user's on the host. The file shows the namespace of the process that opens it, and
    writing it takes CAP_SYS_RESOURCE there, which we hold just after joining.

    `own_proc`: chrooted in the sandbox, through a detached copy of its own /proc (bwrap's
    read-only /proc/sys over it stays behind). Else through the host's /proc, joined to the user
    namespace alone: there the kernel compares the file's name with every live user namespace's
    (a lookup that grows with the sandboxes live, 6-8 ms beside 3,000); in a procfs of the
    sandbox's own, with its own alone."""
    proc = linux.open_tree("/proc") if own_proc else None
    try:
        for name, value in sysctls:
            try:
                fd = os.open(f"sys/user/{name}" if own_proc else f"/proc/sys/user/{name}", os.O_WRONLY | os.O_CLOEXEC,
                             dir_fd=proc)
            except OSError as exc:  # a container's read-only /proc/sys, a kernel before 4.9: doctor says so
                if exc.errno in (errno.EROFS, errno.ENOENT):
                    return
                raise
            try:
                os.write(fd, str(value).encode())
            finally:
                os.close(fd)
    finally:
        if proc is not None:
            os.close(proc)


def _own_proc() -> bool:
    """Whether this kernel (and whatever filters our calls) has open_tree (Linux 5.2): tried on the
    helper's own / (no copy, no capability needed)."""
    try:
        os.close(linux.open_tree("/", clone=False))
    except OSError:
        return False
    return True


_OWN_PROC = _own_proc()


_KEPT_FLAGS = linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC  # statvfs's bits are these


def _remount(remounts: list) -> None:
    """Remount each [path, options] of the sandbox with those options: each tmpfs with a size and
    an inode count (bwrap cannot size its root or its /dev, nor give any tmpfs an inode count),
    /dev/pts with its most ptys. Done once, by the first zygote, chrooted, holding CAP_SYS_ADMIN
    in the sandbox's namespaces, before any command ran (every path is a mount point bwrap made);
    a remount sets the mount's flags anew, so its own are passed again."""
    for path, options in remounts:
        flags = os.statvfs(path).f_flag & _KEPT_FLAGS
        linux.mount(None, path, linux.MS_REMOUNT | flags, options)


def _mask(masks: list) -> None:
    """Bind each [source, target] of the sandbox read-only (nosuid, nodev: a device bound over a
    file cannot be opened), as bwrap's --ro-bind would, but without reading the mount table
    after each; done as _remount's are, chrooted and before any command ran."""
    for source, target in masks:
        linux.mount(source, target, linux.MS_BIND | linux.MS_REC)
        linux.mount(None, target, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV)


def _mount_layers(target: str, options: str, folders: list = ()) -> int:
    """Mount a tmpfs with `options` (its size and inode count) on `target` in the sandbox's mount
    namespace, joined while bwrap waits to build it, make there the `folders` ([path, mode],
    parents first) its mounts need, and return a descriptor of its root. The writable layers
    bwrap then mounts (the overlay's upper, /testbed, /root) are folders in it, so the kernel holds
    them to its size: a walk of them is only the early warning."""
    linux.mount("tmpfs", target, linux.MS_NOSUID | linux.MS_NODEV, options, fstype="tmpfs")
    root = os.open(target, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path, mode in folders:
            os.mkdir(path, mode, dir_fd=root)
    except BaseException:
        os.close(root)
        raise
    return root


def _pick(paths: list[str], layers: int | None) -> list[int]:
    """Resize contexts (fspick) of the writable layers' tmpfs (`layers`, a descriptor of its root)
    and of the tmpfs mounted at each of `paths` in the sandbox (chrooted there: mount points bwrap
    made, which nothing inside can move or replace). Made here, joined and capable in the sandbox's
    user namespace, as fspick requires; the kernel checks the resize itself against whoever
    reconfigures, and our owner, the namespace's owner, may (budget.py)."""
    picked = [] if layers is None else [linux.fspick(layers)]
    return picked + [linux.fspick(linux.AT_FDCWD, path) for path in paths]


def _root_of_pid_1(pidfd: int, ready: int, proc: int, pid: int) -> int:
    """A descriptor of the sandbox's / for its early zygote, once pid 1 says it runs (a byte on
    `ready`, its readiness pipe; our caller reads the other). Opened by pid in the host's /proc
    (`proc`), and its own since pid 1 (`pidfd`, which our caller checked names bwrap's child) was
    alive after: the check the caller's _open_pid_1 makes."""
    if os.read(ready, 1) != b"x":  # the start failed (EOF), or our owner is gone: the caller says why
        os._exit(0)
    root = os.open(f"{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc)
    signal.pidfd_send_signal(pidfd, 0)
    for fd in (ready, proc):
        os.close(fd)
    return root


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}") as info:
        for line in info:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise OSError(errno.ESRCH, "the sandbox is gone")


def _seal_imports() -> None:
    """No module can be found any more; sys.modules still answers for those already loaded."""
    sys.meta_path.clear()
    sys.path_hooks.clear()
    sys.path.clear()
    sys.path_importer_cache.clear()


def _confine_before_root(request: dict, filtered: bool = True) -> None:
    """What needs no root: done right after the join, so that an early zygote does it while bwrap
    still builds the sandbox. After it no exec can gain a capability (empty bounding set,
    no_new_privs) and the filter is on; the process itself still holds its capabilities, for the
    chroot (which the filter allows), until _confine."""
    if _keyring_error is not None:  # it would still hold the user's keyring: refuse to confine
        raise _keyring_error
    for resource_id, value in request["rlimits"]:
        soft, hard = resource.getrlimit(resource_id)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(resource_id, (value, value))
    linux.drop_bounding_set(_LAST_CAP)
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    if filtered:  # else after _remount, whose mount calls a filter need not allow
        linux.install_seccomp(_FILTERS[request["nested_userns"]])


def _confine(request: dict) -> None:
    """The rest, once chrooted: no capability held any more."""
    linux.drop_held_capabilities()


# ---- a zygote: the sandbox's commands ---------------------------------------------------------

def _zygote_request(request: dict, fds: list[int], reply: socket.socket, state: _State, poller) -> bool:
    """Start a command (True: `reply` is kept, for its status) or bind the proxy's socket."""
    if request["op"] == "listen":
        _listen(request, reply)
        return False
    try:
        pid = (_fork_on_pty if request["ctty"] else _spawn)(request, *fds)
    except OSError as exc:  # cannot change directory, not found, not executable: as a shell says it
        name = request["argv"][0]
        if exc.filename == request["cwd"]:
            message, code = f"cannot change directory to {request['cwd']}: {exc.strerror}", 1
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
            message, code = f"{name}: {'No such file or directory' if '/' in name else 'command not found'}", 127
        else:
            message, code = f"{name}: {exc.strerror}", 126
        _write(fds[2], f"lis-tui: {message}\n")
        _send(reply, f"X {code}".encode())
        return False
    pidfd = os.pidfd_open(pid)  # our child, not reaped yet: it is this process
    try:
        _send(reply, f"P {pid}".encode(), [pidfd])
    finally:
        os.close(pidfd)
    state.watched[pid] = reply
    return True


# A command starts with every signal's default action and none blocked, whatever lis-tui inherited:
# started in the background or under nohup, its SIGINT and SIGHUP were ignored, and a Ctrl-C on a
# command's pty or a `kill -INT` inside did nothing.
_DEFAULTED = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}


def _spawn(request: dict, stdin: int, stdout: int, stderr: int) -> int:
    os.chdir(request["cwd"])  # ours, which the command inherits: this process does one thing at a time
    env = request["env"]
    return os.posix_spawn(_find(request["argv"][0], env.get("PATH", "/usr/bin:/bin")), request["argv"], env,
                          file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate((stdin, stdout, stderr))],
                          setsid=True, setsigdef=_DEFAULTED, setsigmask=())


def _find(name: str, path: str) -> str:
    """The file execvp would run for `name`; FileNotFoundError if there is none."""
    if "/" in name:
        return name
    for directory in path.split(":"):
        candidate = os.path.join(directory or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(errno.ENOENT, "command not found", name)


def _fork_on_pty(request: dict, stdin: int, stdout: int, stderr: int) -> int:
    """A child whose controlling terminal is the pty among its stdio (posix_spawn cannot do that)."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(err_r)
            for target, fd in enumerate((stdin, stdout, stderr)):
                os.dup2(fd, target)
            os.setsid()
            fcntl.ioctl(next(fd for fd in range(3) if os.isatty(fd)), termios.TIOCSCTTY, 0)
            for sig in _DEFAULTED:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            signal.set_wakeup_fd(-1)
            os.chdir(request["cwd"])
            os.closerange(3, err_w)
            linux.close_from(err_w + 1)
            os.execvpe(request["argv"][0], request["argv"], request["env"])
        except OSError as exc:
            os.write(err_w, json.dumps([exc.errno, exc.strerror, exc.filename]).encode())
        except BaseException:  # noqa: BLE001
            pass
        os._exit(127)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as pipe:
        said = pipe.read()
    if said:
        os.waitpid(pid, 0)
        code, text, filename = json.loads(said)
        raise OSError(code, text, filename)
    return pid


def _listen(request: dict, reply: socket.socket) -> None:
    """A socket listening on 127.0.0.1 in the sandbox's network namespace, for the proxy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", request["port"]))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            sock.bind(("127.0.0.1", 0))  # something inside took the usual port
        sock.listen(request["backlog"])
        _send(reply, b"L", [sock.fileno()])


# ---- small things -------------------------------------------------------------------------------

def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__


def _write(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode(errors="replace"))
    except OSError:
        pass


def _write_all(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        f.seek(0)
        return f.read()


if __name__ == "__main__":
    main(int(sys.argv[1]))
