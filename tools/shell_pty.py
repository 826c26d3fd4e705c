"""The persistent shell's pty, read through pexpect: every byte bash prints comes in here.

bash is started by `Sandbox.spawn_pty` (the sandbox's zygote: no fork of this whole process, which
is what `pexpect.spawn` costs), and the pty's master fd is handed to `pexpect.fdpexpect.fdspawn`,
whose `expect_exact` finds our sentinels. `Pty` subclasses it for what `fdspawn` cannot do alone:

- Bounded memory. Until a pattern matches, `expect` keeps everything it read (`before`), so a
  100 MB flood would sit in memory whole. Past `SPILL` bytes, all but the last `KEEP` go to
  `spill` (the command's bounded output); a sentinel is far shorter than `KEEP`, so none is lost.
- Output as it comes. `flush(pattern)` hands what is held to `spill` now, between waits, all but
  an end that could be the start of `pattern`: the shell calls it a few times a second while a
  command runs and someone watches.
- Output between commands. What came after the last sentinel (background jobs) is taken with
  `take_pending()`, so the drain thread's later reads (plain `read_nonblocking`) follow it in
  order. There is no other reader of the pty.
The rest (non-UTF-8 bytes, timeouts, interrupts) needs nothing here: we read bytes
(`encoding=None`) and decode them ourselves; waits are `expect_exact(..., timeout=)` slices.
"""
from __future__ import annotations

from collections.abc import Callable

from pexpect import EOF, TIMEOUT
from pexpect.fdpexpect import fdspawn

SPILL = 1 << 20  # bytes `expect` may hold before the older part is handed on
KEEP = 1 << 16  # bytes it always keeps: more than any sentinel, cwd included
MAXREAD = 1 << 16


class Pty(fdspawn):
    """`fdspawn` on a pty master that never holds more than about `SPILL` bytes."""

    def __init__(self, fd: int) -> None:
        # poll, not select: a process with many sandboxes has descriptors past 1024
        super().__init__(fd, timeout=None, maxread=MAXREAD, use_poll=True)
        # pexpect sleeps 50 ms before each send and 0.1 ms after each read by default
        self.delaybeforesend = self.delayafterread = None
        self.spill: Callable[[bytes], None] | None = None

    def read_nonblocking(self, size: int = 1, timeout: float | None = -1) -> bytes:
        if self.spill is not None and self._before.tell() > SPILL:
            self._keep(KEEP)
        return super().read_nonblocking(size, timeout)

    def flush(self, pattern: bytes) -> None:
        """Between waits for `pattern`: hand all that is held to `spill` but an end that may be the
        start of `pattern`, the rest of which has not come yet."""
        held = self._before.getvalue()
        if self.spill is None or not held:
            return
        keep = next((k for k in range(min(len(pattern) - 1, len(held)), 0, -1)
                     if held.endswith(pattern[:k])), 0)
        self._keep(keep)
        # pexpect searches its own copy of the held end next (`_buffer`): the same bytes
        self._buffer = self.buffer_type()
        self._buffer.write(self._before.getvalue())

    def _keep(self, keep: int) -> None:
        """`spill` all that is held but the last `keep` bytes."""
        held = self._before.getvalue()
        self._before = self.buffer_type()
        self._before.write(held[len(held) - keep:])
        self.spill(held[:len(held) - keep])

    def take_pending(self) -> bytes:
        """What was read and not yet matched; pexpect's buffers are emptied."""
        held = self._before.getvalue()
        self._before, self._buffer = self.buffer_type(), self.buffer_type()
        return held

    def wait_for(self, pattern: bytes, timeout: float) -> bytes | None:
        """Output before `pattern` once it came (the pattern is consumed); None after `timeout`.
        Raises EOF, with what was read in `before`, once nothing holds the pty any more."""
        if self.expect_exact([pattern, TIMEOUT], timeout=max(timeout, 0)) == 0:
            return self.before
        return None

    def read_now(self) -> bytes:
        """What can be read without waiting (pending bytes first); b"" when nothing."""
        parts = [self.take_pending()]
        while True:
            try:
                parts.append(self.read_nonblocking(MAXREAD, 0))
            except (TIMEOUT, EOF, OSError):
                return b"".join(parts)


__all__ = ["EOF", "TIMEOUT", "Pty"]
