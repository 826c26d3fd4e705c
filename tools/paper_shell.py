"""Commands as llm-in-sandbox 0.2.0 runs them (the paper flavour of `execute_bash`).

Its Docker layer runs every command in a fresh `bash -c 'timeout 120 bash -c CODE'` from the
working directory, with the container's environment (its PATH, pip's quiet settings) and no
terminal: nothing carries over between commands but files, `ls` prints one name a line, and
the output is every byte written, final newlines included, with colour codes and carriage
returns taken out. An exit status of 124 (what `timeout` returns) reads as a timeout whatever
made it. Here the fresh `bash -c CODE` is started from the persistent shell (a fork of it, not
a new sandbox) with the environment the package's outer line gives it, under the persistent
shell's deadline instead of a `timeout` process; its stdout and stderr go to files of their
own in the sandbox, read back from the host, head and tail only when huge.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tools.shell_output import WORK_DIR

PACKAGE_TIMEOUT = 120
"""Seconds a command may run (the package's CMD_TIMEOUT)."""
PACKAGE_PATH = ("/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                "/usr/bin:/sbin:/bin")
PACKAGE_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore",
               "PIP_NO_WARN_SCRIPT_LOCATION": "1"}
"""What its container and each exec set, besides PATH."""
READ_BACK = 8 << 20
"""Bytes of each stream read back from each end; what lies between is left out (the package
would send it all: a 16 MiB line is the only output where the two differ)."""
_COLOURS = re.compile(r"\x1b\[[0-9;]*m|\r")


@dataclass(frozen=True)
class Ran:
    """One command's result as the package's runtime reports it."""

    stdout: str
    stderr: str
    status: str
    """ "0", "Error: Exit code N", or "-1" for a timeout."""
    exit_code: int | None
    timed_out: bool = False


class PackageCommands:
    """Runs commands as the package's runtime does, through `shell` (a tools.shell.Shell)."""

    def __init__(self, shell, sandbox, cwd: str = "/testbed", timeout: int = PACKAGE_TIMEOUT):
        self.shell, self.sandbox, self.cwd, self.timeout = shell, sandbox, cwd, timeout
        self._out, self._err = f"{WORK_DIR}/paper-out", f"{WORK_DIR}/paper-err"

    def environment(self) -> dict[str, str]:
        """The sandbox's environment with the package's PATH (keeping this rootfs's own
        directories of tools, e.g. the host rootfs's shims) and pip settings."""
        env = dict(self.sandbox.env)
        own = [p for p in env.get("PATH", "").split(":") if p and p not in PACKAGE_PATH.split(":")]
        head, _, tail = PACKAGE_PATH.partition(":/usr/local/sbin")
        env["PATH"] = ":".join([head, *own]) + ":/usr/local/sbin" + tail
        env.update(PACKAGE_ENV)
        return env

    def run(self, code: str, apart: bool = True) -> Ran:
        """`code` in a fresh bash; `apart`: stdout and stderr kept apart (else one stream, in
        the order written, as the package's editor reads it)."""
        errors = f"2> {self._err}" if apart else "2>&1"
        # The package's `bash -c 'timeout 120 bash -c CODE'`: its outer bash only execs
        # `timeout` (one simple command) with PWD and SHLVL=1 exported, and `timeout` only
        # waits. A subshell of the persistent shell, given the package's environment with
        # builtins, execs the fresh `bash -c CODE` itself, and the persistent shell's own
        # deadline stands in for `timeout` (same limit, same answer): a process fewer per
        # command, which bench_throughput.py --paper needs to stay above 0.8x the default.
        line = (f"{self._clear(self._out)}; {self._clear(self._err)}; "
                f"( \\builtin cd -- {shlex.quote(self.cwd)} && {self._environment_line()} && "
                f"\\builtin exec bash -c {shlex.quote(code)} ) "
                f"> {self._out} {errors} < /dev/null")
        result = self.shell.run(line, timeout=self.timeout)
        if result.timed_out or result.exit_code == 124:
            return Ran(f"The command took too long to execute (>{self.timeout}s)", "", "-1",
                       result.exit_code, timed_out=True)
        code_ = result.exit_code
        stdout = self._read(self._out)
        stderr = self._read(self._err) if apart else ""
        status = "0" if code_ == 0 else f"Error: Exit code {code_}"
        return Ran(stdout, stderr, status, code_)

    def _environment_line(self) -> str:
        """Builtins that leave exactly `environment()` exported in a subshell of the persistent
        shell (which exports the sandbox's variables and its own, e.g. PAGER and TERM)."""
        env = self.environment()
        ours = set(self.sandbox.env) | set(getattr(self.shell, "_env", {})) | {"OLDPWD"}
        drop = " ".join(sorted(ours - set(env)))
        keep = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        return (f"\\builtin unset -v {drop}; " if drop else "") + f"\\builtin export SHLVL=1 {keep}"

    @staticmethod
    def _clear(path: str) -> str:
        # anything but a plain file planted there (a fifo would block the redirection) goes
        return f"[[ -f {path} && ! -h {path} ]] || \\command rm -rf -- {path}"

    def _read(self, path: str) -> str:
        try:
            head, between, tail = self.sandbox.read_file_ends(path, READ_BACK, READ_BACK)
        except OSError:
            return ""
        text = (head + tail).decode("utf-8", "replace") if not between else \
            head.decode("utf-8", "replace") + tail.decode("utf-8", "replace")
        return _COLOURS.sub("", text)
