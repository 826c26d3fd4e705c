"""One local worker process of `lis-tui bench --workers N` (and rollout): runs the episodes its
parent hands it, each in its own thread and sandbox, exactly as the single-process runner runs
them (`run_episode`), writing each episode's folder straight into the run's output folder.

    serve_in_child(conn, label)     # a multiprocessing target; conn: its end of a Pipe

Requests are (call id, method, args); each answer is (call id, "ok" | "error", value). Only the
parent writes results.jsonl. The worker lives in a session of its own (a terminal's Ctrl-C goes
to the parent, which stops the run in order); when the parent goes away (EOF) every sandbox of
the worker is killed and it exits.
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import os
import threading
import traceback
from multiprocessing.connection import Connection
from dataclasses import dataclass
from typing import Any

from lis_tui.bench.episode import Episode, run_episode


@dataclass(frozen=True)
class SentTrajectory:
    """What a rollout line takes from an episode's trajectory writer (`doc`'s tools and tool
    format, the messages as the writer encoded them), sent instead of the writer itself so the
    parent neither reads trajectory.json back nor encodes the messages again."""

    doc: dict[str, Any]
    encoded: str

    @property
    def messages(self) -> SentTrajectory:
        return self

    def compact(self) -> str:
        return self.encoded


class CallHost:
    """The worker's side of a parent's calls on its end of a pipe: (call id, method, args) in,
    (call id, "ok" | "error", value) out. Only `serve()`'s thread reads the pipe; answers go out
    one at a time under a lock. When the parent's end closes (it died), `stop()` runs: nothing
    of ours may outlive it. Each host names the call that ends it (`LAST`) and may run a call
    on another thread (`dispatch`)."""

    LAST = "close"

    def __init__(self, conn: Connection, label: str) -> None:
        self.conn, self.label = conn, label
        self._send_lock = threading.Lock()

    def serve(self) -> None:
        """Answer calls until `LAST` or the parent's end of the pipe closes."""
        while True:
            try:
                call_id, method, args = self.conn.recv()
            except (EOFError, OSError):
                self.stop()  # the parent died: nothing of ours may outlive it
                return
            if method == self.LAST:
                self._answer(call_id, self.stop, ())
                return
            self.dispatch(call_id, method, args)

    def dispatch(self, call_id: int, method: str, args: tuple) -> None:
        self._answer(call_id, getattr(self, method, None) or self._unknown(method), args)

    def stop(self) -> Any:
        raise NotImplementedError

    def error(self, exc: BaseException) -> Any:
        """What the parent gets for a call that raised: its trace, as text."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return f"{type(exc).__name__}: {exc}\n\n{text}"

    def _unknown(self, method: str) -> Any:
        def refuse(*_: Any) -> None:
            raise ValueError(f"{self.label} has no call {method!r}")
        return refuse

    def _answer(self, call_id: int, method: Any, args: tuple) -> None:
        try:
            reply = (call_id, "ok", method(*args))
        except BaseException as exc:  # noqa: BLE001 (the parent answers it; the worker goes on)
            reply = (call_id, "error", self.error(exc))
        with self._send_lock:
            try:
                self.conn.send(reply)
            except OSError:  # the parent is gone; serve() sees EOF and stops
                pass


class WorkerHost(CallHost):
    """The worker's side of the calls `lis_tui.bench.workers.pool.LocalActor` makes."""

    def __init__(self, conn: Connection, label: str) -> None:
        super().__init__(conn, label)
        self.ctx: Any = None
        self.pool: cf.ThreadPoolExecutor | None = None

    def dispatch(self, call_id: int, method: str, args: tuple) -> None:
        if method == "run":  # an episode: on the pool, so the next call is read meanwhile
            assert self.pool is not None, "prepare() first"
            self.pool.submit(self._answer, call_id, self.run, args)
        else:
            super().dispatch(call_id, method, args)

    def prepare(self, setup: Any, slots: int) -> dict[str, Any]:
        os.environ.clear()
        os.environ.update(setup.env)
        os.chdir(setup.cwd)
        judge = None
        if setup.judge is not None:
            from lis_tui.bench.scoring.judge import Judge  # noqa: PLC0415

            judge = Judge(*setup.judge)
        self.ctx = setup.context(setup.config, setup.spec, setup.output, judge)
        self.pool = cf.ThreadPoolExecutor(slots, thread_name_prefix="lis-worker")
        return {"ok": True, "node": self.label, "problem": ""}

    def run(self, episode: Episode, folders: None = None) -> dict[str, Any] | None:
        """One episode; None when it was cancelled (the parent records nothing then)."""
        ctx = self.ctx
        if hasattr(ctx, "take_raw"):
            ctx._local.recorder = None  # an episode that crashes before its agent has none
            ctx._local.writer = None
        record = run_episode(episode, ctx)
        raw = ctx.take_raw() if hasattr(ctx, "take_raw") else None
        writer = ctx.take_trajectory() if hasattr(ctx, "take_trajectory") else None
        if record is None:
            return None
        result: dict[str, Any] = {"record": record, "raw": raw}
        if writer is not None:  # the rollout line's messages, as the writer encoded them
            result["trajectory"] = SentTrajectory(
                {k: writer.doc.get(k) for k in ("tools", "tool_format") if k in writer.doc},
                writer.messages.compact())
        return result

    def cancel(self, hard: bool = False) -> None:
        if self.ctx is not None:
            self.ctx.cancel(hard)

    def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.cancel(hard=True)
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.ctx is not None:
            self.ctx.close()


def serve_in_child(conn: Connection, label: str, host: type | None = None) -> None:
    """The worker process's body (a multiprocessing target): `host` (default `WorkerHost`;
    `lis-tui env serve` passes its `EnvHost`) answers the parent's calls on `conn`."""
    os.setsid()  # Ctrl-C at the terminal is the parent's to handle: it stops us in order
    os.set_inheritable(conn.fileno(), False)  # no sandbox helper may hold the parent's pipe open
    try:
        (host or WorkerHost)(conn, label).serve()
    finally:
        # multiprocessing ends its children with os._exit, past atexit, where the sandbox layer
        # waits for its scratch removals and drops this process's owner file
        atexit._run_exitfuncs()
