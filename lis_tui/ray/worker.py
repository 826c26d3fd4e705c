"""`EpisodeWorker`: the long-lived Ray actor on one node that runs a pool of episodes there.

Each `run` call is one episode in a sandbox of this node, exactly as the local runner runs it
(`run_episode`), into a scratch folder of the worker; the record, the episode's folder and what
the model server sent come back to the driver, which alone writes the results. Calls run in the
actor's threads (`max_concurrency` = its slots); `cancel` and `close` have a group of their own,
so they are answered while every slot is busy.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from isolation import SandboxSpec
from lis_tui.bench.episode import Episode, EpisodeContext, run_episode
from lis_tui.config.settings import Config
from lis_tui.ray.parcel import RootfsParcel, pack_folder, unpack_rootfs, unpack_task


SCRATCH_PREFIX = "lis-ray-"


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker needs to run episodes like the driver would have."""

    config: Config
    spec: SandboxSpec
    context: type
    """The runner's EpisodeContext class (the rollout one records what the server sent)."""
    rootfs: RootfsParcel | None = None
    """The driver's directory rootfs; None: the spec's rootfs (`host`) is used as it is."""
    judge: tuple | None = None
    """(model config, prompt) of the judge, rebuilt on the node."""
    sandboxes: bool = True
    """False when every episode is `llm` mode: the node needs no sandbox."""


def node_label(index: int = 0, of: int = 1) -> str:
    """This node as people see it: host name, address and the start of Ray's node id (and which
    of the node's workers this is, when it has several)."""
    node = ray.get_runtime_context().get_node_id()[:8]
    worker = f", worker {index + 1} of {of}" if of > 1 else ""
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, node {node}{worker})"


@ray.remote(concurrency_groups={"control": 4}, max_restarts=0)
class EpisodeWorker:
    """Runs episodes on its node (one of the node's workers: one per --ray-worker-cpus of its
    CPUs); its slots are set with `.options(max_concurrency=)`."""

    def __init__(self, setup: WorkerSetup, index: int = 0, of: int = 1) -> None:
        self.setup = setup
        self.ctx: EpisodeContext | None = None
        self.scratch, self._lock = _own_scratch()
        self.label = node_label(index, of)

    @ray.method(concurrency_group="control")
    def prepare(self) -> dict[str, Any]:
        """Check this node (doctor) and fetch the rootfs; {"ok", "node", "problem"}."""
        spec = self.setup.spec
        if self.setup.sandboxes:
            problem = _doctor_problem()
            if problem:
                return {"ok": False, "node": self.label, "problem": problem}
            if self.setup.rootfs is not None:
                try:
                    spec = replace(spec, rootfs=unpack_rootfs(self.setup.rootfs, ray.get))
                except Exception as exc:  # noqa: BLE001 (any failure here skips this node, named)
                    return {"ok": False, "node": self.label,
                            "problem": f"the rootfs did not arrive: {type(exc).__name__}: {exc}"}
        judge = None
        if self.setup.judge is not None:
            from lis_tui.bench.scoring.judge import Judge  # noqa: PLC0415

            judge = Judge(*self.setup.judge)
        self.ctx = self.setup.context(self.setup.config, spec, self.scratch, judge)
        return {"ok": True, "node": self.label, "problem": ""}

    def run(self, episode: Episode, folders: bytes | None) -> dict[str, Any] | None:
        """One episode here; None when it was cancelled (the driver records nothing then)."""
        ctx = self.ctx
        assert ctx is not None, "prepare() first"
        if hasattr(ctx, "take_raw"):
            ctx._local.recorder = None  # an episode that crashes before its agent has none
        if folders is None:
            record = run_episode(episode, ctx)
        else:
            with tempfile.TemporaryDirectory(prefix="task-", dir=self.scratch) as files:
                task = unpack_task(episode.task, folders, Path(files))
                record = run_episode(replace(episode, task=task), ctx)
        raw = ctx.take_raw() if hasattr(ctx, "take_raw") else None
        folder = self.scratch / "episodes" / episode.folder
        files_out = pack_folder(folder) if folder.is_dir() else {}
        shutil.rmtree(folder, ignore_errors=True)
        if record is None:
            return None
        return {"record": record, "files": files_out, "raw": raw, "node": self.label}

    @ray.method(concurrency_group="control")
    def cancel(self, hard: bool = False) -> None:
        """Stop this node's episodes: each ends after its step; `hard` kills their sandboxes."""
        if self.ctx is not None:
            self.ctx.cancel(hard)

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        """Kill every sandbox of this worker and remove its scratch folder."""
        if self.ctx is not None:
            self.ctx.cancel(hard=True)
            self.ctx.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _own_scratch() -> tuple[Path, int]:
    """A new folder for this worker's episodes, and the descriptor of its lock (held while the
    worker lives); first, the folders of workers that died without `close` are removed.

    It is in RAM (/dev/shm) where there is one: each episode's folder is read into memory and
    removed as soon as the episode ends, so RAM holds it for a moment anyway, while on disk
    making and removing thousands of them costs the file system more than the episodes' own
    writes (ext4 looks past recently freed inodes)."""
    parent = Path("/dev/shm") if os.access("/dev/shm", os.W_OK | os.X_OK) else Path(tempfile.gettempdir())
    for old in parent.glob(f"{SCRATCH_PREFIX}*"):
        _remove_if_dead(old)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    # Locked before it has its name: a sweep never finds this folder's lock free while we live.
    lock = os.open(scratch / ".lock.new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.rename(scratch / ".lock.new", scratch / ".lock")
    return scratch, lock


def _remove_if_dead(scratch: Path) -> None:
    """Remove another worker's folder if nothing holds its lock (a folder of another user, one
    still being made (no lock yet), or a live worker's is left alone)."""
    try:
        if scratch.is_symlink() or scratch.stat().st_uid != os.getuid():
            return
        lock = os.open(scratch / ".lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # its worker lives
    finally:
        os.close(lock)
    shutil.rmtree(scratch, ignore_errors=True)


def _doctor_problem() -> str:
    """Why sandboxes cannot run on this node ("" when they can)."""
    from isolation import doctor  # noqa: PLC0415

    checks = doctor.run_checks()
    if doctor.sandboxes_work(checks):
        return ""
    failed = [c for c in checks if c.status == "fail"] or checks[-1:]
    return "; ".join(f"{c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in failed)
