"""Starting a sandbox: the admission (capacity, the memory budget), its record and session, the
plan of its mounts, its cgroup, the launch (launch.py), then the network, the watchers and the
wall-time timer; a failing start closes what it made, and sweeps dead owners' leftovers."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import resource
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..limits import budget, capacity, cgroup, diskcap, memcap
from .. import bwrap, records, session_layers, sessions
from ..spec import SandboxError, SandboxSpec, default_disk, host_path

if TYPE_CHECKING:
    from . import Sandbox

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


def start(sandbox: Sandbox) -> Sandbox:
    if sandbox._proc is not None:
        raise SandboxError("this sandbox was already started")
    if sandbox.spec.workspace is not None:
        _refuse_own_state(sandbox.spec.workspace)
    info = bwrap.find_bwrap()
    _sweep(first=True)
    # This process's cgroup subtree, set up once, before the spawn helper or any bwrap is forked:
    # their processes must not be left in the scope it moves us out of (cgroup.establish).
    cgroup.delegation()
    from ..layout import plan  # noqa: PLC0415 (layout imports the rootfs store, which is heavier)

    def planned() -> None:  # while bwrap starts (launch.py)
        capacity.check_headroom()  # a clear refusal, naming the limit, before any is hit
        # the record first (a full scratch is the first thing a start meets); with bwrap's group
        # once it runs (a root caller's bwrap starts once it is planned: admit writes it then)
        sandbox._record.make(sandbox._proc.pid if sandbox._proc is not None else None)
        sandbox._open_session()
        trust = sandbox._prepare_credentials()
        sandbox._on_tmpfs = diskcap.on_tmpfs(sandbox.spec)
        # the layers go in a tmpfs, mounted on this folder inside, or in their folder on disk
        if sandbox._on_tmpfs:
            sandbox._scratch = records.layers_mount_point()
        else:  # made now: a root caller's bwrap finds it through a bind staged before it starts (idmap.py)
            sandbox._scratch = sandbox._session.dir if sandbox._session is not None else sandbox._record.make_dir()
        sandbox._root = plan(sandbox.spec, sandbox._scratch, info, trust=trust)

    try:
        sandbox._record = records.Record(made=False)  # on disk once bwrap runs (admit)
        sandbox._launch(info, planned)
    except BaseException as exc:
        making = sandbox._record is None or not sandbox._record.made  # any failure to make the record is the scratch's
        sandbox.close()
        _sweep(first=False)
        if isinstance(exc, OSError):  # a file's ENOSPC is a full scratch; a process limit is capacity's
            full = records.scratch_error(exc, making=making) if exc.errno not in capacity.PROCESS_ERRNOS else None
            if full is not None:
                raise full from None
            if exc.errno in capacity.LIMIT_ERRNOS:
                raise SandboxError(capacity.explain(exc)) from None
        raise
    if sandbox._host is not None:  # a host edit stamped in the start's tick came before any command could see
        from ..changes.baseline import past  # noqa: PLC0415

        past(sandbox._since)
    capacity.started()
    sandbox._counted = True
    budget.track(sandbox)
    sandbox.env = sandbox._root.environment(sandbox.spec)
    # the policy given, else the spec's mode: the net package (asyncio, the proxy, TLS) loads only
    # for a network that is not off (network.py)
    if (sandbox.policy.mode if sandbox.policy is not None else sandbox.spec.network) != "off":
        try:
            sandbox._open_network()
        except BaseException:
            sandbox.close()
            raise
    if (sandbox.spec.limits.disk or sandbox.spec.limits.inode_limit()) and not sandbox._on_tmpfs:
        diskcap.watch(sandbox)  # the walk: a kept session's layers, on disk
    if memcap.applies(sandbox):  # no cgroup holds its memory: a watcher sums its processes
        memcap.watch(sandbox)
    if sandbox.spec.limits.wall_time:
        sandbox._timer = threading.Timer(sandbox.spec.limits.wall_time, sandbox._close_at_wall_time)
        sandbox._timer.daemon = True
        sandbox._timer.start()
    return sandbox


def _admit(sandbox: Sandbox) -> None:
    """While bwrap starts (it builds nothing until the sandbox's first zygote lets it go, launch.py):
    the record and scratch on disk, with bwrap's group for a sweep to kill; the memory budget's
    word (a smaller disk, or a refusal); the layers' folders, or their tmpfs's mount point; the
    cgroup, where the machine delegates one."""
    sandbox._record.make(sandbox._proc.pid)
    limits = budget.admit(sandbox.spec.limits, sandbox._on_tmpfs, default_disk())
    if limits is not sandbox.spec.limits:  # a smaller disk: what the memory budget has room for
        sandbox.spec = dataclasses.replace(sandbox.spec, limits=limits)
    if sandbox._session is not None and sandbox._on_tmpfs:
        session_layers.check_fits(sandbox._session.dir, sandbox.spec.session, sandbox.spec.limits)
    if not sandbox._on_tmpfs:
        for folder, mode in sandbox._root.folders:
            with contextlib.suppress(FileExistsError):  # a kept session's
                os.mkdir(sandbox.layers / folder, mode)
    sandbox._cgroup = cgroup.for_sandbox(sandbox._record.id, sandbox.spec.limits)


def _open_session(sandbox: Sandbox) -> None:
    # Before anything of the sandbox exists or runs: a host entry whose ctime is later was made or
    # changed meanwhile (the kernel's stamps lag the clock by a tick at most, and nothing of the
    # sandbox's runs before that tick is over: start() waits for it).
    sandbox._since = time.time_ns()
    if sandbox.spec.git_writable and sandbox.spec.workspace is not None:
        from ..changes.gitbundle import head_commit  # noqa: PLC0415

        sandbox.git_base = head_commit(Path(sandbox.spec.workspace))
    if not sandbox.spec.session:
        if sandbox.spec.workspace is not None:
            sandbox._host = _baseline(sandbox, None)
        return
    sandbox._session = sessions.Session(sandbox.spec.session)
    sandbox._since = sandbox._session.created_ns()  # its layers were made then: the host's later entries are the host's
    saved = sandbox._session.load_spec()
    if saved is not None:
        _check_same_project(sandbox.spec, saved)
    session_layers.prepare(sandbox._session.dir, diskcap.on_tmpfs(sandbox.spec))  # its size is checked at _admit
    if sandbox.spec.workspace is not None:
        sandbox._host = _baseline(sandbox, sandbox._session.host())
    sandbox._session.save(sandbox.spec, sandbox._host.record() if sandbox._host is not None else None)


def _baseline(sandbox: Sandbox, kept: dict | None):
    """The host workspace as the sandbox starts on it (changes.baseline): its start time, and what a
    kept session learnt of it before; no walk of the project (but where its filesystem's ctimes are
    not this kernel's)."""
    from ..changes.baseline import Baseline  # noqa: PLC0415 (the workspace's code: only with one)

    kept = kept or {}
    table = kept.get("table")
    return Baseline.begin(Path(sandbox.spec.workspace), sandbox._since, kept.get("known"),
                          None if table is None else {k: tuple(v) for k, v in table.items()})


def _check_same_project(spec: SandboxSpec, saved: SandboxSpec) -> None:
    """A kept session's layers are changes to the project it was made on: laid over another one they
    would read as the model's edits there. Its rootfs and workspace hold; the workspace is compared
    as a resolved path, so "." typed in another folder is another project."""
    was, now = saved.workspace, spec.workspace
    if was is not None and now is not None and not os.path.isabs(was):
        return  # an earlier version kept only "."; the caller named the project (see spec_from_args)
    if saved.rootfs == spec.rootfs and (was is None) == (now is None) and (was is None or host_path(was) == os.fspath(now)):
        return

    def made(spec: SandboxSpec, workspace: str | Path | None) -> str:
        return f"rootfs {spec.rootfs!r} with " + (f"workspace {workspace}" if workspace is not None else "no workspace")

    raise SandboxError(f"session {spec.session} was made on {made(saved, was)}, not {made(spec, now)}: its files are "
                       "changes to that one. Fix: leave --rootfs and --workspace out to resume it as it was made, "
                       "or give a new session id")


def _refuse_own_state(workspace: str | Path) -> None:
    """A workspace that holds lis-tui's own state (its sandboxes' layers, kept sessions) or lies inside
    it: the sandbox's writable layers would sit inside the folder laid under them (the kernel refuses
    such an overlay, or worse, lets it loop), and the model would see every other sandbox's files."""
    ours = {records.state_dir(), records.scratch_root(), sessions.sessions_root()}
    where = Path(workspace)
    for place in sorted({Path(host_path(p)) for p in ours}):
        if place == where or place.is_relative_to(where) or where.is_relative_to(place):
            raise SandboxError(f"--workspace {where} overlaps lis-tui's own state ({place}): a sandbox cannot be "
                               "laid over its own layers. Fix: give the project's folder, or keep lis-tui's state "
                               "elsewhere (XDG_STATE_HOME, or LIS_SCRATCH and LIS_SESSIONS)")
