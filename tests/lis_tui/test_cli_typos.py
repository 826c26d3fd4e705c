"""A mistyped command never becomes a paid task, and the app never starts without a terminal.
`lis-tui` runs as a subprocess against the scripted model server, which counts every request."""

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, submit

REPO = Path(__file__).resolve().parents[2]


def lis(tmp_path: Path, *args: str, terminal: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "xterm-256color"}
    argv = [sys.executable, "-m", "lis_tui.cli", *args]
    if not terminal:
        return subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
    main, side = pty.openpty()  # the app would start here, if anything let it
    try:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, stdin=side, stdout=side,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(side)
        os.close(main)
    return proc


@pytest.mark.parametrize("args, hint", [
    (["docter"], "unknown command 'docter' (did you mean doctor?)"),
    (["exce", "--", "ls"], "unknown command 'exce' (did you mean exec?)"),
    (["--rootfs", "host", "frobnicate"], "unknown command 'frobnicate'. A task needs a space"),
])
def test_a_lone_unknown_word_is_an_unknown_command_even_on_a_terminal(tmp_path, args, hint):
    with FakeOpenAI(default=submit()) as server:
        done = lis(tmp_path, *args, "--base-url", server.base_url, "--model", "m", terminal=True)
        assert server.requests == []  # no model call, not even a model list
    assert done.returncode == 2
    assert hint in done.stderr and "lis-tui -- " in done.stderr


@pytest.mark.parametrize("args", [["do a thing"], ["--", "docter"], ["-t", "docter"]])
def test_without_a_terminal_the_app_refuses_and_names_run(tmp_path, args):
    with FakeOpenAI(default=submit()) as server:
        done = lis(tmp_path, "--base-url", server.base_url, *args)
        assert server.requests == []
    assert done.returncode == 2 and done.stdout == ""  # not one escape code
    assert "needs a terminal" in done.stderr and 'lis-tui run "TASK"' in done.stderr
