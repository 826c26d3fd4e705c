"""The Ray cluster `--ray auto` starts on this machine when none runs: loopback only, token auth,
its files where only this user can open them.

Ray's own default for `ray.init()` listens on every interface (its gRPC servers bind `::`), keeps
its session under /tmp/ray (mode 0777) and its token in ~/.ray/auth_token (0644 in a 0755 home):
another user of the machine, or of its network, could read the token and run code as this one.
Here the cluster's node address is 127.0.0.1, which makes every Ray server bind loopback (Ray
turns an asked-for 127.0.0.1 into the machine's address unless it thinks clusters are off, the
switch set below while the cluster starts), the session and the token live in a folder of mode
0700, and token authentication is on (Ray >= 2.59 turns it on for a local cluster when
RAY_AUTH_MODE is unset). Each of these is checked once the cluster runs; a cluster that fails a
check is stopped, and the error says what to do.
"""
from __future__ import annotations

import importlib
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from lis_tui.ray import ClusterError

LOOPBACK = "127.0.0.1"


def start_local(ray: Any, **init: Any) -> Path:
    """Start and join a local cluster (`init`: more ray.init arguments); its private folder."""
    folder = private_dir()
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_file(folder))
    os.environ.pop("RAY_AUTH_MODE", None)  # unset, so Ray starts the cluster with token auth
    constants = importlib.import_module("ray._private.ray_constants")
    clusters = getattr(constants, "ENABLE_RAY_CLUSTER", True)
    constants.ENABLE_RAY_CLUSTER = False  # Ray's node address is then loopback
    try:
        ray.init(include_dashboard=False, _temp_dir=str(folder / "session"), **init)
    finally:
        constants.ENABLE_RAY_CLUSTER = clusters
    addresses = {node.get("NodeManagerAddress") for node in ray.nodes()}
    problem = (f"it listens on {', '.join(sorted(map(str, addresses)))}, not only {LOOPBACK}"
               if addresses != {LOOPBACK} else
               "it runs without token authentication" if os.environ.get("RAY_AUTH_MODE") != "token" else "")
    if problem:
        ray.shutdown()
        raise ClusterError(f"the local Ray cluster was stopped: {problem} (Ray {ray.__version__}). Fix: "
                           "pip install -U 'lis-tui[ray]' (Ray >= 2.59), or start a cluster yourself "
                           "(ray start --head, with RAY_AUTH_MODE=token) and give its address")
    return folder


def private_dir() -> Path:
    """A folder only this user may open, with a short path (Ray's socket paths must fit 107
    bytes): $XDG_RUNTIME_DIR/lis-ray where that is private, else /tmp/lis-ray-UID."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) if runtime and _private(Path(runtime)) else None
    folder = base / "lis-ray" if base else Path(tempfile.gettempdir()) / f"lis-ray-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    if not _private(folder):  # made by someone else in /tmp, or opened up since
        raise ClusterError(f"{folder} must be a folder of yours that only you can open (mode 0700). "
                           f"Fix: if it is yours, chmod 700 {folder}; else remove it (as its owner or root)")
    return folder


def token_file(folder: Path) -> Path:
    """The cluster's token (mode 0600), made once: a file is only ever seen whole."""
    path = folder / "auth_token"
    if not path.exists():
        fd, making = tempfile.mkstemp(dir=folder, prefix=".token-")  # mode 0600
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
        try:
            os.link(making, path)
        except FileExistsError:  # another lis-tui made it meanwhile: theirs stands
            pass
        finally:
            os.unlink(making)
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ClusterError(f"{path} must be a file of yours that only you can read (mode 0600). "
                           f"Fix: rm {path} (a new token is made at the next start)")
    return path


def _private(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


_GCS_FLAG = re.compile(rb"--gcs-address=([^\s\0]+)")


def own_cluster() -> str | None:
    """The GCS address of a Ray cluster of this user's on this machine (the newest, where there
    are several), else None.

    Ray's own `address="auto"` joins any cluster whose raylet it sees in the process list, another
    user's included: our tasks, model credentials and code would then run as that user, and a
    cluster someone else started could take them. Only raylets running as our uid count here."""
    from isolation.records import processes_of  # noqa: PLC0415

    found = []
    for pid, cmdline in processes_of({os.getuid()}):
        if cmdline.split(b"\0", 1)[0].rsplit(b"/", 1)[-1] != b"raylet" or not (match := _GCS_FLAG.search(cmdline)):
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                started = int(f.read().rsplit(b")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        found.append((started, match.group(1).decode(errors="replace")))
    return max(found)[1] if found else None
