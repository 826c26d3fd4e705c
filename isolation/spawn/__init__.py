"""Start processes inside a running sandbox: a zygote per sandbox, forked by one spawn helper.

`Zygote` asks the helper (helper.py, started on first use, once per process,
with an empty environment) for a process joined to the sandbox and confined as its commands are;
`Zygote.spawn()` then runs commands there and returns a `Joined`, which answers the part of
`subprocess.Popen` that lis-tui uses (pid, stdin/stdout/stderr, poll, wait, kill, send_signal,
returncode). The helper ends when we close our end of its socket or die; a zygote when its
sandbox closes it.

May import: isolation.output. helper.py, forks.py, linux.py and seccomp.py use the standard
library only: the helper loads them by path, before anything of ours.
"""
from __future__ import annotations

import errno
import functools
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable

from ..output import ready
from . import seccomp

PIPE, DEVNULL = subprocess.PIPE, subprocess.DEVNULL
REPLY_TIMEOUT = 30.0
_INLINE_MAX = 1 << 15  # bigger requests travel in a memfd
PID_1_FAILED = "the sandbox's pid 1 did not start"
"""How a command's error begins when bwrap never ran pid 1 (forks._Start.keeper_said)."""
_helper: _Helper | None = None
_helper_lock = threading.Lock()


@functools.lru_cache(maxsize=2)
def filter_program(nested_userns: bool) -> bytes:
    """The syscall filter of every process in a sandbox (seccomp.py), built once per process: bwrap
    loads it for pid 1, the helper for its zygotes."""
    return seccomp.program(nested_userns=nested_userns)


class SpawnError(OSError):
    """The sandbox could not be joined (it is gone, or this kernel refuses): the message says why."""


class _Gone(SpawnError):
    """The zygote had exited (idle) before it read the request: nothing was started."""


class _Helper:
    """The helper process and our end of its socket.

    The process we start forks the helper and exits, so that the helper is no child of ours: a
    supervisor that kills its worker's children when the worker ends (Ray does, by default)
    would otherwise kill it with us, before it could end the sandboxes we leave (forks.py,
    _end_sandboxes). It is told its owner is gone by its socket, not by its parent; its argv
    names its owner's pid last, for whoever looks (ps, the tests' process trees)."""

    def __init__(self) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helper.py")
        # Its own session, so a Ctrl-C meant for lis-tui's foreground job does not kill it; an
        # empty environment and no terminal, so nothing of ours (an API key, the user's tty) is
        # in any process it forks.
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", script, str(theirs.fileno()), str(os.getpid())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={},
                                     start_new_session=True)
        theirs.close()
        # Its first message: the syscall filters its zygotes load, the one bwrap gives pid 1
        # (seccomp.py builds them here, so that the helper and its forks hold none of that code).
        self.channel.send(marshal.dumps({nested: filter_program(nested) for nested in (False, True)}))
        self._pid: int | None = None
        threading.Thread(target=self.proc.wait, name="lis-helper-reap", daemon=True).start()  # it exits at once

    def alive(self) -> bool:
        poller = select.poll()
        poller.register(self.channel, select.POLLRDHUP)
        return not poller.poll(0)  # (a hangup is always reported): its end closed, it is gone

    @property
    def pid(self) -> int:
        """The helper's pid, which the process we started sends first on the socket."""
        if self._pid is None:
            if not ready([self.channel.fileno()], REPLY_TIMEOUT):
                raise SpawnError(0, "the spawn helper did not start in time")
            self._pid = int(self.channel.recv(64, socket.MSG_DONTWAIT).split()[1])
        return self._pid


def start_helper() -> None:
    """Start this process's spawn helper now, where none runs, rather than at the first sandbox's
    start: its own interpreter's start (about 10 ms) then overlaps the caller's work before that
    (`lis-tui exec` reading its config and importing the sandbox's code)."""
    global _helper
    with _helper_lock:
        if _helper is None or not _helper.alive():
            _helper = _Helper()


def _helper_send(request: dict, fds: list[int]) -> None:
    global _helper
    for attempt in (1, 2):
        with _helper_lock:
            if _helper is None or not _helper.alive():
                _helper = _Helper()
            helper = _helper
        try:
            return _send(helper.channel, request, fds)
        except (BrokenPipeError, ConnectionResetError):  # it is gone: alive() says so from now on
            if attempt == 2:
                raise SpawnError(0, "the spawn helper keeps dying; run `lis-tui doctor`") from None


