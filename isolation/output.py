"""Collect a child's stdout and stderr with a byte cap and a timeout, feeding its stdin meanwhile;
and write all of some bytes to a descriptor."""
from __future__ import annotations

import os
import select
import selectors
import signal
import time

CHUNK = 1 << 16


def collect(proc, stdin: bytes | None, timeout: float | None,
            cap: int) -> tuple[bytes, bytes, bool, int]:
    """(stdout, stderr, timed_out, dropped bytes) of a `spawn.Joined`; at the timeout the whole
    process group is killed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    dropped = 0
    sel = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        sel.register(stream.fileno(), selectors.EVENT_READ)
    view = memoryview(stdin or b"")
    in_fd = proc.stdin.fileno() if proc.stdin is not None else -1
    if proc.stdin is not None:
        if view:
            os.set_blocking(in_fd, False)
            sel.register(in_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    # A background child may hold the pipes open long after the command itself is done:
    # stop when the command exits, after draining what is already there.
    exit_fd = proc.exit_fd
    sel.register(exit_fd, selectors.EVENT_READ)
    timed_out = False
    while len(sel.get_map()) > 1:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(left):
            fd = key.fd
            if fd not in sel.get_map():  # already drained and dropped by an earlier event of this batch
                continue
            if fd == exit_fd:
                for out in (out_fd, err_fd):
                    if out in sel.get_map():
                        dropped += _drain(out, bufs[out], cap)
                        sel.unregister(out)
                continue
            if fd == in_fd:
                try:
                    view = view[os.write(fd, view[:CHUNK]):]
                except BrokenPipeError:
                    view = view[:0]
                if not view:
                    sel.unregister(fd)
                    proc.stdin.close()
                continue
            data = os.read(fd, CHUNK)
            if not data:
                sel.unregister(fd)
                continue
            dropped += _keep(bufs[fd], data, cap)
    sel.close()
    if timed_out:
        proc.killpg(signal.SIGKILL)  # it leads its group: the command and what it started
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out, dropped


def _keep(buf: bytearray, data: bytes, cap: int) -> int:
    """Append what fits under the cap; return how many bytes were dropped."""
    room = max(cap - len(buf), 0)
    buf += data[:room]
    return len(data) - min(len(data), room)


def _drain(fd: int, buf: bytearray, cap: int) -> int:
    os.set_blocking(fd, False)
    dropped = 0
    while True:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return dropped
        if not data:
            return dropped
        dropped += _keep(buf, data, cap)


def ready(fds: list[int], timeout: float | None) -> list[int]:
    """The readable ones among `fds` (hang-ups count); poll, not select, which fails past descriptor 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return [fd for fd, _ in poller.poll(None if timeout is None else max(timeout, 0) * 1000)]


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to a blocking `fd`, however many writes that takes (a pipe or a pty may take part of one)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
