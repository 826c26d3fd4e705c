"""One worker process of `lis-tui env serve --workers N`: holds the environments its parent
(lis_tui.rl.workers) places on it, each a `SandboxEnv` with its sandbox, by the handle the
parent gave it.

Requests are (call id, method, args), answers (call id, "ok" | "error", value), as in the bench's
workers (lis_tui.bench.workers.host, whose `serve_in_child` runs `EnvHost`). Only this process's
main thread reads the pipe; each reset, step and close runs on a thread of its own (a step may
take minutes), and answers go out one at a time under a lock. The parent keeps every limit (the
cap, idle reaping, one step at a time); this side only runs what it is sent. On `stop`, or when
the parent goes away (EOF), every sandbox here is closed and the process exits.
"""
from __future__ import annotations

import logging
import os
import pickle
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lis_tui.bench.workers.host import CallHost
from lis_tui.rl.env import EnvClosed, EnvError, SandboxEnv
from lis_tui.rl.pool import PoolError
from lis_tui.model.textcalls import AssistantError

log = logging.getLogger(__name__)
PASSED_ON = (PoolError, EnvError, AssistantError)
"""Errors the server answers with their own status: sent to the parent as they are."""


@dataclass(frozen=True)
class EnvSetup:
    """What a worker needs to build environments as the single-process server does."""

    config: Any
    spec: Any
    judge: tuple | None = None
    """The judge's (model config, prompt), or None."""
    env: dict | None = None
    """The server's environment and folder: the fork server (and so each worker) has those of
    when it started."""
    cwd: str = "."


class EnvHost(CallHost):
    """The worker's side of `lis_tui.rl.workers._Worker`'s calls."""

    LAST = "stop"

    def __init__(self, conn: Connection, label: str) -> None:
        super().__init__(conn, label)
        self.setup: EnvSetup | None = None
        self.judge: Any = None
        self.envs: dict[int, SandboxEnv] = {}
        self._lock = threading.Lock()  # self.envs

    def dispatch(self, call_id: int, method: str, args: tuple) -> None:
        if method in ("reset", "step", "close"):  # a step may take minutes: the next call is read meanwhile
            threading.Thread(target=self._answer, args=(call_id, getattr(self, method), args),
                             name=f"lis-env-{method}", daemon=True).start()
        else:
            super().dispatch(call_id, method, args)

    def prepare(self, setup: EnvSetup) -> int:
        if setup.env is not None:
            os.environ.clear()
            os.environ.update(setup.env)
        os.chdir(setup.cwd)
        if setup.judge is not None:
            from lis_tui.bench.scoring.judge import Judge  # noqa: PLC0415

            self.judge = Judge(*setup.judge)
        self.setup = setup
        return os.getpid()

    def reset(self, handle: int, task: Any, max_steps: int) -> dict[str, Any]:
        assert self.setup is not None, "prepare() first"
        env = SandboxEnv(self.setup.config, self.setup.spec, self.judge, max_steps=max_steps)
        with self._lock:
            self.envs[handle] = env
        try:
            return env.reset(task)
        except BaseException:
            with self._lock:
                self.envs.pop(handle, None)
            env.close()
            raise

    def step(self, handle: int, assistant: Any) -> Any:
        with self._lock:
            env = self.envs.get(handle)
        if env is None:
            raise EnvClosed("the environment was closed; POST /envs starts another")
        return env.step(assistant)

    def close(self, handle: int) -> None:
        with self._lock:
            env = self.envs.pop(handle, None)
        if env is not None:
            env.close()

    def stop(self) -> int:
        with self._lock:
            envs, self.envs = list(self.envs.values()), {}
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 (its sandbox is closed regardless: SandboxEnv.close)
                log.exception("closing an environment failed")
        return len(envs)

    def error(self, exc: BaseException) -> Exception:
        """`exc` itself when the server answers it by its kind (409, 410, 400 ...) and it crosses
        the pipe intact; else a RuntimeError holding its trace, which the server logs (a 500)."""
        if isinstance(exc, PASSED_ON):
            try:
                return pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001
                pass
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return RuntimeError(f"in {self.label}: {type(exc).__name__}: {exc}\n\n{text}")
