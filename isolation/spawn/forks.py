"""The spawn helper, and the per-sandbox zygotes it forks.

The helper is started once per lis-tui process (`python -I -S helper.py FD OWNER`, which loads this
module; an empty environment, no terminal) and is single-threaded, as joining a user namespace
requires. For a sandbox it forks a zygote, which:
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
(inotify) in its user namespace and SysV IPC in its IPC namespace, and sizes every tmpfs and caps
the ptys, chrooted and still capable, loading the filter after that (see _bound_ns, _remount).
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

import _signal as signal
import _socket as socket
import array
import errno
import fcntl
import gc
import marshal
import os
import resource
import select
import stat
import sys
import termios
import warnings  # noqa: F401 (os.execvpe imports it: it must be loaded before imports are sealed)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402

IDLE = 1.0  # seconds a zygote waits for work before it exits
SPARE_AFTER = 0.05  # seconds without a request after which the helper forks its next spare, unhinted
_FILTERS: dict[bool, linux.SeccompProgram] = {}  # nested_userns -> the filter, sent by our owner at the start
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
        self.starting: _Start | None = None  # a sandbox's first zygote: until pid 1 says it runs
        self.pid_1_failed = ""  # why pid 1 never ran: every request is told


_keyring_error: OSError | None = None  # why the helper has no keyring of its own: each zygote says so


def main(channel_fd: int) -> None:
    global _keyring_error
    helper = os.fork()
    if helper:  # we go, the helper stays: no child of our owner's (spawn._Helper says why)
        socket.socket(fileno=channel_fd).send(f"H {helper}".encode())
        os._exit(0)
    channel = socket.socket(fileno=channel_fd)
    # The syscall filters, built by our owner (which gives bwrap the same one for pid 1): none of
    # that builder's code is in us, nor in every fork of ours.
    filters, _ = _recv(channel, 0)
    if not filters:
        os._exit(0)
    _FILTERS.update((nested, linux.SeccompProgram(program)) for nested, program in marshal.loads(filters).items())
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
    gc.collect()
    linux.malloc_trim()  # what starting up left free: every fork would copy its page tables, and unmap it
    gc.freeze()  # what the collector would touch stays shared with the forks
    state = _State()
    _fork_spare(state)
    _serve(channel, _serve_owner, state, idle=None)
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
        wait = SPARE_AFTER if helper and state.spare is None else first or idle  # _take_handoff: the hint
        events = poller.poll(None if wait is None else wait * 1000)
        if not events:
            if helper:
                _fork_spare(state)
                continue
            return  # idle: the caller hands off what runs
        for fd, _ in events:
            if fd == wake_r:
                _drain(wake_r)
                _reap(state, poller)
            elif state.starting is not None and fd == state.starting.ready:
                state.starting.keeper_said(state, poller)
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
    reply = socket.socket(fileno=fds.pop(0)) if fds else None  # None: a word that wants no answer (a marker's)
    kept = False
    try:
        kept = handle(marshal.loads(payload), fds, reply, state, poller)
    except Exception as exc:  # noqa: BLE001 (told to the caller; a traceback could read files)
        if reply is not None:
            _send(reply, f"E {_why(exc)}".encode())
    finally:
        for fd in fds:
            os.close(fd)
        if not kept and reply is not None:
            reply.close()
    return True


def _reap(state: _State, poller) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = state.watched.pop(pid, None)
        if reply is not None:
            if state.starting is not None:  # a first command, ended before pid 1 said it runs
                state.starting.settle(state, poller)
            _send(reply, f"E {state.pid_1_failed}".encode() if state.pid_1_failed else f"S {status}".encode())
            reply.close()
        elif pid in state.zygotes:
            state.zygotes.discard(pid)
        else:
            state.unclaimed[pid] = status  # handed off, its handoff not read yet


_MSG_CMSG_CLOEXEC = 0x40000000  # Linux's, on every architecture


def _recv(sock: socket.socket, maxfds: int) -> tuple[bytes, list[int]]:
    """A message and the descriptors that came with it, made close-on-exec (a descriptor we are
    handed must never leak into a command). The socket module's C calls only: its Python layer
    (send_fds, recv_fds, the enums) is neither loaded here nor copied into every fork."""
    payload, ancillary, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * maxfds) if maxfds else 0,
                                            _MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return payload, fds.tolist()


def _send(reply: socket.socket, message: bytes, fds: list[int] = ()) -> None:
    try:  # never block on a caller that stopped reading, never die of one that left
        _send_fds(reply, message, fds, socket.MSG_DONTWAIT)
    except OSError:
        pass


def _send_fds(sock: socket.socket, message: bytes, fds, flags: int = 0) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([message], ancillary, flags)


# ---- the helper: a zygote per sandbox -----------------------------------------------------------

def _serve_owner(request: dict, fds: list[int], reply: socket.socket, state: _State, poller) -> bool:
    """A request of our owner's: a zygote, or a sandbox's marker, whose processes end with it (or not)."""
    if request["op"] == "marker":
        (state.markers.add if request["live"] else state.markers.discard)(request["marker"].encode())
        return False
    if reply is None:
        raise ValueError("a request without its reply socket")
    if request.get("marker"):  # a sandbox's first zygote, asked for with its marker (Zygote.start)
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
        _send_fds(control, marshal.dumps(request), [reply.fileno(), *fds])
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
        low, high = sorted((control.fileno(), handoff.fileno()))
        os.closerange(3, low)  # the helper's socket, other zygotes' channels
        os.closerange(low + 1, high)
        os.closerange(high + 1, _FDS_MAX)
        payload, fds = _recv(control, 16)
        if not payload:
            os._exit(0)
        control.close()
    except BaseException:  # noqa: BLE001
        os._exit(0)
    _zygote(marshal.loads(payload), fds[1:], socket.socket(fileno=fds[0]), handoff)


def _take_handoff(state: _State, fd: int, poller) -> None:
    """A zygote that is about to exit gives us the commands it still runs, and their sockets; or
    a sandbox's first zygote says that bwrap builds it now: the next spare is forked then. Its
    fork and the first things it does take most of a millisecond of CPU, which at the start of a
    start, beside bwrap's own start and our owner's, lengthened all of them; while bwrap builds the
    sandbox nothing else runs (SPARE_AFTER, when no such word comes)."""
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
    if payload == b"+":
        if state.spare is None:
            _fork_spare(state)
        return
    for pid, reply_fd in zip(marshal.loads(payload), fds):
        reply = socket.socket(fileno=reply_fd)
        if pid in state.unclaimed:
            _send(reply, f"S {state.unclaimed.pop(pid)}".encode())
            reply.close()
        else:
            state.watched[pid] = reply


def _zygote(request: dict, fds: list[int], channel: socket.socket, handoff: socket.socket) -> None:
    try:
        start = _Start(request, fds, channel) if request.get("start") else None
        if start is not None:  # the sandbox's first zygote, asked for before bwrap ran: it lets pid 1 go
            fds = [start.pid_1()]
        if request.get("cgroup"):  # first: once joined, the sandbox's cgroup namespace hides the way there
            _write_all(request["cgroup"], str(os.getpid()))
        if request["take_uid_0"]:
            os.setgroups([])  # root's groups, here where we may still drop them (the sandbox denies setgroups)
        # the sandbox's first zygote only: sysctl (_bound_ns), binds (_bind), masks (_mask), remounts (_remount)
        sysctl, remounts, masks, binds = (request.get(key) or [] for key in ("sysctl", "remounts", "masks", "binds"))
        _join(fds[0], [] if _OWN_PROC else [pair for pair in sysctl if pair[0].startswith("user/")])
        if start is not None:
            start.layers()
        pick = request.get("pick")  # None: a zygote; else a fork that hands back resize contexts and exits
        # calls the filter refuses, done chrooted
        late = remounts or masks or binds or pick is not None or (sysctl if _OWN_PROC else [])
        _confine_before_root(request, filtered=not late)
        loop = _serving(channel)  # now, not once the root came: the first command waits on what follows it
        if start is not None:  # joined while bwrap still builds the sandbox: its root, once built
            _send(handoff, b"+")  # a quiet moment for the helper to fork its next spare (_take_handoff)
            fds.append(start.root())
            _send(channel, b"U")  # our owner's start returns: its first request comes while we confine ourselves
        if request["take_uid_0"]:
            # Joining kept the host's root, which the sandbox does not map: its commands would run
            # as that. Its uid 0 is root's subordinate id (idmap.py); the capabilities stay.
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
        os.fchdir(fds[1])
        os.chroot(".")
        if pick is not None:  # chrooted and capable; it runs nothing and exits
            _send(channel, b"K", _pick(pick, fds[2] if request.get("pick_layers") else None))
            os._exit(0)
        for fd in fds:
            os.close(fd)
        if sysctl:  # the IPC namespace's here, joined (without open_tree, the user namespace's were at _join)
            _bound_ns(sysctl if _OWN_PROC else [pair for pair in sysctl if not pair[0].startswith("user/")],
                      own_proc=True)
        if binds:  # before the masks, which thus cover whatever a bind might
            _bind(binds)
        if masks:
            _mask(masks)
        if remounts:
            _remount(remounts)
        if late:
            linux.install_seccomp(_FILTERS[request["nested_userns"]])
        _confine(request)
    except _Stop as stop:  # bwrap failed, or our owner gave up on the start: it says why
        _send(channel, f"E {stop}".encode())
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001
        _send(channel, f"E could not join the sandbox: {_why(exc)}".encode())
        os._exit(0)
    _send(channel, f"Z {os.getpid()}".encode())
    state = _State()
    try:
        if start is not None:  # pid 1 says it runs while we serve (_Start.keeper_said)
            state.starting = start
            loop[0].register(start.ready, select.POLLIN)
            if not _waiting(channel):  # no first request: pid 1 goes on now (else once it is served)
                start.let_go()
        # Forked for a request on its way (Zygote._channel_now): wait for that one as long as the
        # caller waits for its answer, however slow a loaded machine makes the caller.
        _serve(channel, _zygote_request, state, idle=IDLE, loop=loop, first=request.get("first_wait"))
        _last_requests(channel, state, loop[0])
        channel.close()
        _reap(state, loop[0])
        if state.watched:
            _send_fds(handoff, marshal.dumps(list(state.watched)), [reply.fileno() for reply in state.watched.values()])
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
    """Enter the sandbox's namespaces: its user namespace first, where `sysctls` (user/ ones) are
    written (before its mount namespace, where /proc/sys is read-only), then the others."""
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
                _bound_ns(sysctls)
        return
    _bound_ns(sysctls)
    linux.setns(pidfd, linux.ALL_NAMESPACES & ~linux.CLONE_NEWUSER)


def _bound_ns(sysctls: list, own_proc: bool = False) -> None:
    """Set the sandbox's per-user counters (/proc/sys/user/max_inotify_*, ...): the kernel counts
    them per user namespace, and a new one starts unlimited, so the sandbox could otherwise take
    all of the user's on the host; and its SysV IPC limits (/proc/sys/kernel/shm*, msgmni, sem),
    per IPC namespace, which a new one starts at the kernel's defaults (shared memory without
    bound). The file shows the namespace of the process that opens it (user/: its user namespace;
    kernel/: its IPC namespace, so only once joined to it), and writing it takes CAP_SYS_RESOURCE
    there (user/) or being its uid 0 (kernel/), as we are just after joining.

    `own_proc`: chrooted in the sandbox, through its own /proc, before our read-only bind over
    /proc/sys (_mask); where bwrap covered /proc/sys itself (run as the host's root, unmapped),
    through a detached copy of that /proc, which the cover does not reach. Else through the host's
    /proc, joined to the user namespace alone: there the kernel compares the file's name with every
    live user namespace's (a lookup that grows with the sandboxes live, 6-8 ms beside 3,000); in a
    procfs of the sandbox's own, with its own alone."""
    if own_proc and _write_sysctls(sysctls, "/proc/sys", None):
        return
    proc = linux.open_tree("/proc") if own_proc and _OWN_PROC else None
    try:
        _write_sysctls(sysctls, "sys" if proc is not None else "/proc/sys", proc)
    finally:
        if proc is not None:
            os.close(proc)


def _write_sysctls(sysctls: list, folder: str, dir_fd: int | None) -> bool:
    """False where the files are read-only (a cover over them); True once written, or where the
    kernel has none (a container's read-only /proc/sys, a kernel before 4.9: doctor says so), or
    keeps SysV's to the host's root (an older kernel: doctor says so)."""
    for name, value in sysctls:
        try:
            fd = os.open(f"{folder}/{name}", os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.EROFS and dir_fd is None:
                return False
            if exc.errno in (errno.EROFS, errno.ENOENT):
                return True
            if exc.errno in (errno.EACCES, errno.EPERM) and name.startswith("kernel/"):
                continue
            raise
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)
    return True


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


def _bind(binds: list) -> None:
    """Bind each [source, target] of the sandbox at target, writable, with every mount under the
    source (a read-only .git, a credential's /dev/null mask: the second name shows what the first
    does), making the target's missing folders (mode 755) on the way. Done chrooted, as _mask's
    are, so every path resolves inside the sandbox's root; and without following a link, so that
    nothing a kept session left on the way (a link to /proc/sys, to /tmp) decides where it goes."""
    for source, target in binds:
        here = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in target.strip("/").split("/"):
                found = _folder_at(here, part, target)
                os.close(here)
                here = found
            os.fchdir(here)  # the target by its descriptor: our /proc/self is not in the sandbox's /proc
            linux.mount(source, ".", linux.MS_BIND | linux.MS_REC)
        finally:
            os.close(here)
            os.chdir("/")


def _folder_at(parent: int, name: str, target: str) -> int:
    """A descriptor of the folder `name` in `parent`, made (mode 755) if missing; never through a link."""
    try:
        try:
            return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=parent)  # nothing of the sandbox's runs yet to race us
            return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
    raise _Stop(f"the project's own path {target} cannot be made inside: {name!r} on the way is a link or "
                "a file there (a kept session made it so, or the rootfs has it). Fix: start a new session, or "
                "use another rootfs")


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


