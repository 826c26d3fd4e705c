"""The live progress line on stderr: done/total, episodes running, accuracy so far, episodes per
minute, ETA. It shows from the first episode's start, not its end: a first episode can take minutes."""
from __future__ import annotations

import threading
import time
from typing import Any, TextIO


class Progress:
    """Redraws one line on a terminal; elsewhere (a log file, CI) prints a line at most every
    `every` seconds, or when another tenth of the episodes has finished."""

    def __init__(self, out: TextIO | None, total: int, already: int = 0, every: float = 30.0):
        self.out, self.total, self.every = out, total, every
        self.done = self.correct = self.failed = self.running = 0
        self.already = already
        self.note = ""
        """Shown at the end of the line (a cluster run puts its nodes there)."""
        self._lock = threading.Lock()  # episodes start and end in the runner's threads
        self.started = time.monotonic()
        self._last = 0.0
        self._tenth = 0  # the tenths of the run shown so far (not on a terminal)
        self._tty = bool(out is not None and getattr(out, "isatty", lambda: False)())

    def begin(self) -> None:
        """Count one episode starting; the first start shows the line at once, anywhere."""
        with self._lock:
            self.running += 1
            first = self._last == 0.0
        self.show(final=first, end="\n" if first and not self._tty else "")

    def end(self) -> None:
        """Count one episode leaving (finished, cancelled or crashed)."""
        with self._lock:
            self.running -= 1

    def add(self, record: dict[str, Any]) -> None:
        """Count one finished episode and show the line."""
        with self._lock:
            self.done += 1
            self.correct += bool(record.get("correct"))
            self.failed += record.get("finish_reason") == "error"
        self.show()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed * 60
        left = self.total - self.already - self.done
        eta = _clock(left / rate * 60) if rate and left else "-"
        accuracy = f"{100 * self.correct / self.done:5.1f}%" if self.done else "  -  "
        errors = f" | errors {self.failed}" if self.failed else ""
        finished = self.already + self.done
        filled = round(20 * finished / self.total) if self.total else 20
        return (f"{'#' * filled}{'.' * (20 - filled)} "
                f"[{finished:>{len(str(self.total))}}/{self.total}] running {self.running} | "
                f"acc {accuracy} | {rate:6.1f} ep/min | ETA {eta}{errors}"
                + (f" | {self.note}" if self.note else ""))

    def show(self, final: bool = False, end: str | None = None) -> None:
        """Redraw (terminal) or print (elsewhere, at most every `every` seconds unless `final`)."""
        if self.out is None:
            return
        now = time.monotonic()
        with self._lock:
            tenth = 10 * (self.already + self.done) // self.total if self.total else 10
            if not (final or self._tty or now - self._last >= self.every or tenth > self._tenth):
                return
            self._last, self._tenth = now, tenth
        if end is None:
            end = "\n" if final or not self._tty else ""
        print(("\r\x1b[K" if self._tty else "") + self.line(), end=end, file=self.out, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
