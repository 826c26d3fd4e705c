"""The driver of a cluster run: workers on every node (one per --ray-worker-cpus of its CPUs),
episodes handed out as slots free up, results written here as they come back.

Only the driver writes results.jsonl (through the runner's `keep`), so --resume, summary.md and
report.html work as for a local run. An episode whose node or worker dies is run again elsewhere
(up to --max-retries, then recorded as crashed); nodes that join later get a worker, nodes where
sandboxes cannot run are named and skipped. Ctrl-C stops every node's episodes after their
current step (again: their sandboxes are killed; a third time: the workers are killed), and the
workers are closed and killed before this returns, so no sandbox is left on any node.
"""
from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass, replace
from typing import Any

from isolation.rootfs import RootfsError
from lis_tui.bench.episode import Episode, lost_record
from lis_tui.ray import ClusterError, RayOptions, connect, ray_options, require_ray, say_to
from lis_tui.ray.parcel import pack_rootfs, pack_task, unpack_folder

REFRESH_EVERY = 2.0
"""Seconds between looks at the cluster's nodes (joined, died)."""
HARD_STOP_GRACE = 15.0
"""Seconds the workers get to end their episodes after their sandboxes were killed."""
RESTARTS_PER_NODE = 3
WARM_AFTER_FIRST = 10.0
"""Seconds episodes wait for the other nodes' workers once one worker is ready."""
QUEUED_PER_SLOTS = 8
"""A worker holds one episode queued behind every 8 of its slots (at least 2), so a slot that
frees up starts its next episode at once instead of after a round trip to the driver, which on
a busy node waits for a core. Queued episodes are not counted as running."""


