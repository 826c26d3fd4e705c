"""The rootfs the setup screen offers to build: Ubuntu 24.04 with the paper preset, so the model has
apt, a full Python and the paper's packages. It is named `ubuntu-paper`, apart from the minimal
`ubuntu` the README's `lis-tui rootfs build ubuntu` makes, so that one does not hide the offer. No textual here: the app runs `RootfsJob.run` in a
worker and shows its state; tests hand it a quick build of their own.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

Progress = Callable[[str], None]
RECOMMENDED = "ubuntu-paper"


def build_recommended(progress: Progress, stop: threading.Event) -> str:
    """`lis-tui rootfs build ubuntu-paper --preset paper` in a process of its own, made the default;
    returns its name. Setting `stop` interrupts it (SIGINT: the build keeps nothing half-made)."""
    from isolation.rootfs import RootfsStore  # noqa: PLC0415

    argv = [sys.executable, "-m", "lis_tui.cli", "rootfs", "build", RECOMMENDED, "--preset", "paper"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)  # the app's own signals are not the build's
    threading.Thread(target=_interrupt_when, args=(stop, proc), daemon=True).start()
    last, error = "", ""
    for line in proc.stderr:
        if line.strip():
            last = line.strip()
            # The CLI's own error (with the fix) comes first; mmdebstrap's log tail follows it.
            if last.startswith("lis-tui rootfs:") and not error:
                error = last.removeprefix("lis-tui rootfs:").strip().removeprefix("error:").strip()
            progress(last)
    if proc.wait() != 0:
        raise RuntimeError(error or last or f"the build ended with exit code {proc.returncode}")
    RootfsStore().set_default(RECOMMENDED)
    return RECOMMENDED


def _interrupt_when(stop: threading.Event, proc: subprocess.Popen) -> None:
    while proc.poll() is None:
        if stop.wait(0.5):
            proc.send_signal(signal.SIGINT)
            return


def recommended_exists() -> bool:
    """The recommended rootfs is in the store already (nothing to offer): by its name, or one
    built with the paper preset under another (`rootfs build ubuntu --preset paper`)."""
    try:
        from isolation.rootfs import RootfsStore  # noqa: PLC0415

        return any(r.name == RECOMMENDED or (r.meta.get("build") or {}).get("preset") == "paper"
                   for r in RootfsStore().list())
    except Exception:  # no store yet, or an unreadable one: offer it
        return False


@dataclass(frozen=True)
class RootfsOffer:
    """What is offered, what it costs, and how to build it."""

    name: str = RECOMMENDED
    about: str = ("Ubuntu 24.04 with the paper's packages (numpy, scipy, sympy, matplotlib, "
                  "build tools) and apt, so the model can install what a task needs")
    size: str = "about 900 MB on disk"  # 896 MiB measured (issue 27)
    time: str = "5 to 15 minutes, most of it downloading"
    command: str = f"lis-tui rootfs build {RECOMMENDED} --preset paper"
    build: Callable[[Progress, threading.Event], str] = build_recommended
    """Builds it, calling progress(line) as it goes and stopping soon once the event is set;
    returns the rootfs name to use."""
    exists: Callable[[], bool] = recommended_exists


@dataclass
class RootfsJob:
    """One build of the offer: its state, the lines it printed, and how it ended."""

    offer: RootfsOffer = field(default_factory=RootfsOffer)
    state: str = "offered"
    """offered (not started, or skipped), building, built, failed."""
    lines: int = 0
    last_line: str = ""
    error: str = ""
    built: str = ""
    """The name of the rootfs built."""
    stop: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set to interrupt the build (quitting the app does)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wanted(self) -> bool:
        """Worth showing: building or built in this session (to say so), else not in the store."""
        if self.state in ("building", "built"):
            return True
        return not self.offer.exists()

    def claim(self) -> bool:
        """Mark the job as building; False when it already is (one build at a time)."""
        with self._lock:
            if self.state == "building":
                return False
            self.state, self.lines, self.last_line, self.error = "building", 0, "", ""
            self.stop.clear()
            return True

    def run(self, on_line: Callable[[], Any] = lambda: None) -> None:
        """Build (in a worker thread, after `claim`); `on_line` is called after each line."""
        def progress(line: str) -> None:
            self.lines += 1
            self.last_line = line
            on_line()

        try:
            self.built = self.offer.build(progress, self.stop)
            self.state = "built"
        except Exception as exc:  # a failed or interrupted build is a state the screen shows
            self.error = str(exc) or type(exc).__name__
            self.state = "failed"