class _Stop(Exception):
    """The start cannot go on: bwrap failed or is gone (the message is `bwrap`: its stderr says
    why), a step of ours failed (the message names it), or our owner gave up on it."""


class _Start:
    """The sandbox's first zygote starts it. Asked for before bwrap runs (Zygote.start), with the
    pipes bwrap is given, it takes bwrap's child from its first moment: checks it, sets pid 1's
    limits, admits it to its cgroup, writes its uid and gid maps (bwrap waits on
    --userns-block-fd meanwhile), joins it, mounts the writable layers' tmpfs and lets bwrap go
    on; then waits for bwrap to have built the sandbox, chroots and confines itself while pid 1
    execs, and answers once pid 1 says it runs. Our owner's process sleeps through all of it."""

    def __init__(self, request: dict, fds: list[int], channel: socket.socket) -> None:
        self.request, self.channel = request, channel
        self.info, self.block, self.ready, self.err, self.filter = fds[:5]  # err: bwrap's stderr, a memfd
        self.userns = fds[5] if len(fds) > 5 else None  # None: our owner lets bwrap go (a kept session's layers first)
        self.proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # the host's, before the join hides it
        self.pid, self.pidfd = 0, -1

    def pid_1(self) -> int:
        """A pidfd of bwrap's child, pid 1 to be, once it is checked, limited, admitted and mapped."""
        payload, fds = _recv(self.channel, 1)  # bwrap's pidfd, with its pid, the layers and the cgroup
        if not payload or len(fds) != 1:
            raise _Stop("the start was given up")
        told = marshal.loads(payload)
        bwrap, bwrap_pid = fds[0], told["bwrap"]
        self.request.update(layers=told["layers"], cgroup=told["cgroup"])
        self.pid = _named_child(self.info)
        try:
            self.pidfd = os.pidfd_open(self.pid)
            fd = os.open(f"{self.pid}/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc)
            try:
                parent = int(os.read(fd, 1024).rsplit(b")", 1)[1].split()[1])
            finally:
                os.close(fd)
            signal.pidfd_send_signal(self.pidfd, 0)  # alive now, so the stat read was its own
            signal.pidfd_send_signal(bwrap, 0)  # bwrap not reaped: the parent's pid is still its own
        except (OSError, ValueError, IndexError):
            raise _Stop("bwrap") from None
        finally:
            os.close(bwrap)
        if parent != bwrap_pid:
            raise _Stop("bwrap")
        if self.request.get("cgroup"):  # here: once joined, the sandbox's cgroup namespace hides the way there
            try:
                _write_all(self.request["cgroup"], str(self.pid))
            except ProcessLookupError:
                raise _Stop("bwrap") from None
            except OSError as exc:
                raise _Stop(f"cgroup {_why(exc)}") from None
        owner = self.request["owner"]
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {owner[0]} 1\n"), ("gid_map", f"0 {owner[1]} 1\n")):
            _write_all(f"{self.pid}/{name}", text, dir_fd=self.proc)
        return self.pidfd

    def _limit(self) -> None:
        """pid 1's limits, every command's too: set from here, since no code of ours runs in it, before it
        execs (it waits on --block-fd). Joined, we are its uid (a root caller's subordinate id), which
        may set them where a root without CAP_SYS_RESOURCE may not."""
        try:
            for res, value in self.request["rlimits"]:
                _, hard = resource.prlimit(self.pid, res)  # its own, inherited from our owner through bwrap
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.prlimit(self.pid, res, (value, value))
        except ProcessLookupError:
            raise _Stop("bwrap") from None
        except (OSError, ValueError) as exc:  # ValueError: a resource this kernel does not know
            raise _Stop(f"limits {_why(exc)}") from None
        os.write(self.block, b"x")  # bwrap may exec pid 1 once it has built the sandbox (root waits for that)

    def layers(self) -> None:
        """Joined, before bwrap builds anything: the writable layers' tmpfs mounted and its folders
        made in the sandbox's mount namespace (_mount_layers); then bwrap goes on, and our owner
        hears the pid (with a pidfd of it, and a descriptor of the layers' root)."""
        fds = [self.pidfd]
        if self.request["take_uid_0"]:  # the sandbox's uid 0 (mapped: we wrote the map), whose the folders are
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
        if self.request.get("layers"):
            try:
                fds.append(_mount_layers(*self.request["layers"]))
            except OSError as exc:
                raise _Stop(f"layers {_why(exc)}") from None
        _send(self.channel, f"L {self.pid}".encode(), fds)  # before bwrap goes on: our owner can kill pid 1 from now
        for fd in fds[1:]:
            os.close(fd)
        if self.userns is not None:
            os.write(self.userns, b"x")
            os.close(self.userns)
        self._limit()  # while bwrap builds the sandbox

    def root(self) -> int:
        """A descriptor of the sandbox's /, once bwrap has built it. Its child reads the byte on
        --block-fd then, after its last mount and before its filter and its exec: the one slot of
        that pipe (Zygote.start sizes it) frees, and our end turns writable; an error alone is a
        bwrap gone with the byte untaken. Opened by pid in the host's /proc, and its own since
        pid 1 was alive after: the check the caller's _open_pid_1 makes."""
        poller = select.poll()
        poller.register(self.block, select.POLLOUT)
        while not (events := poller.poll()):
            pass
        if not events[0][1] & select.POLLOUT:
            raise _Stop("bwrap")
        try:
            root = os.open(f"{self.pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.proc)
            signal.pidfd_send_signal(self.pidfd, 0)
        except OSError:
            raise _Stop("bwrap") from None
        for fd in (self.block, self.proc, self.info):
            os.close(fd)
        return root

    def let_go(self) -> None:
        """pid 1's filter, written to bwrap, which loads it and execs the keeper: after the first
        command started (or at once when none waits), so that the keeper's start does not take the
        CPU that command's start waits for. Till then bwrap's child waits on this pipe, having built
        the sandbox; nothing a command holds reaches it (keeper_said). Our death closes the pipe
        empty, and bwrap, given no filter, ends there: pid 1 never runs unfiltered."""
        if self.filter >= 0:
            try:
                os.write(self.filter, _FILTERS[self.request["nested_userns"]].program)
            except OSError:  # bwrap is gone: keeper_said hears it
                pass
            os.close(self.filter)
            self.filter = -1

    def settle(self, state: _State, poller) -> None:
        """A first request is to be answered before pid 1 said it runs (a command ended or could
        not start, a listen): hear pid 1 first, let go now if it was not, so that the answer is
        the sandbox's failure if bwrap could not exec pid 1 (the kernel killed the command with
        the namespace then, or it ended just before)."""
        self.let_go()
        said = select.poll()
        said.register(self.ready, select.POLLIN)
        if said.poll(10_000):
            self.keeper_said(state, poller)

    def keeper_said(self, state: _State, poller) -> None:
        """pid 1 said it runs (a byte on its readiness pipe), or bwrap failed to exec it (EOF): then
        every request is told why (bwrap's stderr), and pid 1's end took any command along.

        A command may start before that byte: once bwrap has built the sandbox (root) and we are
        confined, bwrap's child is left with its filter to load and pid 1 to exec, reachable by
        nothing a command holds. Its argv names no host path (launch.py: --args), and it holds the
        one capability no command holds, which keeps its /proc links out of their reach."""
        poller.unregister(self.ready)
        state.starting = None
        if os.read(self.ready, 1) != b"x":
            said = os.pread(self.err, 4096, 0).decode(errors="replace").strip() or "bwrap exited"
            # the words spawn.PID_1_FAILED names
            state.pid_1_failed = f"the sandbox's pid 1 did not start: {said}"
        os.close(self.ready)
        os.close(self.err)


def _named_child(info: int) -> int:
    """bwrap's child's pid, which bwrap names on `info` as soon as it has cloned it: the number
    after `"child-pid":` in its JSON (the json package is not loaded here)."""
    data = b""
    while b"}" not in data and (chunk := os.read(info, 4096)):
        data += chunk
    try:
        return int(data.split(b'"child-pid":', 1)[1].split(b",", 1)[0].split(b"}", 1)[0])
    except (ValueError, IndexError):
        raise _Stop("bwrap") from None


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
    """Start a command (True: `reply` is kept, for its status) or bind the proxy's socket; the
    sandbox's first request served, its pid 1 may exec (_Start.let_go)."""
    try:
        return _serve_request(request, fds, reply, state, poller)
    finally:
        if state.starting is not None:
            state.starting.let_go()


def _waiting(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _serve_request(request: dict, fds: list[int], reply: socket.socket, state: _State, poller) -> bool:
    if request["op"] == "listen" and state.starting is not None:  # a first request with no end to tell
        state.starting.settle(state, poller)  # so its answer says whether pid 1 runs
    if state.pid_1_failed:
        _send(reply, f"E {state.pid_1_failed}".encode())
        return False
    if request["op"] == "listen":
        _listen(request, reply)
        return False
    try:
        pid = (_fork_on_pty if request["ctty"] else _spawn)(request, *fds)
    except OSError as exc:  # cannot change directory, not found, not executable: as a shell says it
        if state.starting is not None:  # or pid 1 is gone (a fork into its namespace fails, ENOMEM)
            state.starting.settle(state, poller)
        if state.pid_1_failed:
            _send(reply, f"E {state.pid_1_failed}".encode())
            return False
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
_FDS_MAX = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # closerange's end: every descriptor a process may hold


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
        candidate = f"{directory or '.'}/{name}"
        if os.access(candidate, os.X_OK) and not stat.S_ISDIR(os.stat(candidate).st_mode):
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
            os.closerange(err_w + 1, _FDS_MAX)
            os.execvpe(request["argv"][0], request["argv"], request["env"])
        except OSError as exc:
            os.write(err_w, marshal.dumps((exc.errno, exc.strerror, exc.filename)))
        except BaseException:  # noqa: BLE001
            pass
        os._exit(127)
    os.close(err_w)
    with os.fdopen(err_r, "rb") as pipe:
        said = pipe.read()
    if said:
        os.waitpid(pid, 0)
        code, text, filename = marshal.loads(said)
        raise OSError(code, text, filename)
    return pid


def _listen(request: dict, reply: socket.socket) -> None:
    """A socket listening on 127.0.0.1 in the sandbox's network namespace, for the proxy."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", request["port"]))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            sock.bind(("127.0.0.1", 0))  # something inside took the usual port
        sock.listen(request["backlog"])
        _send(reply, b"L", [sock.fileno()])
    finally:
        sock.close()


# ---- small things -------------------------------------------------------------------------------

def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__


def _write(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode(errors="replace"))
    except OSError:
        pass


def _write_all(path: str, text: str, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


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
