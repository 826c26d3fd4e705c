"""Ending a sandbox: close() (every process killed, pid 1 reaped by bwrap, the zygote, cgroup,
record and scratch let go, a kept session's layers saved first), the close at the wall time, and
the stop a limit makes (every process killed, the sandbox kept readable until close)."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from typing import TYPE_CHECKING

from ..limits import budget, capacity, diskcap, memcap
from .. import session_layers, spawn
from ..output import ready
from ..spec import SandboxError

if TYPE_CHECKING:
    from . import Sandbox

BWRAP_EXIT_WAIT = 2.0  # seconds close() gives bwrap to reap the killed pid 1 and exit, before killing it
FILE_OPS_WAIT = 10.0  # seconds close() waits for host-side file operations under way (each takes ms)
log = logging.getLogger(__name__)


def close(sandbox: Sandbox) -> None:
    """Kill every process of the sandbox and remove its scratch; safe to call twice, from any thread."""
    with sandbox._file_ops:  # no file operation starts now; those under way end before the teardown
        sandbox._closing = True
        sandbox._file_ops.wait_for(lambda: sandbox._file_ops_running == 0, FILE_OPS_WAIT)
    with sandbox._close_lock:
        unsaved = sandbox._close()
    if unsaved:
        raise SandboxError(unsaved)


def _close(sandbox: Sandbox) -> str | None:
    """The teardown; returns why a kept session's layers could not be saved, else None."""
    unsaved = None
    # Killing the pid namespace's init takes every process in it down, and its pidfd turns readable
    # only once they are all gone: after the wait below, nothing of the sandbox runs. Killed first,
    # so that the kernel empties the namespace while the watchers let go. (No pidfd: pid 1 is gone
    # already, or never ran; bwrap and a child waiting on it are killed below.)
    pidfd = sandbox._pid_1_fd()
    if pidfd is not None:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
    diskcap.unwatch(sandbox)
    memcap.unwatch(sandbox)
    budget.untrack(sandbox)
    if sandbox._timer and sandbox._timer is not threading.current_thread():
        sandbox._timer.cancel()
    if sandbox.network is not None:
        sandbox.network.detach()
        sandbox.network = None
    if sandbox._proc is not None:
        if pidfd is not None:
            ready([pidfd], 10)
            os.close(pidfd)
        # bwrap reaps pid 1 and exits (killed first, it would leave pid 1 a zombie for the host's
        # init to reap, whenever that gets to it); one that does not is killed with its group
        if pidfd is None or not _exited(sandbox._proc, BWRAP_EXIT_WAIT):
            _kill_group(sandbox._proc)
    if sandbox._zygote is not None:
        sandbox._zygote.close()
        sandbox._zygote = None
    if sandbox._session is not None and sandbox._host is not None and sandbox._counted:
        _keep_host(sandbox)
    if sandbox._rw_fd is not None:  # the last hold on the layers' tmpfs: its memory goes back now
        if sandbox._session is not None and sandbox._counted:  # a kept session that ran: to disk first
            unsaved = sandbox._save_session()
        os.close(sandbox._rw_fd)
        sandbox._rw_fd = None
    if sandbox._cgroup is not None:
        sandbox._cgroup.remove()
        sandbox._cgroup = None
    if sandbox._err_fd is not None:
        os.close(sandbox._err_fd)
        sandbox._err_fd = None
    if sandbox._record is not None:
        if sandbox._proc is not None:
            spawn.end_with_us(sandbox._record.marker, live=False)
        sandbox._record.release()
        sandbox._record = None
    if sandbox._session is not None:
        sandbox._session.release()
        sandbox._session = None
    if sandbox._counted:
        capacity.closed()
        sandbox._counted = False
    sandbox.pid = None
    return unsaved


def _close_at_wall_time(sandbox: Sandbox) -> None:
    with contextlib.suppress(SandboxError):  # an unsaved session: logged, and no caller to raise to
        sandbox.close()


def _save_session(sandbox: Sandbox) -> str | None:
    """Copy a kept session's layers to its folder (session_layers.save); on failure, why."""
    try:
        session_layers.save(sandbox._session.dir, sandbox._rw_fd)
    except (OSError, SandboxError) as exc:
        why = session_layers.unsaved(sandbox._session.dir, exc)
        log.warning("%s", why)
        return why
    return None


def _keep_host(sandbox: Sandbox) -> None:
    """A kept session's knowledge of its workspace, brought up to date and saved with it, while its
    layers are still there and nothing of it runs."""
    from .review import learn_host  # noqa: PLC0415

    try:
        learn_host(sandbox)
    except (OSError, SandboxError) as exc:  # what could not be learnt is a conflict later, never lost work
        log.warning("session %s: could not look at its changes' paths on the host: %s", sandbox._session.id, exc)
    try:
        sandbox._session.save_host(sandbox._host.record())
    except OSError as exc:
        log.warning("session %s: could not save what it knows of its workspace: %s", sandbox._session.id, exc)


def _stop(sandbox: Sandbox, why: str) -> None:
    """Kill every process of the sandbox, pid 1 included, and say why from now on: to the
    next command's caller once (disk_note), and in the error of every later one. close()
    still has to be called."""
    with sandbox._close_lock:
        if sandbox.pid is None or sandbox._stopped:
            return
        sandbox._stopped = why
        sandbox._disk_note = f"the sandbox was stopped: {why}."
        pidfd = sandbox._pid_1_fd()
        if pidfd is None:  # gone already
            return
        try:  # the pid namespace's init: the kernel takes every other process in it along
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(pidfd)


def _kill_group(proc: subprocess.Popen) -> None:
    """bwrap and what its group holds (its child, before that has a session of its own), once it is
    not reaped yet (its group's number is still its own)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether our child `proc` has exited (and is reaped) within `timeout`, woken by a pidfd the
    moment it exits: Popen.wait(timeout) polls, with sleeps that double from 0.5 ms, and lost a
    millisecond or two of every close."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)  # not reaped: the pid is still our child's
    except OSError:
        return proc.poll() is not None
    try:
        ready([fd], timeout)
    finally:
        os.close(fd)
    return proc.poll() is not None