def _send(channel: socket.socket, request: dict, fds: list[int]) -> None:
    payload = marshal.dumps(request)  # the helper is this interpreter (sys.executable): its loads are C
    memfd = None
    if len(payload) > _INLINE_MAX:
        memfd = os.memfd_create("lis-request", os.MFD_CLOEXEC)
        os.write(memfd, payload)  # a memfd takes it in one write
        payload, fds = b"@", [*fds, memfd]
    try:
        socket.send_fds(channel, [payload], fds)
    finally:
        if memfd is not None:
            os.close(memfd)


def _ask(send, request: dict, fds: list[int], maxfds: int = 1) -> tuple[socket.socket, bytes, list[int]]:
    """Send a request with a fresh reply socket first among its descriptors; the first answer."""
    return _answer(_posted(send, request, fds), maxfds)


def _posted(send, request: dict, fds: list[int]) -> socket.socket:
    """Send a request with a fresh reply socket first among its descriptors; our end of that socket.
    _Gone if the other end had stopped reading (a zygote that exited idle): nothing was delivered."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            send(request, [theirs.fileno(), *fds])
        except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError):
            raise _Gone(0, "the sandbox's spawner is gone") from None
        finally:
            theirs.close()
    except BaseException:
        ours.close()
        raise
    return ours


def _answer(ours: socket.socket, maxfds: int = 1, timeout: float = REPLY_TIMEOUT) -> tuple[socket.socket, bytes, list[int]]:
    """The first answer on `ours`, a reply socket (closed if that answer is an error, or none came in time)."""
    try:
        ours.settimeout(timeout)
        try:
            message, got, flags, _ = socket.recv_fds(ours, 4096, maxfds)
            for fd in got:  # recv_fds cannot ask for MSG_CMSG_CLOEXEC
                os.set_inheritable(fd, False)
            if flags & socket.MSG_CTRUNC:  # the kernel could not give us its descriptor: we have too many
                for fd in got:
                    os.close(fd)
                raise SpawnError(errno.EMFILE, "lis-tui has too many open files (RLIMIT_NOFILE) to take the "
                                 "command's descriptor; raise it (`ulimit -n`) or close sandboxes")
        except socket.timeout:
            raise SpawnError(0, "the spawn helper did not answer in time") from None
        ours.settimeout(None)
    except BaseException:
        ours.close()
        raise
    if message.startswith(b"E ") or not message:
        ours.close()
        for fd in got:
            os.close(fd)
        if not message:  # the request was dropped unread
            raise _Gone(0, "the sandbox's spawner is gone")
        raise SpawnError(0, message[2:].decode(errors="replace"))
    return ours, message, got


def end_with_us(marker: str, live: bool = True) -> None:
    """Have the spawn helper kill every process with `marker` (a sandbox's, in the argv of its bwrap
    and pid 1) if this process dies while it lives (`live=False`: it was closed). Told before bwrap
    starts, so no moment is left uncovered. Best effort: without a helper, nothing."""
    with _helper_lock:
        helper = _helper if _helper is not None and _helper.alive() else None
    if helper is None and not live:  # none to forget it: none would kill it
        return
    try:
        _helper_send({"op": "marker", "marker": marker, "live": live}, [])  # no answer comes
    except OSError:
        pass


class _Hangups:
    """One thread per process that closes our end of a zygote's channel once the zygote is gone
    (it exits when idle for helper.IDLE, or with its sandbox): an idle sandbox then holds no
    descriptor for it, and the next request forks a new one."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._epoll = select.epoll()
        self._zygotes: dict[int, Zygote] = {}  # channel's descriptor -> its zygote
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="lis-zygote-hangups", daemon=True).start()

    def add(self, zygote: Zygote, channel: socket.socket) -> None:
        with self._lock:
            self._zygotes[channel.fileno()] = zygote
            try:
                self._epoll.register(channel, select.EPOLLRDHUP | select.EPOLLONESHOT)
            except FileExistsError:  # a closed one's number, still listed: rearm it for this one
                self._epoll.modify(channel, select.EPOLLRDHUP | select.EPOLLONESHOT)

    def forget(self, fd: int) -> None:
        """Before our end, on `fd`, is closed (its zygote's lock held), or after (closed, it left the epoll)."""
        with self._lock:
            self._zygotes.pop(fd, None)
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass  # not listed

    def _run(self) -> None:
        while True:
            for fd, _ in self._epoll.poll():
                with self._lock:
                    zygote = self._zygotes.pop(fd, None)
                if zygote is not None:
                    try:
                        zygote._hung_up(fd)
                    except Exception:  # noqa: BLE001 (this thread must go on: that channel closes with its sandbox)
                        pass


