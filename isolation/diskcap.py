"""The disk cap: what a sandbox's writable layers hold, measured while it runs.

Rootless, there is no quota to set on a directory, so one thread per process walks the writable
layers of every sandbox that has a disk limit, round-robin, and spends at most a tenth of a core
doing it: a pass that took t seconds is followed by a pause of max(1 s, 9 t). A sandbox found over
its limit is stopped whole, pid 1 included (`Sandbox._over_disk`): `Sandbox.disk_note()` says so
to whoever ran the command under way (the shell tool tells the model), and every later command
fails with the same reason, naming --disk. Between two passes a fast writer can overshoot
by what it writes in a few seconds; the cap bounds a runaway, it is not a quota.
"""
from __future__ import annotations

import threading
import time
import weakref

MIN_PAUSE = 1.0
DUTY = 0.1

_watched: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def watch(sandbox) -> None:
    """Check `sandbox.writable_size()` against `sandbox.spec.limits.disk` until it closes."""
    global _thread
    with _lock:
        _watched.add(sandbox)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="lis-disk-cap", daemon=True)
            _thread.start()


def unwatch(sandbox) -> None:
    with _lock:
        _watched.discard(sandbox)


def check(sandbox) -> None:
    """One measure of one sandbox; over the limit, it is stopped (`_over_disk`)."""
    limit = sandbox.spec.limits.disk
    used = sandbox.writable_size()
    if limit and used is not None and used > limit:
        sandbox._over_disk(used)


def _loop() -> None:
    while True:
        with _lock:
            sandboxes = list(_watched)
        start = time.monotonic()
        for sandbox in sandboxes:
            if sandbox.running:
                check(sandbox)
        took = time.monotonic() - start
        time.sleep(max(MIN_PAUSE, took * (1 - DUTY) / DUTY))
