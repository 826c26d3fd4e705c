"""`lis-tui env serve --workers N`: the environments live in N worker processes, behind one port.

The server's `EnvPool` stays in this process and keeps every limit as with one process (the
cap on live environments, idle reaping, one step at a time, the ids); what it holds for each
environment is a `RemoteEnv`, whose reset places it on the least loaded worker and whose steps
and close are forwarded there. A worker is a process forked like the bench's
(`lis_tui.bench.workers.pool.start_worker`) running `lis_tui.rl.worker_main.EnvHost`.

Each worker's pipe has one reader, a thread of this process that hands answers to the calls
waiting on them; calls are sent one at a time under the worker's lock, which also guards the
descriptor's close. A worker that dies (SIGKILL, OOM) fails the calls in flight, its
environments are dropped from the pool and answer 410 with the reason (their sandboxes end with
it: their pid 1 and spawn helper see it go), and the next reset starts a new worker in its place.
"""
from __future__ import annotations

import itertools
import logging
import signal
import threading
from concurrent.futures import Future
from typing import Any

from lis_tui.bench.workers.pool import start_worker
from lis_tui.rl.env import EnvClosed, StepResult
from lis_tui.rl.pool import EnvPool, PoolError, PoolFull
from lis_tui.rl.worker_main import EnvHost, EnvSetup

log = logging.getLogger(__name__)
STOP_GRACE = 30.0
"""Seconds a stopping worker has to close its sandboxes and exit before it is killed (its
sandboxes end with it either way; the grace lets it remove their scratch folders)."""


class WorkerGone(PoolError):
    """A reset whose worker died under it: nothing is left of it; another reset may succeed."""

    status = 503


class _Died(Exception):
    """The worker is gone; the text says how."""


