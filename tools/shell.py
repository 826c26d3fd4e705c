"""A persistent bash inside a sandbox, driven over a pty: one command at a time, state kept.

How a command travels (see DESIGN.md, "The persistent shell"): it is written into a small file
with `builtin printf` of a `$'...'` string (no process starts per call), sourced with stdin
from /dev/null, and followed on the same input line by a sentinel that prints `$?` and `$PWD`
after a per-call random nonce. Sourcing a file keeps heredocs and multi-line input intact and
turns an unfinished quote into a syntax error instead of a `PS2` wait. The pty is read through
pexpect (`tools.shell_pty`), which finds the sentinel; output is cleaned line by line, and only a
bounded head and tail stay in memory; when it is cut, the whole of it streams into a log file
inside the sandbox. A timeout or `interrupt()` signals the pty's foreground process group
(SIGINT, then SIGKILL) and, once bash has the terminal back, sends a fresh sentinel, so nothing
we type reaches a program still running (a full-screen one would take it as keys); bash is
replaced only when nothing else works. With an `on_output` callback, whoever watches (the app)
gets the cleaned output a few times a second while a command runs: the same lines the model
gets, as they come; without one, nothing of that is done. Between commands a thread keeps
reading what background jobs print, as a terminal would, and the next command's output starts
with it. bash's job-control notices (`[1]+  Done  sleep 1`) are dropped: it prints them in the
middle of the command that happened to be running, and only turning job control off (which
Ctrl-C needs) would keep bash from printing them.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from isolation.output import ready
from isolation.spec import places_of
from tools import ToolResult
from tools.limit_notes import limit_note
from tools.shell_output import OUR_TRACES, WORK_DIR, Output, Text, clean, escape
from tools.shell_pty import EOF, TIMEOUT, Pty

BASH = ["bash", "--norc", "--noprofile", "--noediting"]  # no readline: no echo, no bracketed paste
SHELL_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "SYSTEMD_PAGER": "cat",
    "DEBIAN_FRONTEND": "noninteractive", "TERM": "dumb", "NO_COLOR": "1",
    # git asks for credentials on /dev/tty, and an editor could only hang here
    "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true",
}
# History expansion would rewrite `!` in our input lines; history and mail checks are noise.
# The EXIT trap saves the cwd, so that a shell ended by `exit` is replaced in the same place.
INIT = ("\\builtin set +H +o history; unset HISTFILE MAILCHECK TMOUT PROMPT_COMMAND; PS1= PS2= PS0=; "
        f"[[ -d {WORK_DIR} ]] || \\command mkdir -p {WORK_DIR}; "
        "trap '\\builtin printf %s \"$PWD\" > {cwd_file}' EXIT")
# The saved cwd wins over the last one a sentinel reported; the file is emptied once read.
GO_BACK = ("\\builtin cd -- {cwd_q} 2>/dev/null; [[ -s {cwd_file} ]] && IFS= \\builtin read -r -d '' "
           "__lis_cwd < {cwd_file}; \\builtin cd -- \"${{__lis_cwd:-.}}\" 2>/dev/null; : > {cwd_file}; "
           "unset __lis_cwd")
LINE_MAX = 3800  # a canonical-mode tty drops what passes 4095 bytes on one line
CHUNK = 900  # characters per printf line: at most 4 bytes each once escaped
# What a timeout or interrupt sends to the foreground job, a grace period apart. The second
# SIGINT matters when a killed command was followed by more commands on its line.
STOP_SIGNALS = (signal.SIGINT, signal.SIGKILL, signal.SIGINT, signal.SIGKILL)
FORGET = "variables, functions and aliases are reset; files and background processes are kept"
# bash's own notice of a job's end or stop: "[1]+  Done                    sleep 1"
# (`jobs` prints the same lines: the model sees its running jobs, but no longer its ended ones)
JOB_NOTICE = re.compile(r"^\[\d+\][-+ ]  (?!Running )[A-Z][\w ()]*? {2,}\S.*\n?", re.M)


# ---- the shell ------------------------------------------------------------------------------

POLL = 0.1  # how often a running command looks for interrupt() and bash's exit
STOPPING_POLL = 0.02  # how often a stopped command is checked for having given the terminal back
GIT_READ_ONLY = re.compile(r"\.git\b[^\n]*: Read-only file system")
GIT_NOTE = ("[The project's .git is read-only in this sandbox, so git cannot commit or change the repository here "
            "(status, diff and log work). Leave committing to the user, who can allow it with "
            "[workspace] git_writable = true in lis-tui's config.]")
BETWEEN_MAX = 1 << 20  # background output kept between commands; past it, background jobs wait
LIVE_EVERY = 0.25  # seconds between two reports to on_output: at most four a second
LIVE_MAX = 1 << 16  # characters of output kept for the next report; a flood keeps its end


class _Drainer:
    """Reads what background jobs print while no command runs, as a terminal would, so that a
    full pty does not stop them. It reads only while holding the shell's lock, and it owns a
    duplicate of the pty fd, which it closes itself once stopped."""

    def __init__(self, pty: Pty, lock: threading.Lock, keep: Callable[[bytes], bool]) -> None:
        self._pty, self._fd, self._lock, self._keep = pty, os.dup(pty.child_fd), lock, keep
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self.room = threading.Event()  # set when the kept output has been taken
        threading.Thread(target=self._loop, name="lis-shell-drain", daemon=True).start()

    def stop(self) -> None:
        try:
            os.write(self._stop_w, b"x")
        except BrokenPipeError:  # the loop already ended: bash's pty closed (bash or the sandbox died)
            pass
        os.close(self._stop_w)
        self.room.set()

    def _loop(self) -> None:
        try:
            while not _wait_readable(self._stop_r, 0):
                if not ready([self._fd, self._stop_r], None):
                    continue
                with self._lock:  # held by run() for a whole command: no reading then
                    if _wait_readable(self._stop_r, 0) or not _wait_readable(self._fd, 0):
                        continue
                    try:
                        data = self._pty.read_nonblocking(1 << 16, 0)
                    except TIMEOUT:
                        continue
                    except (EOF, OSError):
                        return
                    self.room.clear()
                    full = not self._keep(data)
                if full:
                    self.room.wait()
        finally:
            os.close(self._fd)
            os.close(self._stop_r)


class ShellError(RuntimeError):
    """The shell could not start, or is closed; the message says why."""


@dataclass
class _Call:
    """One command while it runs."""

    nonce: str
    deadline: float
    output: Output
    started: float = field(default_factory=time.monotonic)
    awaiting: str | None = "r"  # tag of the last sentinel sent: once it is back, bash is idle again
    in_sentinel: bool = False  # its head came, its tail (tag, code, cwd) not yet
    completed: bool = False  # the command's own sentinel ("r") came back
    exit_code: int | None = None
    reason: str | None = None  # "timeout" or "interrupted", once stopping began
    stopped_at: float | None = None
    step: int = 0
    signals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.mark = b"\x1f" + self.nonce.encode() + b"-"
        self.text = Text()
        self.next_at = self.deadline
        self.tidy: Callable[[str], str] = str
        self.live: list[str] | None = None  # cleaned text not yet reported, when someone watches
        self.live_size = self.live_skipped = 0  # its characters; lines dropped from its start
        self.report_at = self.started + LIVE_EVERY

    def add(self, data: bytes) -> None:
        """Output bytes, in order; complete lines are cleaned and kept (bounded)."""
        text = self.tidy(self.text.feed(data))
        self.output.add(text)
        if self.live is not None and text:
            self.live.append(text)
            self.live_size += len(text)
            if self.live_size > LIVE_MAX:
                held = "".join(self.live)
                cut = held.find("\n", len(held) - LIVE_MAX // 2) + 1 or len(held) - LIVE_MAX // 2
                self.live_skipped += held.count("\n", 0, cut)
                self.live[:], self.live_size = [held[cut:]], len(held) - cut


class Shell:
    """A persistent bash in `sandbox`; `run` one command at a time (a second caller waits).
    `kill_grace`: seconds between SIGINT and SIGKILL; short, so that a timeout ends even a
    program that takes Ctrl-C as a key (less, vi) within timeout + 1 s. `separate_stderr`: the
    command's stderr goes to a file of its own, read back after it (`ToolResult.stderr`), for
    observations that show the two apart (the paper's); off, they arrive interleaved, as on a
    terminal. `cwd`: where it starts; None, where the model works (`spec.places.working`)."""

    def __init__(self, sandbox, timeout: float = 120.0, max_output: int = 16000, *,
                 cwd: str | None = None, env: dict[str, str] | None = None, kill_grace: float = 0.5,
                 log_cap: int = 100 << 20, start_timeout: float = 30.0,
                 separate_stderr: bool = False,
                 on_output: Callable[[str, float, int], None] | None = None) -> None:
        self.sandbox = sandbox
        self.on_output = on_output
        """Called in the caller's thread while a command runs, at most every LIVE_EVERY s and only
        when lines came, with (new output, seconds so far, lines of it left out): complete lines
        cleaned as the result's are; of a flood, only its last LIVE_MAX / 2 characters or so."""
        self.separate_stderr = separate_stderr
        self.timeout = timeout
        self.max_output = max_output
        self.kill_grace = kill_grace
        self.log_cap = log_cap
        self.start_timeout = start_timeout
        self._env = {**SHELL_ENV, **(env or {})}
        # the last cwd, shell-quoted (bash's printf %q); first where the model works (/testbed, or
        # a workspace's own path, where its venv and build files' absolute paths hold)
        self._cwd_q = shlex.quote(cwd or places_of(getattr(sandbox, "spec", None)).working)
        self._lock = threading.Lock()
        self._interrupt = threading.Event()
        tag = os.urandom(4).hex()  # two shells in one sandbox must not share files
        self._file, self._stdin_file = f"{WORK_DIR}/cmd-{tag}.sh", f"{WORK_DIR}/stdin-{tag}"
        self._cwd_file = f"{WORK_DIR}/cwd-{tag}"
        self._err_file = f"{WORK_DIR}/err-{tag}"
        self._calls = 0
        self._leftover = b""  # what came after the last sentinel: background output, job notices
        self._child = None
        self._pty: Pty | None = None
        self._drainer: _Drainer | None = None
        self._closed = False
        self._start()

    # ---- public -----------------------------------------------------------------------------

    def run(self, command: str, timeout: float | None = None, stdin: str | None = None) -> ToolResult:
        """Run `command` as bash would a script; it reads `stdin` if given, else /dev/null."""
        with self._lock:
            if self._closed:
                raise ShellError("the shell is closed")
            if self._child is None:  # a fresh shell failed to start last time; try again
                self._start()
            self._interrupt.clear()
            self._calls += 1
            limit = timeout if timeout and timeout > 0 else self.timeout
            call = self._call(limit, f"{WORK_DIR}/out-{self._calls}.log")
            if self.on_output is not None:
                call.live = []
            self._quiet_tty()
            try:
                self._send(self._script(command, stdin, call.nonce))
            except OSError:  # bash died while idle (killed from outside)
                return self._result(call, "exited", limit, sent=False)
            return self._result(call, self._pump(call), limit)

    def interrupt(self) -> None:
        """Stop the running command as Ctrl-C would; safe from any thread, no-op when idle."""
        self._interrupt.set()

    def export(self, env: dict[str, str]) -> ToolResult:
        """Set variables in the running bash, e.g. the proxy settings after the network is turned on."""
        return self.run("export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items()))

    def restart(self) -> None:
        """End this bash and start a fresh one in the last working directory."""
        self.interrupt()
        with self._lock:
            self._end(graceful=True)
            self._start()

    def close(self) -> None:
        """End the shell; background processes live on until the sandbox closes."""
        self.interrupt()
        with self._lock:
            self._closed = True
            self._end(graceful=True)

    def __enter__(self) -> Shell:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- starting and ending bash --------------------------------------------------------

    def _start(self) -> None:
        # Started in /, then `cd`: a deleted working directory must not stop every later start.
        self._child = child = self.sandbox.spawn_pty(BASH, cwd="/", env_extra=self._env)
        self._fd, self._pty = child.fd, Pty(child.fd)
        self._quiet_tty()
        self._leftover = b""
        call = self._call(self.start_timeout, f"{WORK_DIR}/start.log")
        # A second line, so that `set +H` is in force before a cwd with `!` in it is read.
        go_back = GO_BACK.format(cwd_q=self._cwd_q, cwd_file=self._cwd_file)
        self._send(f"{INIT.format(cwd_file=self._cwd_file)}\n{go_back}; {_sentinel(call.nonce, 'r')}\n")
        if self._pump(call, stoppable=False) != "done":
            said = call.output.render()[0].strip() or call.text.finish().strip()
            self._end(graceful=False)
            raise ShellError(f"bash did not start in the sandbox: {said or 'it printed nothing'}")
        # Idle, bash is the terminal's foreground group; a running command's group never is.
        self._shell_pgrp = _foreground(self._fd)
        self._drainer = _Drainer(self._pty, self._lock, self._keep_between)

    def _end(self, graceful: bool) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if self._drainer is not None:
            self._drainer.stop()
            self._drainer = None
        if graceful and child.isalive():
            try:  # a plain `exit` leaves background jobs alone; twice, in case jobs are stopped
                self._send("\\builtin exit 0\n\\builtin exit 0\n")
            except OSError:
                pass
            _wait_exit(child, 2.0)
        if child.isalive():
            self._cwd_q = _cwd_of(self._shell_pgrp) or self._cwd_q  # no EXIT trap runs on SIGKILL
            # SIGKILL rather than the hangup of a closing pty, on which bash would SIGHUP its jobs
            for pgrp in {_foreground(self._fd), self._shell_pgrp}:
                _killpg(pgrp, signal.SIGKILL)
        child.close()  # closes the fd the Pty reads; the Pty itself is dropped
        self._pty = None

    # ---- one command -------------------------------------------------------------------------

    def _call(self, limit: float, log_path: str) -> _Call:
        output = Output(self.max_output, self.sandbox, log_path, self.log_cap)
        return _Call(os.urandom(8).hex(), time.monotonic() + limit, output)

    def _script(self, command: str, stdin: str | None, nonce: str) -> str:
        """Input lines that write the command file, source it and print the sentinel."""
        parts = [f"[[ -d {WORK_DIR} ]] || \\command mkdir -p {WORK_DIR}", *_writes(command, self._file)]
        source = "/dev/null"
        if stdin is not None:
            parts += _writes(stdin, self._stdin_file)
            source = self._stdin_file
        # Only the sourced command's stderr goes to the file: our own lines' errors stay in view.
        # Anything but a plain file there (a fifo would block bash's open) is removed first.
        errors = ""
        if self.separate_stderr:
            err = self._err_file
            parts.append(f"[[ -f {err} && ! -h {err} ]] || \\command rm -rf -- {err}")
            errors = f" 2> {err}"
        parts.append(f"\\builtin source {self._file} < {source}{errors}; {_sentinel(nonce, 'r')}")
        line = "; ".join(parts)
        return (line if len(line) * 4 < LINE_MAX else "\n".join(parts)) + "\n"

    def _pump(self, call: _Call, stoppable: bool = True) -> str:
        """Read until the awaited sentinel: "done", "exited" (bash is gone) or "stuck"."""
        pty, call.tidy = self._pty, self._tidy
        leftover, self._leftover = self._leftover, b""
        if self._drainer is not None:
            self._drainer.room.set()
        call.add(leftover)
        pty.spill = call.add
        try:
            while True:
                now = time.monotonic()
                slice_ = STOPPING_POLL if call.awaiting is None else POLL
                before = pty.wait_for(b"\x1f" if call.in_sentinel else call.mark,
                                      min(max(0.0, call.next_at - now), slice_))
                if before is not None:
                    if self._sentinel(call, before):
                        self._leftover = pty.take_pending()
                        return "done"
                    continue
                if call.live is not None and not call.in_sentinel:
                    self._report(call)
                if not self._child.isalive():
                    call.add(pty.read_now())
                    return "exited"
                if stoppable and not self._stopping(call):
                    return "stuck"
                if not stoppable and time.monotonic() >= call.next_at:
                    return "stuck"
        except EOF:  # nothing holds the pty any more: bash is gone
            call.add(pty.before)
            return "exited"
        finally:
            pty.spill = None

    def _report(self, call: _Call) -> None:
        """Hand on_output what came since the last report, at most every LIVE_EVERY s."""
        now = time.monotonic()
        if now < call.report_at:
            return
        call.report_at = now + LIVE_EVERY
        self._pty.flush(call.mark)  # a sentinel's head split over two reads stays whole
        if call.live_size:
            text, skipped = "".join(call.live), call.live_skipped
            call.live[:], call.live_size, call.live_skipped = [], 0, 0
            self.on_output(text, now - call.started, skipped)

    def _sentinel(self, call: _Call, before: bytes) -> bool:
        """Take what came before a sentinel's head or tail; True once the awaited one is whole."""
        if not call.in_sentinel:
            call.add(before)
            call.in_sentinel = True
            return False
        call.in_sentinel = False
        try:
            tag, code, cwd_q = before.decode("utf-8", "replace").split(" ", 2)
            code = int(code)
        except ValueError:  # not ours after all
            call.add(call.mark + before + b"\x1f")
            return False
        self._cwd_q = cwd_q or self._cwd_q
        if tag == "r" or not call.completed:  # after "r", later sentinels only see printf's $?
            call.exit_code, call.completed = code, call.completed or tag == "r"
        return tag == call.awaiting

    def _stopping(self, call: _Call) -> bool:
        """Between reads: act on interrupt() and the deadline; False when out of steps."""
        now = time.monotonic()
        if self._interrupt.is_set() and call.reason is None:
            call.reason, call.next_at = "interrupted", now
        if call.awaiting is None and _foreground(self._fd) == self._shell_pgrp:
            # bash has the terminal back: only now may we type (a program would read it as keys)
            call.awaiting = f"i{call.step}"
            self._send(_sentinel(call.nonce, call.awaiting) + "\n")
        if now < call.next_at:
            return True
        return self._stop_step(call, now)

    def _stop_step(self, call: _Call, now: float) -> bool:
        """Signal the foreground job; the fresh sentinel follows once bash is back in front."""
        if call.step >= len(STOP_SIGNALS):
            return False
        call.reason = call.reason or "timeout"
        call.stopped_at = call.stopped_at or now
        sig = STOP_SIGNALS[call.step]
        call.step += 1
        pgrp = _foreground(self._fd)
        # SIGKILL to bash's own group would end the shell (a builtin loop that ignores SIGINT);
        # the last step restarts it instead.
        if not (sig == signal.SIGKILL and pgrp == self._shell_pgrp) and _killpg(pgrp, sig):
            call.signals.append(sig.name)
        # bash drops the rest of an interrupted line, its sentinel included: ask again, once
        # bash is in front (checked at once, then every STOPPING_POLL).
        call.awaiting = None
        call.next_at = now + self.kill_grace
        return self._stopping(call)

    def _result(self, call: _Call, status: str, limit: float, sent: bool = True) -> ToolResult:
        if status != "done" and self._pty is not None:
            call.add(self._pty.take_pending())  # read, but no sentinel came after it
        call.output.add(self._tidy(call.text.finish()))
        note = _stop_note(call, limit, status) if call.reason else ""
        if status == "exited":
            call.exit_code = self._exit_status()
            note = f"{note}\n[The shell exited (exit code {call.exit_code})."
        if status != "done":
            note = f"{note} {self._replace_shell()}".strip() + "]"
        if disk := self.sandbox.disk_note():
            note = f"{note}\n[{disk[0].upper()}{disk[1:]}]".strip()
        text, truncated = call.output.render()
        stderr, cut = (None, False) if not self.separate_stderr else \
            self._stderr() if sent else ("", False)  # unsent: the file is the last command's
        limits = getattr(getattr(self.sandbox, "spec", None), "limits", None)
        if call.exit_code not in (0, None) and not disk and limits is not None:
            if met := limit_note(call.exit_code, f"{text}\n{stderr or ''}", limits):
                note = f"{note}\n[{met}]".strip()
        if call.exit_code and GIT_READ_ONLY.search(f"{text}\n{stderr or ''}") \
                and not getattr(getattr(self.sandbox, "spec", None), "git_writable", True):
            note = f"{note}\n{GIT_NOTE}".strip()
        if note:
            text = (text + "\n" if text else "") + note
        return ToolResult(text, exit_code=call.exit_code, timed_out=call.reason == "timeout",
                          truncated=truncated or cut, error=self._child is None, stderr=stderr)

    def _stderr(self) -> tuple[str, bool]:
        """The last command's stderr from its file: cleaned as output is, head and tail only when
        long; whether it was cut."""
        half = max(self.max_output // 2, 1)
        try:
            head, skipped, tail = self.sandbox.read_file_ends(self._err_file, half, half)
        except (OSError, RuntimeError):  # removed by the command, or the sandbox is gone
            return "", False
        text = self._tidy(clean(head.decode("utf-8", "replace")))
        if skipped:
            text += (f"\n[... {skipped:,} bytes of stderr cut from the middle ...]\n"
                     + self._tidy(clean(tail.decode("utf-8", "replace"))))
        return text.rstrip("\n"), bool(skipped)

    def _replace_shell(self) -> str:
        """Start a fresh bash after this one exited or could not be stopped; say how it went."""
        self._end(graceful=False)
        if getattr(self.sandbox, "stopped", None):  # a limit stopped it whole: the note after this says which
            return ""
        try:
            self._start()
        except Exception as exc:  # the next run tries again
            return f"A fresh shell failed to start: {exc}"
        return f"A fresh shell was started in {self._cwd_q}: {FORGET}."

    def _exit_status(self) -> int | None:
        _wait_exit(self._child, 2.0)
        return self._child.exit_code

    # ---- small helpers ----------------------------------------------------------------------

    def _keep_between(self, data: bytes) -> bool:
        """Keep background output for the next command (the drainer holds the lock); False: full."""
        self._leftover += data
        return len(self._leftover) < BETWEEN_MAX

    def _tidy(self, text: str) -> str:
        if "+ builtin " in text or "+ [[ -d" in text:
            text = OUR_TRACES.sub("", text)
        if text.startswith("[") or "\n[" in text:
            text = JOB_NOTICE.sub("", text)
        # "bash: /tmp/lis/cmd-x.sh: line 1: ..." reads as `bash -c` says it: "bash: line 1: ..."
        return text.replace(f"{self._file}: line ", "line ") if self._file in text else text

    def _quiet_tty(self) -> None:
        """Echo off, line mode and signals on: a command may have changed them (`stty echo`)."""
        attrs = termios.tcgetattr(self._fd)
        want = (attrs[3] & ~(termios.ECHO | termios.ECHONL)) | termios.ICANON | termios.ISIG
        if want != attrs[3]:
            attrs[3] = want
            termios.tcsetattr(self._fd, termios.TCSANOW, attrs)

    def _send(self, text: str) -> None:
        data = text.encode("utf-8", "replace")  # lone surrogates (from JSON) become "?"
        while data:  # a long script fills the tty's buffer; bash drains it line by line
            data = data[self._pty.send(data):]


def _writes(text: str, path: str) -> list[str]:
    """Input lines that write `text` to `path` with builtins only, each short enough for a tty."""
    chunks = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
    return [f"\\builtin printf %s $'{escape(c)}' {'>>' if i else '>'} {path}" for i, c in enumerate(chunks)]


def _sentinel(nonce: str, tag: str) -> str:
    # \037 stays an escape in the input, so an `set -x` trace of this line is no sentinel
    return f"\\builtin printf '\\037%s %d %q\\037' {nonce}-{tag} \"$?\" \"$PWD\""


def _stop_note(call: _Call, limit: float, status: str) -> str:
    """What stopping the command took; the caller closes the bracket when the shell was replaced."""
    ran = (call.stopped_at or time.monotonic()) - call.started
    if status == "stuck":
        how = "neither SIGINT nor SIGKILL ended it, so the shell was ended."
    elif "SIGKILL" in call.signals:
        how = "it ignored SIGINT (Ctrl-C) and was killed with SIGKILL."
    else:
        how = "it was stopped with SIGINT (Ctrl-C)."
    if call.reason == "interrupted":
        head = f"[Interrupted by the user after {ran:.1f} s: {how}"
    else:
        head = f"[The command timed out after {limit:g} s: {how}"
        if status == "done":
            head += " Run long jobs in the background (`cmd > log 2>&1 &`) or pass a longer timeout."
    return head if status == "stuck" else head + "]"


def _foreground(fd: int) -> int | None:
    try:
        return os.tcgetpgrp(fd)  # on the master side: the host pid of the pty's foreground group
    except OSError:
        return None


def _cwd_of(pid: int | None) -> str | None:
    """A live process's cwd as the sandbox sees it, shell-quoted; only ever handed to `cd`."""
    try:
        path = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return shlex.quote(path) if path.startswith("/") and not path.endswith(" (deleted)") else None


def _killpg(pgrp: int | None, sig: int) -> bool:
    if not pgrp or pgrp <= 1:
        return False
    try:
        os.killpg(pgrp, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait_exit(child, timeout: float) -> None:
    try:
        child.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass


def _wait_readable(fd: int, timeout: float) -> bool:
    return bool(ready([fd], timeout))
