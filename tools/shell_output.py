"""The shell's output side: cleaning, a bounded head and tail, the log.

Kept apart from `shell.py`, which drives bash, and `shell_pty.py`, which reads the pty through
pexpect; this part only turns bytes into what the model reads.
"""
from __future__ import annotations

import codecs
import os
import re
import select
import subprocess
import time

from isolation.layout import TOOLS_DIR as WORK_DIR

_ESCAPES = {i: f"\\x{i:02x}" for i in (*range(0x20), 0x7F)}
_ESCAPES.update({0: None, ord("\\"): "\\\\", ord("'"): "\\'", ord("\n"): "\\n", ord("\t"): "\\t"})
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?"
                   r"|[ -/]*[0-~])")
_OVERSTRUCK = re.compile(r"[^\n\x08]\x08")  # man's bold and underline: "X\bX", "_\bX"
# `set -x` traces of our own input lines (a command's own traces start with "++")
OUR_TRACES = re.compile(rf"^\+ (?:\[\[ -d {WORK_DIR} \]\]|builtin (?:printf %s |source {WORK_DIR}/|printf '\\037))"
                         r".*\n?", re.M)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
PENDING_MAX = 1 << 16  # a line longer than this without a newline is let through as it is


def escape(text: str) -> str:
    """The body of a bash `$'...'` string; only printable characters reach the tty."""
    return text.translate(_ESCAPES)


def clean(text: str) -> str:
    """Complete lines as a terminal would show them: no escapes, controls or overwritten text."""
    text = text.replace("\r\n", "\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\x08" in text:
        text = _OVERSTRUCK.sub("", text)
    text = _CONTROL.sub("", text)
    if "\r" in text:
        text = "\n".join(_overlay(line) if "\r" in line else line for line in text.split("\n"))
    return text


def _overlay(line: str) -> str:
    """What a carriage-return redraw leaves on screen: each part overwrites the start."""
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part):]
    return shown


class Text:
    """Decodes pty bytes (invalid UTF-8 replaced) and cleans them a complete line at a time."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""

    def feed(self, data: bytes) -> str:
        text = self._pending + self._decoder.decode(data)
        cut = text.rfind("\n") + 1
        if not cut and len(text) < PENDING_MAX:
            self._pending = text
            return ""
        cut = cut or len(text)
        self._pending = text[cut:]
        return clean(text[:cut])

    def finish(self) -> str:
        text, self._pending = self._pending + self._decoder.decode(b"", final=True), ""
        return clean(text)


class Output:
    """Keeps the whole text up to `limit` characters, then only a head and a tail, and sends the
    whole text to a log file inside the sandbox."""

    def __init__(self, limit: int, sandbox, path: str, log_cap: int) -> None:
        self.limit = max(limit, 2)
        self._parts: list[str] = []
        self._size = self._lines = 0
        self._head: str | None = None
        self._tail = ""
        self._log = _Log(sandbox, path, log_cap)

    def add(self, text: str) -> None:
        if not text:
            return
        self._size += len(text)
        self._lines += text.count("\n")
        if self._head is None:
            self._parts.append(text)
            if self._size <= self.limit:
                return
            text, self._parts = "".join(self._parts), []
            self._head = text[: self.limit // 2]
        keep = self.limit - len(self._head)
        self._tail = (self._tail + text[-keep:])[-keep:]
        self._log.write(text)

    def render(self) -> tuple[str, bool]:
        """The text the model sees, and whether it was cut."""
        if self._head is None:
            return "".join(self._parts).rstrip("\n"), False
        head, tail = self._head, self._tail
        if (nl := head.rfind("\n")) > len(head) // 2:  # cut at line ends where it costs little
            head = head[: nl + 1]
        if 0 <= (nl := tail.find("\n")) < len(tail) // 2:
            tail = tail[nl + 1:]
        cut = self._size - len(head) - len(tail)
        lines = self._lines - head.count("\n") - tail.count("\n")
        note = (f"[... {cut:,} characters ({lines:,} lines) cut from the middle of {self._size:,} "
                f"characters ({self._lines:,} lines); {self._log.close()} ...]")
        return f"{head.rstrip(chr(10))}\n{note}\n{tail}".rstrip("\n"), True


WRITE_WAIT = 2.0  # seconds the log writer may keep us waiting, in all


def _writable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(max(timeout, 0) * 1000))


class _Log:
    """Streams text into a file inside the sandbox (a joined `cat`), up to `cap` bytes."""

    def __init__(self, sandbox, path: str, cap: int) -> None:
        self.sandbox, self.path, self.cap = sandbox, path, cap
        self._proc: subprocess.Popen | None = None
        self._written = 0
        self._error = ""

    def write(self, text: str) -> None:
        if self._error or self._written >= self.cap:
            return
        data = text.encode()[: self.cap - self._written]
        try:
            if self._proc is None:
                script = 'mkdir -p -- "${1%/*}" && exec cat > "$1"'
                self._proc = self.sandbox.popen([self.sandbox.shell, "-c", script, "sh", self.path], cwd="/",
                                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
                os.set_blocking(self._proc.stdin.fileno(), False)
            self._send(data)
            self._written += len(data)
        except (OSError, ValueError, RuntimeError) as exc:  # cat died (disk full, file size limit)
            self._error = str(exc) or type(exc).__name__

    def _send(self, data: bytes) -> None:
        """Into the writer's pipe, never blocking past WRITE_WAIT: the sandbox can stop the writer
        (SIGSTOP), and a command's timeout must still hold."""
        fd, view = self._proc.stdin.fileno(), memoryview(data)
        deadline = time.monotonic() + WRITE_WAIT
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                if time.monotonic() > deadline or not _writable(fd, deadline - time.monotonic()):
                    raise OSError("the log writer stopped reading") from None

    def close(self) -> str:
        """Finish the file; what the model should be told about it."""
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError as exc:
                self._error = self._error or str(exc)
            try:
                if self._proc.wait(WRITE_WAIT) != 0 and not self._error:
                    self._error = f"the writer exited with {self._proc.returncode}"
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._error = self._error or "the writer hung"
        if self._error:
            return f"the full output could not be saved ({self._error})"
        if self._written >= self.cap:
            return f"its first {self.cap:,} bytes are saved in {self.path}"
        return f"the full output is saved in {self.path}"