@dataclass(eq=False)
class Worker:
    actor: Any
    node_id: str
    index: int
    slots: int
    name: str
    busy: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return self.node_id, self.index

    @property
    def free(self) -> int:
        return self.slots + max(2, self.slots // QUEUED_PER_SLOTS) - self.busy


def worker_slots(cpus: float, episode_cpus: float, worker_cpus: float) -> list[int]:
    """The episodes at once of each worker of a node of `cpus` Ray CPUs ([] when not one fits):
    a worker per `worker_cpus` of them (at least one), the node's slots shared out evenly.

    One worker is one process, whose Python (the agent loops, JSON, the openai client, the
    shell relays) holds one GIL: it keeps 3-4 cores busy with sandboxes and the kernel
    before that one core of Python is full. More workers let a many-core node go past that."""
    slots = int(cpus / episode_cpus + 1e-9)
    workers = max(1, min(slots, math.floor(cpus / worker_cpus + 0.5)))
    return [slots // workers + (i < slots % workers) for i in range(workers)] if slots else []


def run_on_cluster(runner: Any, todo: list[Episode], progress: Any) -> bool:
    """Run `todo` for a BenchRunner (or RolloutRunner) on Ray; True when interrupted."""
    options = ray_options(runner.options.ray)
    say = say_to(runner.options.progress)
    ray = require_ray()
    owned = connect(options.address, say)
    try:
        return ClusterRun(ray, runner, options, progress, say).run(todo)
    finally:
        if owned:
            ray.shutdown()


class ClusterRun:
    """One run's scheduling state; lives in the driver's main thread."""

    unit = "node"
    """What runs episodes, in messages."""

    def __init__(self, ray: Any, runner: Any, options: RayOptions, progress: Any, say: Any) -> None:
        self.ray, self.runner, self.options, self.progress, self.say = ray, runner, options, progress, say
        self.lost_errors = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                            ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError)
        self.setup = self._worker_setup(runner.ctx, "sandbox" in runner.options.modes)
        self.workers: dict[tuple[str, int], Worker] = {}
        self.starting: dict[Any, Worker] = {}
        self.inflight: dict[Any, tuple[Episode, Worker]] = {}
        self.skipped: dict[str, str] = {}
        self.restarts: collections.Counter = collections.Counter()
        self.attempts: collections.Counter = collections.Counter()
        self.queue: collections.deque = collections.deque()
        self.packed: dict[str, tuple] = {}
        self.interrupts = 0
        self.hard_since: float | None = None
        self.warm_until = math.inf  # until a first worker is ready, then WARM_AFTER_FIRST more
        self.next_refresh = 0.0

    def _worker_setup(self, ctx: Any, sandboxes: bool) -> Any:
        """What every worker gets: the config, the spec, the rootfs sent by content hash."""
        from lis_tui.ray.worker import EpisodeWorker, WorkerSetup  # noqa: PLC0415

        self.actor_class = EpisodeWorker
        try:
            parcel = (pack_rootfs(ctx.spec.rootfs, self.ray.put, self.options.rootfs_dir)
                      if sandboxes else None)
        except (RootfsError, OSError) as exc:  # an unknown name, an unwritable --rootfs-dir
            raise ClusterError(f"the rootfs cannot be sent to the nodes: {exc}") from None
        judge = (ctx.judge.config, ctx.judge.prompt) if ctx.judge is not None else None
        return WorkerSetup(ctx.config, ctx.spec, type(ctx), parcel, judge, sandboxes)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, todo: list[Episode]) -> bool:
        self.queue.extend(todo)
        try:
            self._refresh()
            while self.queue or self.inflight:
                try:
                    self._step()
                except KeyboardInterrupt:
                    self.interrupts += 1
                    self._stop()
        finally:
            self._close_all()
        return self.interrupts > 0

    def _step(self) -> None:
        if self.runner.ctx.stop.is_set() and not self.interrupts:
            self.interrupts = 1  # cancel() from another thread: stop as Ctrl-C would
            self._stop()
        if self.hard_since is not None and time.monotonic() - self.hard_since > HARD_STOP_GRACE:
            self._abandon()
            return
        if time.monotonic() >= self.next_refresh:
            self._refresh()
        warming = bool(self.starting) and time.monotonic() < self.warm_until
        if not warming:
            self._dispatch()
        refs = list(self.starting) + ([] if warming else list(self.inflight))
        if not refs:
            self._check_can_run()
            time.sleep(0.2)
            return
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=0.5)
        if ready:  # take every result that is in, not one per turn
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            self._started(ref) if ref in self.starting else self._finished(ref)
        self._show()

    def _dispatch(self) -> None:
        limit = self.options.concurrency or math.inf
        while self.queue and len(self.inflight) < limit:
            worker = max(self.workers.values(), key=lambda w: w.free, default=None)
            if worker is None or worker.free <= 0:
                return
            episode = self.queue.popleft()
            ref = worker.actor.run.remote(*self._parcel(episode))
            self.inflight[ref] = (episode, worker)
            worker.busy += 1
            if worker.busy <= worker.slots:
                self.progress.begin()  # else it waits in the worker's queue for a slot

    def _parcel(self, episode: Episode) -> tuple[Episode, bytes | None]:
        """The episode as it travels (its task's host folders as one tar), and that tar."""
        if episode.task.id not in self.packed:
            self.packed[episode.task.id] = pack_task(episode.task)
        task, folders = self.packed[episode.task.id]
        return replace(episode, task=task), folders

    def _finished(self, ref: Any) -> None:
        episode, worker = self.inflight.pop(ref)
        self._release(worker)
        try:
            result = self.ray.get(ref)
        except self.lost_errors as exc:
            self._lost(episode, worker, exc)
            return
        except self.ray.exceptions.RayTaskError as exc:  # our code failed there: record it
            result = {"record": lost_record(episode, self.runner.options.output,
                                            f"the episode crashed on {worker.name}: {exc}")}
        if result is None:
            return  # cancelled: --resume runs it again
        if result.get("files") is not None:
            folder = self.runner.options.output / "episodes" / episode.folder
            unpack_folder(result["files"], folder)
        record = result["record"] if "node" not in result else {**result["record"], "node": result["node"]}
        self.runner.keep(episode, record, self.progress, result.get("raw"), result.get("trajectory"))

    def _lost(self, episode: Episode, worker: Worker, exc: Exception) -> None:
        self._drop(worker, f"its worker died ({type(exc).__name__})")
        if self.interrupts:
            return  # stopping anyway: --resume runs it again
        self.attempts[episode.key] += 1
        tries = self.attempts[episode.key]
        if tries <= self.options.max_retries:
            self.queue.appendleft(episode)
            return
        message = (f"the episode was lost {tries} times with its Ray node or worker (last on "
                   f"{worker.name}: {type(exc).__name__}); --max-retries is {self.options.max_retries}")
        self.runner.keep(episode, lost_record(episode, self.runner.options.output, message),
                         self.progress)

    # -- nodes -------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Start the workers every live node lacks; forget the workers of dead nodes."""
        self.next_refresh = time.monotonic() + REFRESH_EVERY
        if self.interrupts:
            return
        alive = self._nodes()
        for worker in list(self.workers.values()):
            if worker.node_id not in alive:
                self._drop(worker, "the node left the cluster")
        have = set(self.workers) | {w.key for w in self.starting.values()}
        for node_id, (name, shares, why) in alive.items():
            if node_id in self.skipped:
                continue
            if not shares:
                self._skip(node_id, name, why)
            for index, slots in enumerate(shares):
                if (node_id, index) not in have:
                    self._start(Worker(None, node_id, index, slots, name), len(shares))

    def _nodes(self) -> dict[str, tuple[str, list[int], str]]:
        """The live nodes: id -> (name, each worker's slots, why none when none fit)."""
        nodes = {}
        for node in self.ray.nodes():
            if not node.get("Alive"):
                continue
            node_id = node["NodeID"]
            host, address = node.get("NodeManagerHostname", "?"), node.get("NodeManagerAddress", "?")
            cpus = float(node.get("Resources", {}).get("CPU", 0))
            nodes[node_id] = (f"{host} ({address}, node {node_id[:8]})",
                              worker_slots(cpus, self.options.cpus, self.options.worker_cpus),
                              f"it has {cpus:g} CPUs, fewer than --ray-cpus {self.options.cpus:g} "
                              "that one episode takes")
        return nodes

    def _start(self, worker: Worker, of: int) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

        worker.actor = self.actor_class.options(
            num_cpus=worker.slots * self.options.cpus, max_concurrency=worker.slots,
            scheduling_strategy=NodeAffinitySchedulingStrategy(worker.node_id, soft=False),
        ).remote(self.setup, worker.index, of)
        self.starting[worker.actor.prepare.remote()] = worker

    def _started(self, ref: Any) -> None:
        worker = self.starting.pop(ref)
        try:
            info = self.ray.get(ref)
        except (self.ray.exceptions.RayError, ClusterError) as exc:
            info = {"ok": False, "problem": f"its worker failed to start: {exc}"}
        if not info["ok"]:
            self._kill(worker)
            self._skip(worker.node_id, info.get("node") or worker.name, info["problem"])
            return
        if worker.node_id in self.skipped:  # another worker of its node failed meanwhile
            self._kill(worker)
            return
        worker.name = info["node"]
        self.workers[worker.key] = worker
        # Episodes wait for every node to be ready, so they spread; but not long for a slow one.
        self.warm_until = min(self.warm_until, time.monotonic() + WARM_AFTER_FIRST)

    def _drop(self, worker: Worker, why: str) -> None:
        if self.workers.get(worker.key) is not worker:
            return  # already dropped (each of its episodes reports the same death)
        del self.workers[worker.key]
        self._kill(worker)
        self.restarts[worker.node_id] += 1
        if self.restarts[worker.node_id] > RESTARTS_PER_NODE:
            self._skip(worker.node_id, worker.name, f"its worker died {RESTARTS_PER_NODE + 1} times")
        elif not self.interrupts:
            self.say(f"\nnode {worker.name}: {why}; its episodes run again elsewhere")

    def _skip(self, node_id: str, name: str, why: str) -> None:
        """Run nothing more on the node (its other workers go; their episodes run elsewhere)."""
        if node_id in self.skipped:
            return
        self.skipped[node_id] = why
        self.say(f"\nnode {name} skipped: {why}")
        for worker in [w for w in self.workers.values() if w.node_id == node_id]:
            del self.workers[worker.key]
            self._kill(worker)

    def _check_can_run(self) -> None:
        if not self.queue or self.workers or self.starting or self.inflight:
            return
        self._refresh()  # a node whose worker just died gets a new one, if it still lives
        if not self.starting:
            raise ClusterError(self._cannot_run("; ".join(self.skipped.values())))

    def _cannot_run(self, reasons: str) -> str:
        reasons = reasons or "the cluster has no live node"
        return (f"no node of the Ray cluster can run these episodes ({reasons}). Fix: lis-tui "
                "doctor --ray ADDRESS names what each node lacks; finished episodes are kept, "
                "--resume runs the rest")

    # -- stopping ----------------------------------------------------------------------------
    def _stop(self) -> None:
        hard = self.interrupts > 1
        if self.interrupts == 1:
            self.say(f"\nstopping: every {self.unit} finishes its running episodes' current step "
                     "(Ctrl-C again to kill their sandboxes); --resume continues later")
        self.queue.clear()
        self.runner.ctx.stop.set()
        if self.interrupts > 2:
            self._abandon()
            return
        if hard and self.hard_since is None:
            self.hard_since = time.monotonic()
        for worker in list(self.workers.values()):
            worker.actor.cancel.remote(hard)

    def _abandon(self) -> None:
        """Kill the workers (their sandboxes die with them) and forget their episodes."""
        for _, worker in self.inflight.values():
            self._kill(worker)
            self._release(worker)
        self.inflight.clear()

    def _release(self, worker: Worker) -> None:
        """One of the worker's episodes ended: its slot is free, or taken by a queued one."""
        if worker.busy <= worker.slots:
            self.progress.end()
        worker.busy -= 1

    def _close_all(self) -> None:
        workers = list(self.workers.values()) + list(self.starting.values())
        closing = [w.actor.close.remote() for w in workers]
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=10)
        except KeyboardInterrupt:
            pass  # killed below all the same
        for worker in workers:
            self._kill(worker)
        self.workers.clear()
        self.starting.clear()

    def _kill(self, worker: Worker) -> None:
        try:
            self.ray.kill(worker.actor, no_restart=True)
        except Exception:  # noqa: BLE001 (already dead, node gone: nothing left to kill)
            pass

    def _show(self) -> None:
        working = {w.node_id for w in self.workers.values()}
        note = f"nodes {len(working)}"
        starting = {w.node_id for w in self.starting.values()} - working
        if starting:
            note += f" (+{len(starting)} starting)"
        if self.skipped:
            note += f", {len(self.skipped)} skipped"
        self.progress.note = note
        self.progress.show()
