"""`lis-tui run`'s live line on a terminal: what the running step does (the model call, or the tool
and its command) and for how long, redrawn every second and erased before each log line."""
from __future__ import annotations

import os
import shutil
import threading
import time
from typing import TextIO

from tools.terminal_text import safe_terminal_text

ERASE = "\r\x1b[K"


def running_text(name: str, args: dict) -> str:
    """`execute_bash python3 x.py`, `str_replace_editor create /testbed/a.py`: the tool at work
    (the model's words: make it safe before a terminal shows it)."""
    if name == "execute_bash":
        return f"{name} {' '.join(str(args.get('command', '')).split())}"
    if name == "str_replace_editor":
        return f"{name} {args.get('command', '?')} {args.get('path', '?')}"
    return name


def detach_from_terminal() -> None:
    """Standard input, output and error onto /dev/null, once the terminal they were is gone (SIGHUP):
    a write to a hung-up terminal fails, and what is left to say has no one to read it."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class LiveLine:
    """One status line at the bottom of a terminal; does nothing when `out` is not one."""

    def __init__(self, out: TextIO, interval: float = 1.0) -> None:
        self.out, self.interval = out, interval
        self.enabled = bool(getattr(out, "isatty", lambda: False)())
        self._what: str | None = None
        self._since = 0.0
        self._lock = threading.Lock()  # the agent's thread and the ticker both write
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def show(self, what: str) -> None:
        """Say what runs now; the clock starts."""
        if not self.enabled:
            return
        with self._lock:
            self._what, self._since = what, time.monotonic()
            self._draw()
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True, name="lis-live-line")
            self._ticker.start()

    def print(self, line: str) -> None:
        """A log line above the live one (already made safe by the caller)."""
        with self._lock:
            if self.enabled and self._what is not None:
                self.out.write(ERASE)
            print(line, file=self.out, flush=True)
            if self.enabled and self._what is not None:
                self._draw()

    def clear(self) -> None:
        """Nothing runs: erase the line."""
        with self._lock:
            if self.enabled and self._what is not None:
                self.out.write(ERASE)
                self.out.flush()
            self._what = None

    def close(self) -> None:
        self._stop.set()
        self.clear()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._what is not None:
                    self._draw()

    def _draw(self) -> None:
        # Commands are the model's words: made safe, and cut to the width so the line never wraps
        # (a wrapped line cannot be redrawn in place).
        clock = f"  {time.monotonic() - self._since:.0f}s"
        room = max(self._width() - len(clock), 10)
        text = safe_terminal_text(self._what or "")
        if len(text) > room:
            text = text[:room - 3] + "..."
        self.out.write(ERASE + text + clock)
        self.out.flush()

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 0
        return (columns or shutil.get_terminal_size().columns) - 1  # a new pty says 0 columns
