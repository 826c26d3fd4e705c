"""One sandbox: a bwrap keeper that holds the namespaces, and commands that join them.

`Sandbox` is the one object its users hold; its state lives here, and each concern's code in a
module of its own, whose functions take the sandbox (the class names them as its methods):
starting.py (admission, record, session, plan, then the launch), launch.py (bwrap, pid 1's
keeper, the layers' tmpfs), lifeline.py (what ties a sandbox to this process's life), pid1.py
(pid 1's limits, and reaching it by pid), closing.py (close, the wall time, a limit's stop),
commands.py (exec, popen, spawn_pty, listen), files.py (host-side reads and writes, export),
review.py (the workspace's changes, apply, patches, commits), disk.py (the disk cap's usage and
notes) and network.py (the policy, the proxy, credentials).

May import: every other part of isolation (it is the one place they meet: limits/, host/,
changes/, spawn/, net/, rootfs/, spec, layout, bwrap); nothing of isolation imports the sandbox
but the package's top (`from isolation import Sandbox`) and doctor (a trial start). Its
modules import each other, never this `__init__` but for type hints.
"""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..limits import cgroup
from .. import records, sessions, spawn
from ..spec import SandboxSpec
from . import closing, commands, disk, files, launch, network, pid1, review, starting
from .pid1 import _checked_pidfd  # noqa: F401 (tests import it from here)

if TYPE_CHECKING:
    from ..net.policy import NetworkPolicy
    from ..net.proxy import ProxyHandle


class Sandbox:
    """A rootless sandbox; use as a context manager, or call start() and close()."""

    def __init__(self, spec: SandboxSpec | None = None, network: NetworkPolicy | None = None) -> None:
        """`network`: the policy with its approval callbacks; None builds one from the spec's
        network, allow_hosts and deny_hosts (and `ask` then refuses what they do not allow)."""
        self.spec = (spec or SandboxSpec()).resolved()
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
        self._writers = 0  # of those, the ones that may write (_file_op)
        self._stirs = 0  # commands started, host-side writes ended (files._stirs_now)
        self._closing = False
        self._err_fd: int | None = None  # bwrap's stderr, while it starts
        self._zygote: spawn.Zygote | None = None  # starts every command inside
        self._cgroup: cgroup.SandboxCgroup | None = None  # where the machine delegates cgroup v2
        self._session: sessions.Session | None = None
        self._host = None  # with a workspace: changes.baseline.Baseline, the host as it started on it
        self._since: int | None = None  # when it started, as the kernel stamps ctimes (starting._open_session)
        self.last_review = None
        """The last review (`review()`, `changes()`, `diff()`): a workspace.Review, what `apply()` writes."""
        self.git_base: str | None = None
        """With `git_writable`: the commit the workspace's HEAD named at start (new commits count from it)."""
        self._disk_note = ""
        self._stopped: str | None = None  # why a limit stopped the whole sandbox (it is not running)
        self._credentials = None  # net.credentials.CredentialSet: the secrets, held here and by the proxy
        self._counted = False  # among capacity.live()
        self._on_tmpfs = False  # the writable layers are in a tmpfs of their own (diskcap.on_tmpfs)
        self._scratch: Path | None = None  # where the mounts find the layers: their tmpfs's mount point, or `layers`
        self._rw_fd: int | None = None  # its root

    # ---- state read by every concern --------------------------------------------------------

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return not self._closing and self._proc is not None and self._proc.poll() is None

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

    @property
    def stopped(self) -> str | None:
        """Why a limit stopped this sandbox whole (None while it was not): it runs nothing more."""
        return self._stopped

    @property
    def readable(self) -> bool:
        """Its files can be read from here (read_file, export): it runs, or a limit stopped it and
        it is not closed yet (then what it wrote under /testbed, see `_readable`)."""
        return self.running or (bool(self._stopped) and not self._closing)

    start = starting.start
    _open_session = starting._open_session
    _admit = starting._admit

    _launch = launch._launch
    _restore_layers = launch._restore_layers
    _layers_tmpfs = launch._layers_tmpfs
    _abandon_start = launch._abandon_start

    _open_pid_1 = pid1._open_pid_1
    _pid_1_fd = pid1._pid_1_fd
    _open_root = pid1._open_root

    close = closing.close
    _close = closing._close
    _close_at_wall_time = closing._close_at_wall_time
    _save_session = closing._save_session
    _stop = closing._stop

    exec = commands.exec
    _run = commands._run
    popen = commands.popen
    listen = commands.listen
    spawn_pty = commands.spawn_pty
    _require_running = commands._require_running
    _not_running = commands._not_running

    read_file = files.read_file
    read_file_ends = files.read_file_ends
    write_file = files.write_file
    export = files.export
    tree_stamp = files.tree_stamp
    _in_root = files._in_root
    _open_running_root = files._open_running_root
    _file_op = files._file_op
    _stir = files._stir
    _stirs_now = files._stirs_now
    _readable = files._readable
    _open_remains = files._open_remains
    _writable_now = files._writable_now
    _dup_rw = files._dup_rw

    changes = review.changes
    diff = review.diff
    apply = review.apply
    save_changes = review.save_changes
    new_commits = review.new_commits
    bundle_commits = review.bundle_commits
    committed_paths = review.committed_paths
    _testbed = review._testbed
    _rules = review._rules
    review = review.review  # last: from here on in this class, `review` is the method

    writable_size = disk.writable_size
    writable_usage = disk.writable_usage
    disk_note = disk.disk_note
    _layers_fs = disk._layers_fs
    _full_note = disk._full_note
    _over_inodes = disk._over_inodes
    _over_disk = disk._over_disk

    set_network = network.set_network
    _network_policy = network._network_policy
    _prepare_credentials = network._prepare_credentials
    _open_network = network._open_network
