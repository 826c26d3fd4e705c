"""`EnvPool`: the live environments of one server, by id, with a cap and an idle reaper."""
from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from lis_tui.rl.env import EnvClosed, SandboxEnv, StepResult

log = logging.getLogger(__name__)
GONE_REMEMBERED = 10_000  # ids of reaped (or lost) environments kept to say why rather than "unknown"


class PoolError(Exception):
    """A request the pool refuses; `status` is the HTTP status that fits it."""

    status = 400


class PoolFull(PoolError):
    status = 503


class EnvNotFound(PoolError):
    status = 404


class EnvGone(PoolError):
    status = 410


class EnvBusy(PoolError):
    status = 409


@dataclass
class PoolConfig:
    """Limits of one pool."""

    max_envs: int = 512
    """Live environments at most; a reset past it is refused until one closes or is reaped."""
    idle_timeout: float = 600.0
    """Seconds an environment may go without a call before it is closed."""
    max_steps: int = 50
    """Steps per episode; the step that reaches it ends the episode (finish reason max_steps)."""


class _Slot:
    def __init__(self, env: SandboxEnv) -> None:
        self.env, self.used, self.busy = env, time.monotonic(), threading.Lock()


class EnvPool:
    """Thread-safe registry of environments; `make_env(max_steps)` builds one."""

    def __init__(self, make_env: Callable[[int], SandboxEnv], config: PoolConfig | None = None) -> None:
        self.config = config or PoolConfig()
        self._make_env = make_env
        self._slots: dict[str, _Slot] = {}
        self._starting = 0
        self._lock = threading.Lock()
        self._gone: collections.OrderedDict[str, str] = collections.OrderedDict()  # id -> why (410)
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="lis-env-reaper", daemon=True)
        self._reaper.start()

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._slots) + self._starting

    def create(self, task: Any, max_steps: int | None = None) -> tuple[str, dict[str, Any]]:
        """A new environment reset on `task`: its id and its first messages and tools."""
        steps = min(max_steps or self.config.max_steps, self.config.max_steps)
        with self._lock:  # the slot is held while the sandbox starts, so the cap is exact
            if self._stop.is_set():
                raise PoolFull("the server is shutting down")
            if len(self._slots) + self._starting >= self.config.max_envs:
                raise PoolFull(f"{self.config.max_envs} environments are live, the most this server "
                               "allows: close finished ones (DELETE /envs/ID), or restart the server "
                               "with a higher --max-envs")
            self._starting += 1
        env = None
        try:
            env = self._make_env(steps)
            first = env.reset(task)
        except BaseException:
            if env is not None:
                env.close()
            with self._lock:
                self._starting -= 1
            raise
        env_id = secrets.token_hex(8)
        with self._lock:
            self._starting -= 1
            stopped = self._stop.is_set()
            if not stopped:
                self._slots[env_id] = _Slot(env)
        if stopped:  # close_all() ran while this one started: it would outlive the pool
            env.close()
            raise PoolFull("the server is shutting down")
        return env_id, first

    def step(self, env_id: str, assistant: Any) -> StepResult:
        slot = self._slot(env_id, take=True)
        try:
            return slot.env.step(assistant)
        except EnvClosed as exc:
            with self._lock:  # not closed by a call here: its worker process died under it
                if self._slots.get(env_id) is slot:
                    del self._slots[env_id]
                    self._remember(env_id, f"environment {env_id}: {exc}")
            raise EnvGone(f"environment {env_id}: {exc}") from None
        finally:
            slot.used = time.monotonic()
            slot.busy.release()

    def close(self, env_id: str) -> None:
        with self._lock:
            slot = self._slots.pop(env_id, None)
        if slot is None:
            self._slot(env_id)  # raises the right error
        slot.env.close()

    def close_all(self) -> None:
        self._stop.set()
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            _close_quietly(slot.env)

    def reap(self, now: float | None = None) -> int:
        """Close the environments idle longer than the timeout; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [i for i, s in self._slots.items()
                    if now - s.used > self.config.idle_timeout and not s.busy.locked()]
            slots = [self._slots.pop(i) for i in idle]
            for env_id in idle:
                self._remember(env_id, f"environment {env_id} was closed after "
                                       f"{self.config.idle_timeout:g} s without a call (raise "
                                       "--idle-timeout if episodes pause that long)")
        for slot in slots:
            _close_quietly(slot.env)
        return len(slots)

    def drop(self, lost: Callable[[Any], bool], why: str) -> int:
        """Forget the environments for which `lost(env)` holds (a dead worker's): their calls
        answer 410 with `environment ID {why}`; returns how many."""
        with self._lock:
            ids = [i for i, s in self._slots.items() if lost(s.env)]
            slots = [self._slots.pop(i) for i in ids]
            for env_id in ids:
                self._remember(env_id, f"environment {env_id} {why}; POST /envs starts another")
        for slot in slots:
            _close_quietly(slot.env)
        return len(slots)

    def _remember(self, env_id: str, why: str) -> None:
        """Under the lock: `env_id` is gone, and why."""
        self._gone[env_id] = why
        while len(self._gone) > GONE_REMEMBERED:
            self._gone.popitem(last=False)

    def _slot(self, env_id: str, take: bool = False) -> _Slot:
        """The live slot `env_id`; `take`: its busy lock too, taken under the pool's lock, so the
        reaper (which skips busy slots under the same lock) never closes one a step has begun on."""
        with self._lock:
            slot = self._slots.get(env_id)
            if slot is not None:
                if take and not slot.busy.acquire(blocking=False):
                    raise EnvBusy(f"environment {env_id} is still running a step; send one step at a time")
                slot.used = time.monotonic()
                return slot
            why = self._gone.get(env_id)
        if why is not None:
            raise EnvGone(why)
        raise EnvNotFound(f"no environment {env_id[:64]!r}: it was closed, or never existed")

    def _reap_loop(self) -> None:
        while not self._stop.wait(min(max(self.config.idle_timeout / 4, 0.05), 5.0)):
            self.reap()


def _close_quietly(env: SandboxEnv) -> None:
    """Close one environment; a failure is logged, so the others are still closed."""
    try:
        env.close()
    except Exception:  # noqa: BLE001 (its sandbox is closed regardless: SandboxEnv.close)
        log.exception("closing an environment failed")
