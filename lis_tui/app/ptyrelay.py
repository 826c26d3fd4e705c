"""Relay the user's terminal to a sandboxed program on a pty of ours, as ssh does.

The sandbox never gets the user's terminal: it could push input into it (TIOCSTI) or take over
its settings and foreground group. Instead our terminal goes raw, keystrokes (Ctrl-C and Ctrl-Z
included) are written to the pty, whose line discipline signals the sandbox's foreground job,
window size changes are passed on, and the program's exit status comes back. What the program
prints reaches our terminal without the escape strings that set its state (the clipboard, the
title, ...: see ptyfilter), nor those that wipe the user's screen, and the terminal's modes are
given back as the program found them when it ends (see ptymodes).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import termios
import tty

from isolation.output import write_all
from lis_tui.app.ptyfilter import EscapeStringFilter
from lis_tui.app.ptymodes import ScreenGuard

CHUNK = 1 << 16


def relay(child, stdin_fd: int = 0, output_fd: int = 1, forward_input: bool = True) -> int:
    """Copy between our terminal (or pipes) and `child`'s pty until it exits; its exit status.
    `forward_input` False: the child reads our stdin itself, the relay leaves it alone."""
    interactive = forward_input and os.isatty(stdin_fd)
    size_fd = stdin_fd if os.isatty(stdin_fd) else output_fd  # the terminal whose size the pty takes
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    screen = ScreenGuard()
    with contextlib.ExitStack() as undo:
        undo.callback(os.close, wake_r)
        undo.callback(os.close, wake_w)
        if interactive:
            saved = termios.tcgetattr(stdin_fd)
            undo.callback(termios.tcsetattr, stdin_fd, termios.TCSAFLUSH, saved)
            tty.setraw(stdin_fd)
        if os.isatty(size_fd):
            _copy_size(size_fd, child.fd)
            previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_w, b"w"))
            undo.callback(signal.signal, signal.SIGWINCH, previous)
        if os.isatty(output_fd):  # however the relay ends: the program may have died mid-screen
            undo.callback(lambda: write_all(output_fd, screen.restore()))
        _pump(child, stdin_fd if forward_input else -1, output_fd, size_fd, wake_r, interactive, screen)
    child.close()
    return child.exit_code or 0


def _pump(child, stdin_fd: int, output_fd: int, size_fd: int, wake_r: int, interactive: bool,
          screen: ScreenGuard) -> None:
    """Until the program exits: our input to the pty (held back while it is full, so its output
    still flows), its output to us."""
    os.set_blocking(child.fd, False)
    pending = b""
    reading = stdin_fd >= 0
    exit_fd = child.proc.exit_fd
    strings = EscapeStringFilter()

    def shown(data: bytes) -> bytes:
        return screen.feed(strings.feed(data))

    while True:
        poller = select.poll()
        poller.register(child.fd, select.POLLIN | (select.POLLOUT if pending else 0))
        poller.register(wake_r, select.POLLIN)
        poller.register(exit_fd, select.POLLIN)
        if reading and not pending:
            poller.register(stdin_fd, select.POLLIN)
        for fd, events in poller.poll():
            if fd == wake_r:
                _drain(wake_r)
                _copy_size(size_fd, child.fd)
            elif fd == exit_fd:  # the program is gone: what it printed last, then stop
                while data := _read(child.fd):
                    write_all(output_fd, shown(data))
                write_all(output_fd, screen.feed(strings.flush()))
                return
            elif fd == stdin_fd:
                pending = _read(stdin_fd)
                if not pending:  # our input ended: end the program's too, as Ctrl-D would
                    reading = False
                    pending = b"" if interactive else b"\x04"
            elif events & select.POLLOUT:
                pending = pending[_write_some(child.fd, pending):]
            if fd == child.fd and events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                data = _read(child.fd)
                if data:
                    write_all(output_fd, shown(data))


def _copy_size(from_fd: int, to_fd: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(from_fd, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(to_fd, termios.TIOCSWINSZ, size)  # the kernel tells the foreground job (SIGWINCH)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except (BlockingIOError, InterruptedError):
        return b""
    except OSError as exc:
        if exc.errno == errno.EIO:  # nothing holds the pty's other side any more
            return b""
        raise


def _write_some(fd: int, data: bytes) -> int:
    try:
        return os.write(fd, data)
    except (BlockingIOError, InterruptedError):
        return 0


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 64):
            pass
