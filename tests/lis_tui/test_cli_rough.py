"""The first day's command-line rough edges (issue 36): the app takes `run`'s model flags, no
traceback on any port, and the smaller things a person met. `lis-tui` runs in this process (the
`cli` fixture) or as a subprocess, as a person would run it."""

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_errors import cli, one_line  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[2]


def _flags(parser: argparse.ArgumentParser, group: str) -> set[str]:
    (found,) = [g for g in parser._action_groups if g.title == group]  # noqa: SLF001
    return {o for a in found._group_actions for o in a.option_strings}  # noqa: SLF001


# -- item 4: the app takes run's model flags --------------------------------------------------------

def test_the_app_takes_every_model_flag_of_run():
    from lis_tui.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    run_flags, app_flags = _flags(subs.choices["run"], "model and agent"), _flags(subs.choices["tui"], "model and agent")
    assert {"--tool-format", "--max-tokens", "--temperature"} <= run_flags
    assert run_flags <= app_flags


def test_lis_tui_with_runs_model_flags_is_not_refused(cli):
    """Without a terminal the app refuses, after its flags were read: none is unknown."""
    done = cli("--tool-format", "bash", "--max-tokens", "64", "--temperature", "0.2",
               "--max-context-tokens", "9000", "--observation", "paper", "-t", "hi")
    assert done.returncode == 2 and "needs a terminal" in one_line(done)


# -- item 8: no traceback on any port ----------------------------------------------------------------

LISTENERS = [["env", "serve", "--rootfs", "host"], ["mcp", "--http", "--rootfs", "host"], ["fake-server"]]


def lis(tmp_path: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`lis-tui ARGS` as a subprocess (after `prefix`): one that listens must end by itself."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("LIS_ENV_TOKEN", None)
    return subprocess.run([*prefix, sys.executable, "-m", "lis_tui.cli", *args], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def said(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line and not line.startswith("usage:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
def test_a_busy_port_is_one_line_naming_it_and_port_0(tmp_path, command):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = lis(tmp_path, *command, "--port", str(port))
    line = said(done)  # env serve: no token printed for a server that never ran
    assert done.returncode == 1 and f"127.0.0.1:{port}" in line and "in use" in line
    assert "--port 0" in line


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error_naming_port_0(cli, command, port):
    done = cli(*command, "--port", port)
    line = one_line(done)
    assert done.returncode == 2 and port in line and "--port 0" in line


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
def test_a_privileged_port_is_one_line_naming_it_and_port_0(tmp_path, command):
    """In a user namespace of its own even root holds no right to the host's ports below
    ip_unprivileged_port_start, as any user does not."""
    if int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text()) <= 80:
        pytest.skip("this machine lets every user listen on port 80")
    done = lis(tmp_path, *command, "--port", "80", prefix=("unshare", "--user", "--"))
    line = said(done)
    assert done.returncode == 1 and "127.0.0.1:80" in line and "need privileges" in line
    assert "--port 0" in line