class _Worker:
    """One worker process and our end of its pipe; `call` may be made from any thread."""

    def __init__(self, label: str, setup: EnvSetup, on_death: Any) -> None:
        self.label, self.on_death = label, on_death
        self.conn, self.proc = start_worker(label, EnvHost)
        self.placed = 0
        """Environments placed here and not closed (counted by EnvWorkers under its lock)."""
        self.why = ""
        """How the worker ended, once it has."""
        self.stopping = False
        self._calls: dict[int, Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # _calls, why, sending and closing the descriptor
        self._reader = threading.Thread(target=self._read, name=f"lis-env-{label}", daemon=True)
        self._reader.start()
        try:
            self.pid = self.call("prepare", setup)
        except BaseException:
            self.stop()  # a worker that cannot build environments is none of ours
            self.wait(5.0)
            raise

    def call(self, method: str, *args: Any) -> Any:
        """Send one call and wait for its answer; raises the worker's error, or _Died."""
        future: Future = Future()
        with self._lock:
            if self.why:
                raise _Died(self.why)
            call_id = next(self._ids)
            self._calls[call_id] = future
            try:
                self.conn.send((call_id, method, args))
            except OSError:  # its end is closed: the reader is about to see EOF
                self._calls.pop(call_id)
                raise _Died(f"{self.label} is gone") from None
        state, value = future.result()
        if state == "ok":
            return value
        raise value

    def stop(self) -> None:
        """Ask the worker to close its sandboxes and exit (`wait` then waits for it)."""
        with self._lock:
            self.stopping = True
            if not self.why:
                try:
                    self.conn.send((next(self._ids), "stop", ()))
                except OSError:
                    pass

    def wait(self, grace: float) -> None:
        self._reader.join(grace)
        if self._reader.is_alive():
            self.proc.kill()
            self._reader.join()

    def _read(self) -> None:
        """The pipe's only reader: answers to their calls, until EOF (the worker's exit)."""
        try:
            while True:
                call_id, state, value = self.conn.recv()
                with self._lock:
                    future = self._calls.pop(call_id, None)
                if future is not None:
                    future.set_result((state, value))
        except (EOFError, OSError):
            pass
        except Exception:  # noqa: BLE001 (an answer that cannot be read: the pipe is unusable)
            log.exception("%s sent what could not be read; it is stopped", self.label)
            self.proc.kill()
        self.proc.join(STOP_GRACE)
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join()
        with self._lock:
            self.why = self._ending()
            calls, self._calls = list(self._calls.values()), {}
            self.conn.close()
        for future in calls:
            future.set_result(("error", _Died(self.why)))
        if not self.stopping:
            self.on_death(self)

    def _ending(self) -> str:
        code = self.proc.exitcode
        if self.stopping:
            return f"{self.label} was stopped with the server"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"{self.label} (pid {self.proc.pid}) was killed by {name}"
        return f"{self.label} (pid {self.proc.pid}) exited with status {code}"


class EnvWorkers:
    """N worker processes; `make_env` is the server's `EnvPool` factory."""

    def __init__(self, count: int, setup: EnvSetup) -> None:
        self.count, self.setup = count, setup
        self.pool: EnvPool | None = None
        """Told of the environments a dead worker took with it (set once the pool is made)."""
        self.closed = False
        self._handles = itertools.count()
        self._lock = threading.Lock()  # workers, placed counts, closed
        self.workers: list[_Worker] = []
        try:
            for i in range(count):
                self.workers.append(self._start(i))
        except BaseException:
            self.close()
            raise

    def _start(self, index: int) -> _Worker:
        return _Worker(f"worker {index + 1} of {self.count}", self.setup, self._died)

    def make_env(self, max_steps: int) -> RemoteEnv:
        return RemoteEnv(self, next(self._handles), max_steps)

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self.workers if not w.why]

    def place(self) -> _Worker:
        """The live worker with the fewest environments (starting ones included); a dead one is
        replaced first."""
        with self._lock:
            if self.closed:
                raise PoolFull("the server is shutting down")
            for i, worker in enumerate(self.workers):
                if worker.why:
                    try:
                        self.workers[i] = self._start(i)
                    except Exception:  # noqa: BLE001 (the others still serve)
                        log.exception("%s could not be started again", worker.label)
            live = [w for w in self.workers if not w.why]
            if not live:
                raise WorkerGone("no worker process is running (the server's log says why): "
                                 "retry, or restart the server")
            worker = min(live, key=lambda w: w.placed)
            worker.placed += 1
            return worker

    def unplace(self, worker: _Worker) -> None:
        with self._lock:
            worker.placed -= 1

    def _died(self, worker: _Worker) -> None:
        log.warning("%s: its environments are gone (their calls answer 410); new ones go to the "
                    "other workers and one started in its place", worker.why)
        if self.pool is not None:
            self.pool.drop(lambda env: isinstance(env, RemoteEnv) and env.worker is worker,
                           f"was lost with its worker process ({worker.why}), and its sandbox with it")

    def close(self) -> None:
        """Stop every worker: each closes its sandboxes and exits (killed after STOP_GRACE)."""
        with self._lock:
            self.closed = True
            workers = list(self.workers)
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.wait(STOP_GRACE)


class RemoteEnv:
    """A `SandboxEnv` in a worker process, as the pool sees one: reset, step, close."""

    def __init__(self, workers: EnvWorkers, handle: int, max_steps: int) -> None:
        self.workers, self.handle, self.max_steps = workers, handle, max_steps
        self.worker: _Worker | None = None
        self._closed = False
        self._lock = threading.Lock()

    def reset(self, task: Any) -> dict[str, Any]:
        self.worker = self.workers.place()
        try:
            return self.worker.call("reset", self.handle, task, self.max_steps)
        except _Died as exc:
            raise WorkerGone(f"{exc} while this environment started: retry") from None

    def step(self, assistant: Any) -> StepResult:
        worker = self.worker
        if worker is None or self._closed:
            raise EnvClosed("the environment was closed; POST /envs starts another")
        try:
            return worker.call("step", self.handle, assistant)
        except _Died as exc:
            raise EnvClosed(f"its worker process is gone ({exc}), and its sandbox with it: what "
                            "the step did is lost; POST /envs starts another") from None

    def close(self) -> None:
        with self._lock:
            worker, done, self._closed = self.worker, self._closed, True
        if worker is None or done:
            return
        self.workers.unplace(worker)
        try:
            worker.call("close", self.handle)
        except _Died:
            pass  # its sandbox went with the worker
