"""What a sandbox is asked to be, and what running something in it returns."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from .limits import counters

NETWORK_MODES = ("off", "ask", "on")
GiB = 1 << 30
SMALL_TMPFS = 64 << 20  # /run, /dev/shm (Docker's size for it), the host rootfs's /
DEV_TMPFS = 1 << 20  # /dev holds nodes, links and mount points
DISK_PER_INODE = 16 << 10  # a 10 GiB disk holds 655,360 files; a million takes a 16 GiB one
EXPORT_CAP = 4 * GiB
"""Bytes of data an export copies out when the sandbox has no disk limit and no export_cap."""


def default_memory() -> int:
    """4 GiB, or half of this machine's memory if that is less."""
    return min(4 * GiB, _half_the_memory())


def default_disk() -> int:
    """10 GiB, or half of this machine's memory if that is less: the writable layers are a tmpfs
    of this size (diskcap.on_tmpfs), which is memory."""
    return min(10 * GiB, _half_the_memory())


def _half_the_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return 4 * GiB


class SandboxError(Exception):
    """A sandbox could not be made or used; the message says how to fix it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for everything that runs in one sandbox."""

    processes: int | None = 1024
    """Most processes the sandbox may hold at once (RLIMIT_NPROC, counted per user namespace; and
    pids.max of its cgroup, where cgroup v2 is delegated)."""
    file_size: int | None = 8 << 30
    """Largest file, in bytes, a process may write (RLIMIT_FSIZE)."""
    memory: int | None = field(default_factory=lambda: default_memory())
    """Memory cap per process in bytes: its heap and private writable mappings (RLIMIT_DATA, which,
    unlike RLIMIT_AS, leaves the big reservations of V8 or Go alone); None: no cap. Default: 4 GiB
    or half the machine's memory, whichever is less. Also the cap of the whole sandbox: where cgroup
    v2 is delegated, its tmpfs files included (memory.max, no swap; cgroup.py), else its processes'
    memory, shared memory and memfd files included, summed by a watcher, which stops it past the
    cap (memcap.py); and of its SysV shared memory, by the kernel (its IPC namespace's shmall)."""
    open_files: int | None = 4096
    """Most open descriptors per process (RLIMIT_NOFILE)."""
    wall_time: float | None = None
    """Seconds after which the whole sandbox is closed; None for no limit."""
    disk: int | None = field(default_factory=lambda: default_disk())
    """Bytes the sandbox's writable layers (its files under /testbed and /root, what it changed in
    the rootfs) may hold; None: no cap. They live in a tmpfs of this size, the kernel's bound
    (writes past it fail with ENOSPC; it is memory, swappable), a kept session's too (copied to disk
    at close: session_layers.py), unless `disk_on` is "disk" (diskcap.on_tmpfs). Default: 10 GiB or half
    the machine's memory, whichever is less."""
    inodes: int | None = None
    """Files, directories and links the writable layers may hold: their tmpfs's inode count, or the
    walk's, with `disk`. None: one for every DISK_PER_INODE bytes of `disk` (`inode_limit`): each
    costs kernel memory that the disk limit does not count, and the memory budget does."""
    disk_on: str = "memory"
    """Where the writable layers live: "memory", a tmpfs of `disk` (the kernel's bound, counted in
    the memory budget of all sandboxes, budget.py), or "disk", the scratch folder under a walk of
    it (a softer bound that a fast writer overshoots by seconds of writing: for big installs)."""
    export_cap: int | None = None
    """Bytes of data (holes not counted) one export may copy out onto the host (a run's files/,
    the review's export, MCP's export_output); None: the `disk` limit, else 4 GiB."""
    tmp_size: int | None = 1 << 30
    """Bytes /tmp may hold (a tmpfs, so in memory). /run, /dev/shm and, under the host rootfs, /
    itself get 64 MiB each at most (or tmp_size, if smaller), /dev 1 MiB, and the masks over host
    secrets are read-only: a sandbox holds at most tmp_size + 193 MiB in these memory filesystems
    (`tmpfs_sizes`), each with an inode for every 8 KiB (4,096 at least), and its disk limit in its
    layers' tmpfs (diskcap.on_tmpfs). None: the kernel's default for /tmp (half the memory)."""
    pending_signals: int | None = field(default_factory=lambda: counters.share("pending_signals"))
    """Signals queued at once, by all the sandbox's processes together (RLIMIT_SIGPENDING; each
    POSIX timer holds one). The kernel also counts them against the user's own limit on the host,
    so each sandbox gets a share: the user's limit / 32 (counters.py; 3,011 of a usual 96,365)."""
    message_queues: int | None = field(default_factory=lambda: counters.share("message_queues"))
    """Bytes of POSIX message queues the sandbox may make (RLIMIT_MSGQUEUE), counted against the
    user's own allowance on the host too: the user's limit / 32 (25 KiB of a usual 800 KiB: queues
    of a few small messages; a default one, 10 of 8 KiB, needs 81 KiB)."""
    inotify_instances: int | None = field(default_factory=lambda: counters.share("inotify_instances"))
    """inotify instances the sandbox may hold (its user namespace's max_inotify_instances): the
    user's fs.inotify.max_user_instances on the host / 32 (4 of a usual 128)."""
    inotify_watches: int | None = field(default_factory=lambda: counters.share("inotify_watches"))
    """inotify watches the sandbox may hold (its user namespace's max_inotify_watches): the user's
    fs.inotify.max_user_watches on the host / 32."""
    ptys: int | None = field(default_factory=lambda: counters.share("ptys"))
    """Pseudo-terminals the sandbox may hold at once (its /dev/pts's `max`). Every devpts but the
    host's own shares kernel.pty.max less kernel.pty.reserve (4,096 - 1,024 by default): without
    a cap one sandbox could take them all from every other sandbox and container of the machine;
    its share is that / 32 (96)."""

    def __post_init__(self) -> None:
        if self.disk_on not in ("memory", "disk"):
            raise SandboxError(f"disk_on must be \"memory\" or \"disk\", not {self.disk_on!r}")

    def inode_limit(self) -> int | None:
        """The inode cap in force: `inodes`, else one for every DISK_PER_INODE of `disk` (4,096 at
        least); None without either."""
        return self.inodes or (max(self.disk // DISK_PER_INODE, 4096) if self.disk else None)

    def export_bytes(self) -> int:
        """The export cap in force: `export_cap`, else `disk`, else EXPORT_CAP."""
        return self.export_cap or self.disk or EXPORT_CAP


def tmpfs_sizes(limits: Limits, host_root: bool) -> dict[str, int | None]:
    """Each writable in-memory filesystem of a sandbox and its size in bytes (None: the kernel's
    default, half the memory); `host_root`: / is bwrap's tmpfs (the host rootfs), not an overlay."""
    small = min(limits.tmp_size, SMALL_TMPFS) if limits.tmp_size else SMALL_TMPFS
    sizes = {"/tmp": limits.tmp_size, "/run": small, "/dev/shm": small, "/dev": DEV_TMPFS}
    return {"/": small, **sizes} if host_root else sizes


def tmpfs_inodes(size: int) -> int:
    """Files a tmpfs of `size` bytes may hold: each costs kernel memory that its size does not count."""
    return max(size // 8192, 4096)

@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to make one sandbox."""

    rootfs: str = "host"
    """`host`, a rootfs name in the store, or an absolute path to a root directory."""
    network: str = "off"
    """`off`, `ask` or `on`."""
    allow_hosts: tuple[str, ...] = ()
    """Reachable without asking: `name`, `*.suffix`, `*` or an IP, each with an optional `:port`;
    a service on this machine or a private network needs its exact `host:port` here."""
    deny_hosts: tuple[str, ...] = ()
    """Never reachable; checked before allow_hosts."""
    credentials: tuple = ()
    """`net.credentials.Credential`s: headers the proxy adds for named hosts. They name where each
    secret comes from (an environment variable or a file of this process), never the secret."""
    workspace: Path | str | None = None
    """Host directory laid over /testbed copy-on-write; None for an empty /testbed. With one, the
    model's own folders (input, output, scratch) are under /agent instead, outside the project,
    and the project is seen at its own path too (`own_path`)."""
    own_path: bool = True
    """With a workspace, show the project at its own absolute path as well: the same folder as
    /testbed (one copy-on-write layer, so an edit through either name is one change), so its
    venv, its scripts' shebangs and absolute paths in its build files work inside, and the model
    is told that path (`places.working`). Off: at /testbed only, as the paper's prompts expect.
    Where the path is one the sandbox's system or lis-tui's own folders need (`project_path`),
    /testbed only, whatever this says."""
    input_dir: Path | str | None = None
    """Host directory shown read-only at `places.input` (/testbed/input; /agent/input beside a workspace)."""
    documents_dir: Path | str | None = None
    """Host directory shown read-only at `places.documents` (the paper's long-context layout)."""
    env: dict[str, str] | None = None
    """Extra environment variables, on top of the clean defaults."""
    limits: Limits = field(default_factory=Limits)
    """Resource limits."""
    hostname: str = "lis-sandbox"
    """Hostname inside the sandbox."""
    session: str | None = None
    """Keep the writable layers under this session id (resumed if it exists); None: throw them away."""
    nested_userns: bool = False
    """Let commands make user namespaces of their own (some tools need them: a nested bwrap,
    rootless podman, Chromium's sandbox); off, clone and unshare of CLONE_NEWUSER fail with EPERM."""
    git_writable: bool = False
    """Let commands write the workspace's `.git` (tasks that commit); off, it is read-only inside,
    so `git commit` fails and no hook or git config can be written there."""
    held_back: tuple[str, ...] = ()
    """Patterns of paths that `apply()` writes to the host only when named, on top of the built-in
    behavioural rules, which they cannot turn off (see isolation.changes.heldback)."""

    def __post_init__(self) -> None:
        if self.network not in NETWORK_MODES:
            raise SandboxError(f"network must be one of {', '.join(NETWORK_MODES)}, not {self.network!r}")

    def resolved(self) -> SandboxSpec:
        """This spec with its host folders (workspace, input_dir, documents_dir) absolute and free of
        links, as seen from here and now: what a record keeps, so that a run, a session or an apply
        finds the same project wherever it is typed later (a relative "." means another folder then)."""
        found = {key: Path(host_path(value)) if isinstance(value, Path) else host_path(value)
                 for key in HOST_FOLDERS if (value := getattr(self, key)) is not None}
        return self if all(getattr(self, key) == value for key, value in found.items()) else replace(self, **found)

    @functools.cached_property
    def places(self) -> Places:
        """Where this sandbox's folders are, as its processes see them (worked out once per spec:
        the workspace's path is resolved here, and the spec never changes)."""
        if self.workspace is None:
            return PAPER_PLACES
        own = project_path(self)
        return WORKSPACE_PLACES if own is None else replace(WORKSPACE_PLACES, working=own)


HOST_FOLDERS = ("workspace", "input_dir", "documents_dir")
"""The SandboxSpec fields that name folders of the host."""


SYSTEM_FOLDERS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                            "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var"})
"""Folders a project at its own path would cover the sandbox's system with (or its home, /tmp, /run);
so would one right in /usr (/usr/lib, /usr/local: a directory rootfs's own)."""
NOT_UNDER = ("/proc", "/sys", "/dev", "/testbed", "/agent", "/tmp/lis", "/run/lis-tui")
"""Nor may it be in these: kernel filesystems, and folders of lis-tui's own inside (the model's,
layout.TOOLS_DIR, layout.SHIMS's folder)."""


def project_path(spec: SandboxSpec) -> str | None:
    """Where the sandbox shows `spec`'s workspace at its own absolute path, besides /testbed; None
    where it is shown at /testbed only: no workspace, `own_path` off, or a path the sandbox's system
    or lis-tui's own folders need (SYSTEM_FOLDERS, NOT_UNDER), where /testbed is the project's only
    name. A path under /tmp, /root, /usr, /etc, /home... is fine: its missing parents are made
    inside as empty folders (in the sandbox's /, /tmp, home or rootfs layer), nothing of the
    host's around it is shown, and the host's own folder there (a project under the host rootfs's
    read-only /usr) is covered by the project's copy-on-write view."""
    if spec.workspace is None or not spec.own_path:
        return None
    path = host_path(spec.workspace)
    if path in SYSTEM_FOLDERS or os.path.dirname(path) == "/usr" or \
            any(path == top or path.startswith(f"{top}/") for top in NOT_UNDER):
        return None
    return path


def host_path(path: Path | str) -> str:
    """`path` (~ expanded) absolute and with its links resolved, against the current folder."""
    return os.path.realpath(os.path.expanduser(os.fspath(path)))


@dataclass(frozen=True)
class Places:
    """The folders a sandbox has for the model, as seen inside; each exists from the start."""

    working: str
    """Where the model works: /testbed; with a workspace, the person's project at its own path
    (/testbed names it too), or at /testbed only (SandboxSpec.own_path, project_path)."""
    scratch: str
    """Where its own scripts and notes go: /testbed, or /agent/scratch beside a workspace, so that
    they never show up as changes to the project."""
    input: str
    """The task's files (empty when it came with none)."""
    documents: str
    """The task's documents, when it has a documents folder."""
    output: str
    """What goes back to the person: answer.txt and any files (a run's files/, the review's export)."""

    @property
    def answer(self) -> str:
        return f"{self.output}/answer.txt"


def places_of(spec: SandboxSpec | None) -> Places:
    """spec.places; the paper's layout where there is no spec (no sandbox yet, or none at all)."""
    return spec.places if spec is not None else PAPER_PLACES


TESTBED, AGENT = "/testbed", "/agent"
PAPER_PLACES = Places(TESTBED, TESTBED, f"{TESTBED}/input", f"{TESTBED}/documents", f"{TESTBED}/output")
"""The paper's layout: everything under /testbed."""
WORKSPACE_PLACES = Places(TESTBED, f"{AGENT}/scratch", f"{AGENT}/input", f"{AGENT}/documents", f"{AGENT}/output")
"""Beside a workspace: /testbed is the project (and its own path, `working`, where the sandbox
shows it there too), and the model's own folders are outside it."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command run with `Sandbox.exec`."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    dropped: int = 0
    """Bytes of output dropped because they passed the output cap."""