_hangups: _Hangups | None = None


def _hangups_here() -> _Hangups | None:
    """This process's _Hangups, if it made one (a forked child has no thread of its parent's)."""
    hangups = _hangups
    return hangups if hangups is not None and hangups.pid == os.getpid() else None


def _watch_hangup(zygote: Zygote, channel: socket.socket) -> None:
    global _hangups
    with _helper_lock:
        if _hangups_here() is None:
            _hangups = _Hangups()
        hangups = _hangups
    hangups.add(zygote, channel)


def channels_open() -> int:
    """Our ends of zygotes' channels open now: one descriptor each, for about helper.IDLE after
    a sandbox's last request (capacity.py counts them)."""
    hangups = _hangups_here()
    return len(hangups._zygotes) if hangups is not None else 0


def _forget_hangup(fd: int) -> None:
    hangups = _hangups_here()
    if hangups is not None:
        hangups.forget(fd)


# What only the sandbox's first zygote does (Zygote.__init__), emptied once one has answered.
_ONCE = {"sysctl": [], "remounts": [], "masks": [], "binds": []}


class Zygote:
    """Starts commands in one sandbox through a process joined to it and confined as its
    commands are before it runs anything (forks.py). That process exits when idle; the next
    request forks a new one. Close this when the sandbox closes."""

    def __init__(self, rlimits: list[tuple[int, int]] = (), nested_userns: bool = False, cgroup: str | None = None,
                 sysctl: list[tuple[str, int | str]] = (), remounts: list[tuple[str, str]] = (),
                 masks: list[tuple[str, str]] = (), take_uid_0: bool = False,
                 binds: list[tuple[str, str]] = ()) -> None:
        """For a sandbox still starting: set_root says how to reach it once it runs (before that,
        only start and launched). `cgroup`: the sandbox's cgroup.procs, which each zygote
        enters before it joins (cgroup.py). Done once, by the first zygote that gets ready:
        `sysctl`, (name, value) of /proc/sys/ files to set in the sandbox's namespaces (user/: its
        user namespace's, kernel/: its IPC namespace's);
        `remounts`, (mount point, options) of each mount to remount with those options (tmpfs
        sizes, the ptys' cap); `masks`, (source, target) of each read-only bind to make; `binds`,
        (source, target) of each writable bind to make first, its target's folders made (confined
        waits for all of them). `take_uid_0`: we are root and the sandbox's uid 0 is another id
        (idmap.py): the zygote drops root's groups and takes the sandbox's uid and gid 0."""
        self._fork = {"op": "zygote", "rlimits": list(rlimits), "nested_userns": nested_userns, "cgroup": cgroup,
                      "sysctl": list(sysctl), "remounts": list(remounts), "masks": list(masks),
                      "binds": list(binds), "take_uid_0": take_uid_0}
        self._open_pid_1: Callable[[], tuple[int, int]] | None = None
        self._channel: socket.socket | None = None
        self._starting = False  # _channel's zygote starts the sandbox (start); its last answer is unread
        self._lock = threading.Lock()
        self._pid: int | None = None
        self.failed = ""  # why the sandbox's pid 1 never ran (PID_1_FAILED), once a zygote said so

    @property
    def pid(self) -> int | None:
        """The live zygote's pid, if there is one (it is not in the sandbox's pid namespace);
        an early zygote's once it has answered (this waits for that)."""
        with self._lock:
            self._settle_early()
            return self._pid

    def _settle_early(self, timeout: float = REPLY_TIMEOUT) -> None:
        """Read the starting zygote's last answer (with the lock held); on failure the channel
        goes, and the error is kept for confined() to raise."""
        if self._starting:
            self._starting = False
            fd = self._channel.fileno()
            try:
                _, message, _ = _answer(self._channel, timeout=timeout)
                self._pid = int(message.split()[1])
                self._fork.update(_ONCE)  # done for the sandbox: once is enough
            except OSError:  # its once-only work is left to the next zygote (confined)
                if self._channel.fileno() >= 0:  # _answer closes it on an error of the zygote's
                    self._drop_channel()
                else:
                    _forget_hangup(fd)
                    self._channel, self._pid = None, None

    def start(self, pipes: list[int], owner: tuple[int, int], marker: str | None = None) -> None:
        """Have the helper fork the sandbox's first zygote now, before bwrap runs, with the ends of
        bwrap's pipes it needs (forks._Start: the info fd's read end, --block-fd's write end, pid
        1's readiness pipe's read end, bwrap's stderr, the write end of pid 1's filter pipe and, unless the caller lets bwrap go itself,
        the write end of --userns-block-fd): that zygote then starts the sandbox while our process
        sleeps. `owner`: the ids outside of the sandbox's uid and gid 0, for its maps. `marker`:
        the sandbox's, told to the helper with this request, as end_with_us tells it (one message)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {**self._fork, "start": True, "owner": list(owner), "marker": marker}
        try:
            _helper_send(request, [theirs.fileno(), *pipes])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        with self._lock:
            self._channel, self._starting = ours, True

    def launched(self, bwrap: subprocess.Popen, layers: tuple[str, str, list] | None = None, cgroup: str | None = None,
                 timeout: float = REPLY_TIMEOUT) -> tuple[int, int, int | None]:
        """bwrap runs: the starting zygote is told (with a pidfd of it), and once it has let bwrap
        go on this returns (pid 1's pid, a pidfd of it, the writable layers' root or None).
        `layers`: (mount point, options, folders) of the writable layers' tmpfs it mounts first.
        `cgroup`: the sandbox's cgroup.procs (see __init__). SpawnError when it could not: its
        message is `bwrap` when bwrap failed (bwrap's stderr says why), else the step that failed."""
        with self._lock:
            channel = self._channel
            self._fork["cgroup"] = cgroup
        pidfd = os.pidfd_open(bwrap.pid)
        try:
            told = {"bwrap": bwrap.pid, "layers": list(layers) if layers else None, "cgroup": cgroup}
            message, got = self._start_step(channel, timeout, maxfds=2, send=(marshal.dumps(told), [pidfd]))
        finally:
            os.close(pidfd)
        return int(message.split()[1]), got[0], got[1] if len(got) > 1 else None

    def built(self, timeout: float = REPLY_TIMEOUT) -> None:
        """Return once bwrap has built the sandbox (the starting zygote's word): the zygote confines
        itself now, and a request sent from here on waits in its channel until it is. SpawnError
        as for launched."""
        with self._lock:
            channel = self._channel
        self._start_step(channel, timeout)  # "U"

    def _start_step(self, channel: socket.socket, timeout: float, maxfds: int = 1,
                    send: tuple[bytes, list[int]] | None = None) -> tuple[bytes, list[int]]:
        """The starting zygote's answer to one step of the start (`send`: what it is told first, a
        message and descriptors); on any failure the channel goes and SpawnError says why."""
        try:
            if send is not None:
                socket.send_fds(channel, [send[0]], send[1])
            _, message, got = _answer(channel, maxfds=maxfds, timeout=timeout)
        except OSError as exc:
            with self._lock:
                self._starting = False
                self._channel = None
            channel.close()  # _answer closed it already, unless the send failed
            if isinstance(exc, SpawnError):
                raise
            raise SpawnError(0, "the sandbox's spawner is gone") from None
        return message, got

    def set_root(self, open_pid_1: Callable[[], tuple[int, int]]) -> None:
        """How to reach the sandbox, now running, for every later zygote: `open_pid_1()` returns
        new descriptors of its pid 1 (a pidfd) and of its /, which each zygote's fork is handed
        and this closes (none is kept open between them). The starting zygote took them itself."""
        with self._lock:
            self._open_pid_1 = open_pid_1
            if self._starting:
                _watch_hangup(self, self._channel)  # its answer is read by confined(), next

    def confined(self, timeout: float = REPLY_TIMEOUT) -> None:
        """Return once a zygote of the sandbox's has done its once-only work (the counters, the
        remounts, the masks) and is confined: the starting zygote's last answer read, or, where that
        one failed, a zygote forked now. Until then a host-side file operation could reach the
        sandbox's /proc/sys unmasked. SpawnError when no zygote could do it."""
        with self._lock:
            self._settle_early(timeout)
            if any(self._fork[key] for key in _ONCE):
                self._channel_now()

    def _channel_now(self) -> socket.socket:
        """The live zygote's channel, forking one if there is none (with the lock held). The
        starting zygote's is used as it is: it reads requests once it is confined."""
        if self._channel is None:
            fds = self._open_pid_1()
            try:
                # first_wait: the zygote waits for the request it is forked for, however long a
                # loaded machine keeps us from sending it (its idle exit comes after that one)
                self._channel, message, _ = _ask(_helper_send, {**self._fork, "first_wait": REPLY_TIMEOUT},
                                                 list(fds))
            finally:
                for fd in fds:
                    os.close(fd)
            self._pid = int(message.split()[1])
            self._fork.update(_ONCE)
            _watch_hangup(self, self._channel)
        return self._channel

    def _call(self, request: dict, fds: list[int]) -> tuple[socket.socket, bytes, list[int]]:
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            # The send holds the lock that _hung_up closes the channel under: a descriptor is never
            # closed (nor its number reused) under a send. A zygote that exited idle had shut its
            # reading end first, so a request either reached it (and is answered) or failed here,
            # undelivered: the exit and the request cannot cross, and another zygote takes it.
            with self._lock:
                channel = self._channel_now()
                try:
                    ours = _posted(lambda req, f: _send(channel, req, f), request, fds)
                except _Gone:
                    ours = None
                    if self._channel is channel:
                        self._drop_channel()
            if ours is not None:
                try:
                    return _answer(ours)
                except _Gone:  # it died with the request unread (killed): nothing was started
                    with self._lock:
                        if self._channel is channel:
                            self._drop_channel()
                except SpawnError as exc:
                    if exc.strerror.startswith(PID_1_FAILED):
                        self.failed = exc.strerror
                    raise
            if time.monotonic() > deadline:
                raise SpawnError(0, "the sandbox's spawner keeps exiting; run `lis-tui doctor`")

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: str, stdin: Any = None, stdout: Any = None,
              stderr: Any = None, ctty: bool = False) -> Joined:
        """Run `argv` in a new session; stdio as for subprocess.Popen (PIPE, DEVNULL, None: ours,
        a descriptor or a file). `ctty`: the first of them that is a pty becomes its controlling terminal."""
        ends = [_stdio(spec, n) for n, spec in enumerate((stdin, stdout, stderr))]
        request = {"op": "exec", "argv": list(argv), "env": env, "cwd": cwd, "ctty": ctty}
        try:
            reply, message, got = self._call(request, [child for child, _ in ends])
        except BaseException:
            for _, ours in ends:
                if ours is not None:
                    ours.close()
            raise
        finally:
            for (child, ours), spec in zip(ends, (stdin, stdout, stderr)):
                if ours is not None or spec == DEVNULL:
                    os.close(child)  # the zygote has its own copy now
        streams = [ours for _, ours in ends]
        if message.startswith(b"X "):  # it could not be started; the reason is on its stderr
            reply.close()
            return Joined(argv, None, -1, None, *streams, returncode=int(message.split()[1]))
        return Joined(argv, int(message.split()[1]), got[0], reply, *streams, zygote=self)

    def pick(self, paths: list[str], layers: int | None = None) -> list[int]:
        """Resize contexts (fspick) of the sandbox's tmpfs: its layers' (`layers`: a descriptor of
        their root) first, then those mounted at `paths`. A fork of the helper's joins the sandbox,
        capable, makes them and exits (helper._pick); their holder resizes with linux.reconfigure."""
        open_pid_1 = self._open_pid_1
        if open_pid_1 is None:
            raise SpawnError(0, "the sandbox is still starting")
        self.confined()  # its tmpfs sized first: a resize before would be undone
        request = {**self._fork, **_ONCE, "pick": list(paths), "pick_layers": layers is not None}
        fds = open_pid_1()
        try:
            reply, _, got = _ask(_helper_send, request, [*fds, *([] if layers is None else [layers])],
                                 maxfds=len(paths) + 1)
        finally:
            for fd in fds:
                os.close(fd)
        reply.close()
        return got

    def listen(self, port: int, backlog: int) -> socket.socket:
        """A TCP socket listening on 127.0.0.1:`port` (any free port if taken) in the sandbox's
        network namespace: made in there, used from here."""
        reply, _, got = self._call({"op": "listen", "port": port, "backlog": backlog}, [])
        reply.close()
        return socket.socket(fileno=got[0])

    def close(self) -> None:
        """The zygote exits; commands it started live on until the sandbox closes."""
        with self._lock:
            if self._channel is not None:
                self._drop_channel()

    def _drop_channel(self) -> None:
        """Close our end of the channel (with the lock held)."""
        _forget_hangup(self._channel.fileno())
        self._channel.close()
        self._channel, self._pid = None, None

    def _hung_up(self, fd: int) -> None:
        """_Hangups saw the channel on `fd` hang up: if it is still ours and its zygote is gone, close it."""
        with self._lock:
            channel = self._channel
            if channel is None or channel.fileno() != fd:
                return
            poller = select.poll()
            poller.register(fd, select.POLLRDHUP)
            if not poller.poll(0):  # (a hangup is always reported): a new zygote's channel on the same number
                _watch_hangup(self, channel)  # (its watch may be the one just taken)
                return
            self._settle_early()  # an early zygote's answer, queued before it left: what it did stays done
            if self._channel is not None:
                self._drop_channel()


