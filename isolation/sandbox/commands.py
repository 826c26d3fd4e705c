"""Running things inside a sandbox: a command to its end (exec), a process the caller owns
(popen), one on a pty of its own (spawn_pty), a listening socket (listen). The zygote (spawn/)
starts them all in the sandbox's namespaces; this module says when the sandbox can run nothing."""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import termios
from typing import TYPE_CHECKING

from .. import spawn
from ..host.inroot import InRootUnavailable, open_pty_in_root
from ..output import collect
from ..spec import ExecResult, SandboxError

if TYPE_CHECKING:
    from . import Sandbox

OUTPUT_CAP = 64 << 20


def exec(sandbox: Sandbox, command: str | list[str], timeout: float | None = None, stdin: bytes | str | None = None,
         cwd: str | None = None, env: dict[str, str] | None = None,
         max_output: int = OUTPUT_CAP) -> ExecResult:
    """Run a shell string or an argv list inside; the whole process group dies at the timeout.
    `cwd`: None is where the model works (`spec.places.working`: /testbed, or a workspace's own path)."""
    rc, out, err, timed_out, dropped = sandbox._run(command, timeout, stdin, cwd, env, max_output)
    text = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    note = sandbox.disk_note()
    return ExecResult(rc, text(out), text(err) + (f"lis-tui: {note}\n" if note else ""), timed_out, dropped)


def _run(sandbox: Sandbox, command, timeout, stdin, cwd, env, max_output):
    argv = [sandbox._root.shell, "-c", command] if isinstance(command, str) else list(command)
    if isinstance(stdin, str):
        stdin = stdin.encode()
    proc = sandbox.popen(argv, cwd, env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, timed_out, dropped = collect(proc, stdin, timeout, max_output)
    if _pid_1_failed(sandbox):  # its pid 1 never ran: the kernel killed this command with the namespace
        raise SandboxError(sandbox._not_running())
    return 124 if timed_out else spawn.exit_status(proc.returncode), out, err, timed_out, dropped


def popen(sandbox: Sandbox, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None, *,
          stdin=None, stdout=None, stderr=None, ctty: bool = False) -> spawn.Joined:
    """Start `argv` inside, in a session of its own; the caller owns the process. Stdio as for
    subprocess.Popen; `ctty`: the first of them that is a pty becomes its controlling terminal."""
    sandbox._require_running()
    try:
        return sandbox._zygote.spawn(argv, env={**sandbox.env, **(env or {})},
                                     cwd=sandbox.spec.places.working if cwd is None else cwd,
                                     stdin=stdin, stdout=stdout, stderr=stderr, ctty=ctty)
    except spawn.SpawnError as exc:
        if _pid_1_failed(sandbox) or not sandbox.running:  # failed: bwrap could not exec pid 1
            raise SandboxError(sandbox._not_running()) from None
        raise SandboxError(f"could not start {argv[0]!r} in the sandbox: {exc.strerror}") from None
    finally:  # once it runs (or failed): a watcher that found the sandbox quiet looks again
        sandbox._stir()


def listen(sandbox: Sandbox, port: int, backlog: int = 128) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` inside (any free port if that one is taken),
    to be served from here: how the network proxy gets its port in the sandbox."""
    sandbox._require_running()
    try:
        return sandbox._zygote.listen(port, backlog)
    except spawn.SpawnError as exc:
        if _pid_1_failed(sandbox):
            raise SandboxError(sandbox._not_running()) from None
        raise SandboxError(f"could not open port {port} in the sandbox: {exc.strerror}") from None


def spawn_pty(sandbox: Sandbox, argv: list[str], cwd: str | None = None, env_extra: dict[str, str] | None = None,
              dimensions: tuple[int, int] = (24, 200), echo: bool = False,
              keep: dict[int, int] | None = None) -> spawn.PtyChild:
    """Start `argv` inside on a new pty that is its controlling terminal; `.fd` is the master.
    `keep`: {0: fd, ...}, standard streams that get those descriptors instead of the pty.

    Started by the spawn helper, not pexpect's pty.fork(): forking this whole process,
    threads and heap, cost ~10 ms of CPU per shell with dozens of episodes alive."""
    try:
        with sandbox._in_root() as root:
            master, slave = open_pty_in_root(root)
    except (OSError, InRootUnavailable):  # no devpts of its own, or no openat2: one of ours
        master, slave = os.openpty()
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", *dimensions, 0, 0))
        if not echo:
            attrs = termios.tcgetattr(slave)
            attrs[3] &= ~termios.ECHO
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
        # The pty is its controlling terminal, so that bash has job control and Ctrl-C reaches
        # the foreground group.
        stdio = [(keep or {}).get(n, slave) for n in range(3)]
        proc = sandbox.popen(argv, cwd, env_extra, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], ctty=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return spawn.PtyChild(proc, master)


def _require_running(sandbox: Sandbox) -> None:
    """SandboxError once the sandbox is closed (or closing) or timed out."""
    if sandbox._closing or sandbox.pid is None or sandbox._err_fd is not None or not sandbox.running or sandbox._stopped:
        raise SandboxError(sandbox._not_running())


def _pid_1_failed(sandbox: Sandbox) -> str:
    """Why bwrap never ran the sandbox's pid 1, once its zygote said so (spawn.PID_1_FAILED); else ""."""
    return sandbox._zygote.failed if sandbox._zygote is not None else ""


def _not_running(sandbox: Sandbox) -> str:
    # after start returned (spawn.PID_1_FAILED): the zygote's words, bwrap's; else bwrap's status
    # alone (its own errors exit 1; pid 1 killed, 128 + the signal), once no zygote is left to say
    failed = _pid_1_failed(sandbox)
    if not failed and not sandbox._stopped and sandbox._proc is not None and sandbox._proc.returncode == 1:
        failed = f"{spawn.PID_1_FAILED} (bwrap exited with status 1)"
    if failed:
        return f"{failed}. pid 1 runs the rootfs's own `sh`; run `lis-tui doctor`"
    if sandbox._stopped:
        return f"the sandbox was stopped: {sandbox._stopped}."
    return "the sandbox is not running (closed, or its wall time ran out)"
