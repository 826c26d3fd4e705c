"""The status line: model, rootfs, sandbox state, network badge, approvals, step, tokens, time."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

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


class StatusBar(Static):
    """One or two lines at the top; the clock runs while a task does."""

    def __init__(self, status: Status, **kwargs) -> None:
        super().__init__(**kwargs)
        self.status = status
        self._started: float | None = None
        self._elapsed = 0.0

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)
        self._draw()

    def change(self, **fields) -> None:
        """Update some fields and redraw."""
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
        self.update(status_text(self.status, self._elapsed))


def status_text(s: Status, elapsed: float) -> Text:
    """The line itself (a function, so it is easy to read and to test)."""
    badge, style = NETWORK_BADGES.get(s.network, (s.network.upper(), "bold"))
    if s.asking:
        badge, style = "NET ASK ?", "bold black on yellow"
    minutes, seconds = divmod(int(elapsed), 60)
    step = f"step {s.step}/{s.max_steps}" if s.max_steps else f"step {s.step}"
    # The model's name comes from its server's list, the rest of a replay from a saved file.
    model, rootfs = safe_terminal_text(s.model or "?"), safe_terminal_text(s.rootfs)
    parts: list[tuple[str, str] | str] = [
        (model, "bold"), f" · {rootfs} · sandbox {s.sandbox} ", (f" {badge} ", style),
        " ", (" APPROVE ON " if s.approvals else " approve off ",
              "bold reverse" if s.approvals else ""),
        f" · {step} · tok {'~' if s.tokens_estimated else ''}{s.tokens_in:,}↑ {s.tokens_out:,}↓ · {minutes:02d}:{seconds:02d}"
        f" · {safe_terminal_text(s.session)}",
    ]
    return Text.assemble(*parts)
