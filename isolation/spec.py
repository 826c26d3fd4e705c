"""What a sandbox is asked to be, and what running something in it returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

NETWORK_MODES = ("off", "ask", "on")


class SandboxError(Exception):
    """A sandbox could not be made or used; the message says how to fix it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for everything that runs in one sandbox."""

    processes: int | None = 1024
    """Most processes the sandbox may hold at once (RLIMIT_NPROC, counted per user namespace)."""
    file_size: int | None = 8 << 30
    """Largest file, in bytes, a process may write (RLIMIT_FSIZE)."""
    memory: int | None = None
    """Address-space cap per process in bytes (RLIMIT_AS); None leaves it to the host."""
    open_files: int | None = 4096
    """Most open descriptors per process (RLIMIT_NOFILE)."""
    wall_time: float | None = None
    """Seconds after which the whole sandbox is closed; None for no limit."""


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
    workspace: Path | str | None = None
    """Host directory laid over /testbed copy-on-write; None for an empty /testbed."""
    input_dir: Path | str | None = None
    """Host directory shown read-only at /testbed/input."""
    documents_dir: Path | str | None = None
    """Host directory shown read-only at /testbed/documents (the paper's long-context layout)."""
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

    def __post_init__(self) -> None:
        if self.network not in NETWORK_MODES:
            raise SandboxError(f"network must be one of {', '.join(NETWORK_MODES)}, not {self.network!r}")


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command run with `Sandbox.exec`."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    dropped: int = 0
    """Bytes of output dropped because they passed the output cap."""