def _stdio(spec: Any, stream: int) -> tuple[int, IO | None]:
    """(descriptor for the child's `stream` (0, 1 or 2), our file object or None)."""
    if spec == PIPE:
        r, w = os.pipe()
        return (r, os.fdopen(w, "wb")) if stream == 0 else (w, os.fdopen(r, "rb"))
    if spec == DEVNULL:
        return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC), None
    if spec is None:
        return stream, None
    return (spec if isinstance(spec, int) else spec.fileno()), None


class Joined:
    """A process started inside a sandbox; the zygote is its parent and reports its end to us.
    `pid` is None (and `returncode` set) when it could not be started at all."""

    def __init__(self, args: list[str], pid: int | None, pidfd: int, reply: socket.socket | None,
                 stdin: IO | None, stdout: IO | None, stderr: IO | None, returncode: int | None = None,
                 zygote: Zygote | None = None) -> None:
        self.args, self.pid, self.pidfd = args, pid, pidfd
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode = returncode
        self._zygote = zygote  # told why, if its pid 1 never ran
        self._reply = reply
        self._done_r = -1
        self._lock = threading.Lock()

    @property
    def exit_fd(self) -> int:
        """Turns readable when the process has ended (poll() then has its status)."""
        if self._reply is not None:
            return self._reply.fileno()
        if self._done_r < 0:  # never started: a descriptor that is readable at once
            self._done_r, done_w = os.pipe()
            os.close(done_w)
        return self._done_r

    def poll(self) -> int | None:
        """The returncode as subprocess gives it (-N for a death by signal N), None while it runs."""
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            if not ready([self.exit_fd], timeout):
                return None
            message = self._reply.recv(4096)
            # No status: the zygote died (its sandbox closed), which takes its commands along; or
            # an error: pid 1 never ran (the kernel killed the command with its namespace).
            status = int(message.split()[1]) if message.startswith(b"S ") else signal.SIGKILL
            if message.startswith(b"E ") and self._zygote is not None:
                self._zygote.failed = message[2:].decode(errors="replace")
            self.returncode = os.waitstatus_to_exitcode(status)
            self._release()
            return self.returncode

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is None:
                try:
                    signal.pidfd_send_signal(self.pidfd, sig)
                except ProcessLookupError:
                    pass

    def killpg(self, sig: int) -> None:
        """Signal its whole process group (it leads one), while it runs."""
        with self._lock:
            if self.returncode is None:
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:
                    pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def close(self) -> None:
        """Close our pipe ends (not the process)."""
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()

    def _release(self) -> None:
        if self._reply is not None:
            self._reply.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self._done_r >= 0:
            os.close(self._done_r)
            self._done_r = -1

    def __del__(self) -> None:
        if hasattr(self, "_done_r"):
            self._release()


class PtyChild:
    """A process on the master side `fd` of its pty (what `spawn_pty` returns)."""

    def __init__(self, proc: Joined, fd: int) -> None:
        self.proc, self.fd, self.pid = proc, fd, proc.pid

    def isalive(self) -> bool:
        return self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The exit status, 128 + N for a death by signal N; None while it runs."""
        rc = self.proc.poll()
        return None if rc is None else exit_status(rc)

    def close(self) -> None:
        """Close the pty (a hangup for whatever still reads it), kill the process and reap it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def exit_status(returncode: int) -> int:
    """A shell's view of a Popen returncode: 128 + N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode
