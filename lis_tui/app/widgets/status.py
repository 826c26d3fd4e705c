"""The status line: model, rootfs, sandbox state, network badge, approvals, step, tokens, time; and
under it what the running step does (and for how long), or where the run is kept."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from tools.terminal_text import safe_terminal_text

NETWORK_BADGES = {"off": ("NET OFF", "bold"), "ask": ("NET ASK", "bold black on yellow"),
                  "on": ("NET ON", "bold white on red")}


@dataclass(frozen=True)
class Status:
    """What the status line shows."""

    model: str = "?"
    rootfs: str = "host"
    sandbox: str = "idle"
    network: str = "off"
    asking: bool = False
    """A network approval is waiting for the person: the badge says so."""
    approvals: bool = False
    step: int = 0
    max_steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = False
    """The server reported no usage: the counts are ours (shown with a ~)."""
    session: str = "-"
    doing: str = ""
    """What the running step does now (`execute_bash ls`, `waiting for the model`); "" between."""
    run_dir: str = ""
    """Where this session's run is kept (trajectory.json, answer.txt, files/); "" before it is."""
    elapsed: float = 0.0
    """Seconds the task took so far: a replay's recorded time, where no clock runs."""


class StatusBar(Static):
    """Two lines at the top; the clocks (the task's, the step's) run while a task does."""

    def __init__(self, status: Status, **kwargs) -> None:
        super().__init__(**kwargs)
        self.status = status
        self._started: float | None = None
        self._elapsed = status.elapsed
        self._doing_since = time.monotonic()

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)
        self._draw()

    def on_resize(self) -> None:
        self._draw()  # the second line is cut to the width

    def change(self, **fields) -> None:
        """Update some fields and redraw."""
        if "doing" in fields and fields["doing"] != self.status.doing:
            self._doing_since = time.monotonic()
        self.status = replace(self.status, **fields)
        self._draw()

    def start_clock(self) -> None:
        self._started = time.monotonic() - self._elapsed

    def stop_clock(self) -> None:
        self._tick()
        self._started = None

    def _tick(self) -> None:
        if self._started is not None:
            self._elapsed = time.monotonic() - self._started
            self._draw()

    def _draw(self) -> None:
        width = self.content_size.width or 200
        since = time.monotonic() - self._doing_since
        self.update(status_text(self.status, self._elapsed, since, width))


def status_text(s: Status, elapsed: float, doing_for: float = 0.0, width: int = 200) -> Text:
    """The lines themselves (a function, so it is easy to read and to test)."""
    badge, style = NETWORK_BADGES.get(s.network, (s.network.upper(), "bold"))
    if s.asking:
        badge, style = "NET ASK ?", "bold black on yellow"
    minutes, seconds = divmod(int(elapsed), 60)
    step = f"step {s.step}/{s.max_steps}" if s.max_steps else f"step {s.step}"
    # The model's name comes from its server's list, the rest of a replay from a saved file.
    model, rootfs = safe_terminal_text(s.model or "?"), safe_terminal_text(s.rootfs)
    tokens = f"tok {'~' if s.tokens_estimated else ''}{s.tokens_in:,}↑ {s.tokens_out:,}↓"
    # Approvals show only when on (F3 is in the footer): the line fits 80 columns.
    approvals = [" ", (" APPROVE ON ", "bold reverse")] if s.approvals else []
    rest = Text.assemble(
        f" · {rootfs} · ", (s.sandbox, "bold red" if s.sandbox == "failed" else ""),
        " ", (f" {badge} ", style), *approvals,
        f" · {step} · {tokens} · {minutes:02d}:{seconds:02d}")
    # One line at any width: a long model name gives way first, then the end of the line.
    room = max(width, 10) - rest.cell_len
    if len(model) > room:
        model = model[:max(room - 1, 8)] + "…"
    line = Text.assemble((model, "bold"), rest)
    line.truncate(max(width, 10), overflow="ellipsis")
    second = _second_line(s, doing_for)
    if second.plain:
        second.truncate(max(width, 10), overflow="ellipsis")
        line.append("\n").append_text(second)
    return line


def _second_line(s: Status, doing_for: float) -> Text:
    """The running step (the model's words, made safe and kept to one line), else the run's place."""
    if s.doing:
        doing = " ".join(safe_terminal_text(s.doing).split())
        return Text.assemble(("▶ ", "bold"), doing, (f"  {doing_for:.0f}s", "bold"))
    where = s.run_dir or (s.session if s.session != "-" else "")
    if where:
        return Text.assemble("run ", safe_terminal_text(short_path(where)), style="dim")
    return Text()


def short_path(path: str | Path, here: bool = False) -> str:
    """`~/…` for paths in the home directory: the part a person needs, in less room; with `here`,
    one in the current folder relative to it (`src`, `.`), as the person typed it."""
    if here:
        try:
            cwd = os.getcwd()
        except OSError:  # the current folder is gone
            cwd = ""
        if cwd and (str(path) == cwd or str(path).startswith(cwd.rstrip("/") + "/")):
            return os.path.relpath(path, cwd)
    path, home = str(path), str(Path.home())
    return "~" + path[len(home):] if home != "/" and path.startswith(home + "/") else path
