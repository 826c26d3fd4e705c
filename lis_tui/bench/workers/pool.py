"""Episodes in local worker processes: `lis-tui bench --workers N`, `lis-tui rollout --workers N`.

One Python process runs every episode's agent loop, model client, JSON and scoring under one
interpreter lock, so it uses about one core however many the machine has. With N workers the
episodes run in N processes of this machine (each with its threads and sandboxes), and this
process only schedules, writes results.jsonl (through the runner's `keep`) and shows progress.

It is the Ray cluster's scheduler (`lis_tui.ray.cluster.ClusterRun`) with this machine as its one
node: `LocalPool` answers the few calls that scheduler makes of Ray (wait, get, kill) with
processes forked by multiprocessing's fork server (`worker_main`), each in a session of its own
(Ctrl-C reaches only this process, which stops the workers in order). A worker that dies
(SIGKILL, OOM) has its episodes run again once by another, then recorded as crashed; --resume
runs crashed ones again. No Ray is imported.
"""
from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

from lis_tui.bench.episode import Episode
from lis_tui.bench.workers.host import serve_in_child
from lis_tui.ray import RayOptions, say_to
from lis_tui.ray.cluster import ClusterRun

CORES_PER_WORKER = 2
"""The default: a worker per 2 cores. A worker's Python fills one core while its sandboxes,
shells and the kernel's share of its episodes keep about one more busy."""
NODE = "local"
PRELOAD = "lis_tui.bench.workers.preload"
"""What the fork server imports once, before it forks each worker: the workers share those pages
(a worker is about 34 MiB PSS after 64 episodes forked so, 54 MiB started as an interpreter of
its own)."""
_CONTEXT: list[Any] = []


