"""Moving bytes between two sockets in the kernel: splice(2) through a pipe, driven by the event loop.

Relayed data never enters Python: the proxy reads a socket into a pipe and the pipe into the other
socket. On a loopback download that is the difference between about 0.6x and 0.8x of a direct
download's speed. A full destination stops the reading side, so at most one pipe's worth per
direction is in flight.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import socket
from typing import Callable

F_SETPIPE_SZ = 1031
BIG_PIPE = 1 << 20
# Large pipes count against a per-user page budget (fs.pipe-user-pages-soft, 16384 pages by
# default); past it the user's new pipes shrink. A few dozen large ones leave most of it to others.
MAX_BIG_PIPES = 32
CHUNK = 1 << 20
_big_pipes = 0


class Pump:
    """One direction: `src` to `dst`; calls `counted(n)` per move and `done(error)` once at the end."""

    def __init__(self, src: socket.socket, dst: socket.socket, counted: Callable[[int], None],
                 done: Callable[[BaseException | None], None], big: bool = False) -> None:
        self.src, self.dst = src.fileno(), dst.fileno()
        self._dst_sock = dst
        self._counted, self._done = counted, done
        self._loop = asyncio.get_running_loop()
        self._pipe_r = self._pipe_w = -1  # made when the first bytes come: many requests send none
        self._want_big, self._big = big, False
        self._pending = 0
        self._finished = False
        self._loop.add_reader(self.src, self._readable)

    def _readable(self) -> None:
        if self._pipe_w < 0:
            self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._big = self._want_big and _grow(self._pipe_w)
        try:
            moved = os.splice(self.src, self._pipe_w, CHUNK, flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
        except BlockingIOError:
            return
        except OSError as exc:
            return self._finish(exc)
        if moved == 0:
            return self._finish(None)
        self._pending += moved
        self._counted(moved)
        self._flush()

    def _flush(self) -> None:
        while self._pending:
            try:
                moved = os.splice(self._pipe_r, self.dst, self._pending,
                                  flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                self._loop.remove_reader(self.src)
                self._loop.add_writer(self.dst, self._writable)
                return
            except OSError as exc:
                return self._finish(exc)
            self._pending -= moved

    def _writable(self) -> None:
        self._flush()
        if not self._pending and not self._finished:
            self._loop.remove_writer(self.dst)
            self._loop.add_reader(self.src, self._readable)

    def _finish(self, error: BaseException | None) -> None:
        self.close()
        if error is None:
            try:
                self._dst_sock.shutdown(socket.SHUT_WR)  # pass the end on, keep the other direction
            except OSError:
                pass
        self._done(error)

    def close(self) -> None:
        """Stop moving bytes and give the pipe back; safe to call twice."""
        global _big_pipes
        if self._finished:
            return
        self._finished = True
        self._loop.remove_reader(self.src)
        self._loop.remove_writer(self.dst)
        if self._pipe_w >= 0:
            os.close(self._pipe_r)
            os.close(self._pipe_w)
        if self._big:
            _big_pipes -= 1


def _grow(pipe_w: int) -> bool:
    global _big_pipes
    if _big_pipes >= MAX_BIG_PIPES:
        return False
    try:
        fcntl.fcntl(pipe_w, F_SETPIPE_SZ, BIG_PIPE)
    except OSError:  # past fs.pipe-max-size or the user's pipe budget: the default size works too
        return False
    _big_pipes += 1
    return True
