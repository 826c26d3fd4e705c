"""Episodes on a Ray cluster: `lis-tui bench --ray`, `lis-tui rollout --ray`, `doctor --ray`.

    BenchRunner(tasks, config, spec, BenchOptions(output=out, ray="auto")).run()
    BenchRunner(..., BenchOptions(output=out, ray=RayOptions("10.0.0.1:6379", cpus=0.5)))

Each node gets long-lived actors (`worker.EpisodeWorker`, one per `worker_cpus` of its CPUs)
holding a pool of episodes, each in a sandbox of that node; the driver only schedules, writes results.jsonl and shows progress
(`cluster.run_on_cluster`). A directory rootfs travels by content hash (`parcel`). Nothing here
is imported unless --ray (or `ray=`) is given, and Ray itself only then.

May import: isolation, tools, lis_tui.config, lis_tui.bench (the episodes its workers run).
"""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

RAY_MISSING = ("--ray needs Ray on this machine and on every node of the cluster: "
               "./install.sh --ray in the lis-tui checkout, or {hint}")


class ClusterError(RuntimeError):
    """The cluster cannot run the episodes; the message says why and what to do."""


@dataclass
class RayOptions:
    """How a run uses a Ray cluster."""

    address: str = "auto"
    """"auto": the cluster of RAY_ADDRESS, or one this user started on this machine (`ray
    start`; never another user's), else a local one started here; or a cluster's address (HOST:PORT, ray://HOST:PORT)."""
    cpus: float = 0.25
    """Ray CPUs each episode reserves (episodes mostly wait on the model: 4 per core by default)."""
    worker_cpus: float = 4.0
    """Ray CPUs per worker process: a node gets one worker per this many of its CPUs (at least
    one), since one process's Python keeps 3-4 cores busy before its GIL is full."""
    concurrency: int | None = None
    """Most episodes at once over the whole cluster; None: as many as the nodes' CPUs allow."""
    max_retries: int = 2
    """Runs again of an episode whose node or worker died under it, before it counts as crashed."""
    rootfs_dir: Path | None = None
    """A folder every node sees (NFS): the rootfs tarball goes there instead of the object store."""

    def __post_init__(self) -> None:
        if not self.cpus > 0:
            raise ValueError("--ray-cpus must be more than 0 (e.g. 0.25: four episodes per CPU)")
        if not self.worker_cpus > 0:
            raise ValueError("--ray-worker-cpus must be more than 0 (e.g. 4: a worker per 4 CPUs)")
        if self.max_retries < 0:
            raise ValueError("--max-retries must be 0 or more")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")


def ray_options(value: Any) -> RayOptions:
    """RayOptions from what `ray=` may be: True, "auto", an address, or RayOptions."""
    if isinstance(value, RayOptions):
        return value
    if value is True:
        return RayOptions()
    if isinstance(value, str) and value.strip():
        return RayOptions(address=value.strip())
    raise ValueError(f"ray={value!r}: give 'auto', a cluster address (HOST:PORT) or RayOptions")


def require_ray() -> Any:
    """The `ray` module, or a ClusterError naming the install line."""
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        from isolation.extras import install_hint  # noqa: PLC0415

        raise ClusterError(RAY_MISSING.format(hint=install_hint("ray"))) from None
    return ray


def connect(address: str, say: Callable[[str], None] = lambda line: None,
            start_local: bool = True) -> bool:
    """Join the cluster at `address` ("auto" with `start_local`: else start Ray here); True when
    we connected (so we disconnect after). Already connected (inside a trainer's driver): that
    cluster is used as it is."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": "WARNING"}
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        target = address
        if address == "auto":  # never Ray's "auto", which joins another user's cluster as well
            from lis_tui.ray.local import own_cluster  # noqa: PLC0415

            target = os.environ.get("RAY_ADDRESS") or own_cluster()
            if target is None:
                raise ConnectionError("no raylet of this user's runs here, and RAY_ADDRESS is unset")
        ray.init(address=target, **quiet)
        return True
    except ConnectionError as exc:
        if address != "auto" or not start_local:
            where = "of yours on this machine or at RAY_ADDRESS" if address == "auto" else f"at {address}"
            raise ClusterError(f"no Ray cluster {where} ({exc}). Fix: start one (ray start "
                               "--head), or give its address (HOST:PORT or RAY_ADDRESS)") from None
        from lis_tui.ray.local import start_local  # noqa: PLC0415

        say("no Ray cluster of yours found (RAY_ADDRESS, or `ray start --head` on this machine): "
            "starting a local one here (loopback only, token auth)")
        start_local(ray, **quiet)
        return True
    finally:  # ray.init sets a SIGTERM handler that exits at once: keep ours (a clean stop)
        if threading.current_thread() is threading.main_thread() and sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def say_to(out: Any) -> Callable[[str], None]:
    """A line printer to `out` (None: nowhere), made safe for a terminal."""
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    def say(line: str) -> None:
        if out is not None:
            print(safe_terminal_text(line), file=out, flush=True)
    return say if out is not None else (lambda line: None)


__all__ = ["ClusterError", "RayOptions", "ray_options", "connect", "require_ray", "RAY_MISSING"]