@contextlib.contextmanager
def _no_main_module() -> Iterator[None]:
    """Start a worker without multiprocessing's import of our `__main__` in it: the worker runs
    lis_tui code only, and a script that calls `rollout()` without an `if __name__ ==
    "__main__"` guard must not run again in every worker."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            del main.__spec__


def _context() -> Any:
    """The multiprocessing "forkserver" context, preloaded (never plain fork: this process has
    threads); its server starts with the first worker and ends with this process."""
    if not _CONTEXT:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([PRELOAD])
        _CONTEXT.append(context)
    return _CONTEXT[0]


def start_worker(label: str, host: type | None = None) -> tuple[Connection, Any]:
    """A worker process forked by the preloaded fork server, serving `host` (default: the
    bench's `WorkerHost`; env serve passes its own) on its end of a pipe, in a session of its
    own: our end of the pipe, and the process. The worker's end lives in the worker alone, so
    EOF on ours is its death."""
    conn, theirs = _context().Pipe()
    proc = _context().Process(target=serve_in_child, args=(theirs, label, host), name=label)
    with _no_main_module():
        proc.start()
    theirs.close()
    return conn, proc


CLOSE_GRACE = 10.0
"""Seconds `close` waits for the workers to kill their sandboxes and exit, before SIGKILL."""


def default_workers(concurrency: int, cores: int | None = None) -> int:
    """Worker processes when none were asked for: one per CORES_PER_WORKER cores, at least one,
    at most one per episode at once."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(concurrency, cores // CORES_PER_WORKER))


class WorkerError(Exception):
    """A worker failed (the scheduler's RayError)."""


class WorkerLost(WorkerError):
    """A worker died with the call unanswered (the scheduler's RayActorError)."""


class WorkerFailed(WorkerError):
    """Our code raised in the worker (the scheduler's RayTaskError): the text holds its trace."""


EXCEPTIONS = SimpleNamespace(RayError=WorkerError, RayActorError=WorkerLost,
                             WorkerCrashedError=WorkerLost, NodeDiedError=WorkerLost,
                             ObjectLostError=WorkerLost, RayTaskError=WorkerFailed)


@dataclass(eq=False)
class Call:
    """One call to a worker (the scheduler's object ref); `state` None until answered."""

    actor: LocalActor
    id: int
    state: str | None = None
    value: Any = None


@dataclass(frozen=True)
class LocalSetup:
    """What a local worker needs (the Ray WorkerSetup's fields it uses, and the output folder)."""

    config: Any
    spec: Any
    context: type
    output: Path
    judge: tuple | None = None
    env: dict | None = None
    """This process's environment and folder when the run starts: the fork server (and so each
    worker) has those of when it started, which may be another run's."""
    cwd: str = "."


class LocalActor:
    """A worker process; `actor.run.remote(...)` sends a call and returns its `Call`."""

    def __init__(self, pool: LocalPool, label: str) -> None:
        self.pool, self.label = pool, label
        self.conn, self.proc = start_worker(label)
        self.calls: dict[int, Call] = {}
        self.dead = self.closing = False

    def __getattr__(self, method: str) -> Any:
        return SimpleNamespace(remote=lambda *args: self._call(method, args))

    def _call(self, method: str, args: tuple) -> Call:
        call = Call(self, next(self.pool.ids))
        self.closing |= method == "close"
        if self.dead:
            call.state, call.value = "lost", f"worker {self.label} is gone"
            return call
        self.calls[call.id] = call
        try:
            self.conn.send((call.id, method, args))
        except OSError:
            self.died()
        return call

    def take(self) -> None:
        """Read every answer that is in (without blocking); EOF: the worker died."""
        try:
            while not self.dead and self.conn.poll():
                call_id, state, value = self.conn.recv()
                call = self.calls.pop(call_id)
                call.state, call.value = state, value
        except (EOFError, OSError):
            self.died()

    def died(self) -> None:
        """Every call in flight is lost; the process is killed and reaped."""
        if self.dead:
            return
        self.dead = True
        for call in self.calls.values():
            call.state, call.value = "lost", f"worker {self.label} died (exit {self.proc.exitcode})"
        self.calls.clear()
        self.conn.close()
        self.kill()

    def kill(self) -> None:
        """SIGKILL, reaped; a worker that was asked to close first gets CLOSE_GRACE seconds to
        exit by itself (its last sandboxes' scratch and its owner file go at its exit)."""
        if self.closing:
            self.proc.join(CLOSE_GRACE)
        if self.proc.exitcode is None:
            self.proc.kill()
        self.proc.join()


class LocalPool:
    """The part of Ray's API that ClusterRun uses, over local worker processes."""

    exceptions = EXCEPTIONS

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.actors: list[LocalActor] = []

    def start(self, label: str) -> LocalActor:
        actor = LocalActor(self, label)
        self.actors.append(actor)
        return actor

    def wait(self, calls: list[Call], num_returns: int = 1,
             timeout: float | None = None) -> tuple[list[Call], list[Call]]:
        deadline = time.monotonic() + (timeout or 0)
        while True:
            for actor in self.actors:
                actor.take()
            ready = [c for c in calls if c.state is not None]
            left = deadline - time.monotonic()
            if len(ready) >= num_returns or left <= 0:
                return ready, [c for c in calls if c.state is None]
            live = {a.conn: a for a in self.actors if not a.dead and a.calls}
            if not live:
                time.sleep(min(left, 0.05))
                continue
            wait(list(live), left)

    def get(self, call: Call) -> Any:
        if call.state == "ok":
            return call.value
        if call.state == "lost":
            raise WorkerLost(call.value)
        raise WorkerFailed(call.value)

    def kill(self, actor: LocalActor, no_restart: bool = True) -> None:
        actor.died()
        if actor in self.actors:
            self.actors.remove(actor)

    def close(self) -> None:
        """Kill (and reap) every worker still here."""
        for actor in list(self.actors):
            self.kill(actor)


class LocalRun(ClusterRun):
    """The cluster scheduler with `workers` processes of this machine as its one node."""

    unit = "worker"

    def __init__(self, runner: Any, workers: int, progress: Any) -> None:
        concurrency = runner.options.concurrency
        self.shares = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
        # The workers' slots add up to `concurrency`; each also holds a few episodes queued, so
        # a slot that frees up starts its next at once (ClusterRun's QUEUED_PER_SLOTS).
        options = RayOptions(concurrency=None, max_retries=1)
        super().__init__(LocalPool(), runner, options, progress, say_to(runner.options.progress))

    def _worker_setup(self, ctx: Any, sandboxes: bool) -> LocalSetup:
        judge = (ctx.judge.config, ctx.judge.prompt) if ctx.judge is not None else None
        return LocalSetup(ctx.config, ctx.spec, type(ctx), ctx.output, judge, dict(os.environ), os.getcwd())

    def _nodes(self) -> dict[str, tuple[str, list[int], str]]:
        return {NODE: ("this machine", self.shares, "")}

    def _start(self, worker: Any, of: int) -> None:
        worker.actor = self.ray.start(f"worker {worker.index + 1} of {of}")
        self.starting[worker.actor.prepare.remote(self.setup, worker.slots)] = worker

    def _parcel(self, episode: Episode) -> tuple[Episode, None]:
        return episode, None  # the worker reads the task's folders where they are

    def _close_all(self) -> None:
        super()._close_all()  # each worker was asked to close; the pool kills the rest
        self.ray.close()

    def _cannot_run(self, reasons: str) -> str:
        return (f"no worker process could run these episodes ({reasons}). Fix: run with "
                "--workers 1 to see the error in this process; finished episodes are kept, "
                "--resume runs the rest")

    def _show(self) -> None:
        self.progress.note = f"workers {len(self.workers)}"
        self.progress.show()


def run_in_workers(runner: Any, todo: list[Episode], progress: Any, workers: int) -> bool:
    """Run `todo` for a BenchRunner (or RolloutRunner) in `workers` processes; True when
    interrupted."""
    return LocalRun(runner, workers, progress).run(todo)
