"""The app in a real terminal (tmux), killed after a step that wrote files to its workspace: a closed
terminal (SIGHUP), SIGTERM and SIGKILL each leave a run folder whose patch `lis-tui apply` takes, and
the first two end the run cleanly, its record finished."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, delay, reply, submit
from past_runs import env_for
from proctree import descendants
from test_tmux import Tmux, lis_tui_command

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
STEP = "cd /testbed && echo kept > new.txt && echo out > /agent/output/made.txt"


def _app_pid(term: Tmux) -> int:
    shell = int(term.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
    for pid in [shell, *descendants(shell)]:
        try:
            if b"lis_tui.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no lis-tui below the pane's shell {shell}:\n{term.screen()}")


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_app_killed_after_a_step_keeps_the_work_for_lis_tui_apply(tmp_path, signum):
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('a')\n")
    run = tmp_path / "out"
    term = Tmux(f"lis-killed-{os.getpid()}-{signum.name}")
    with FakeOpenAI([reply("Writing.", [call("execute_bash", {"command": STEP})]), delay(120, submit())]) as server:
        try:
            term.start(lis_tui_command(tmp_path, "--base-url", server.base_url, "--model", "m", "--rootfs", "host",
                                       "--workspace", str(project), "-t", "write a file"), width=100, height=30)
            server.wait_for_requests(2, timeout=60)  # step 1 ran; the model is being asked for step 2
            term.wait_for("exit 0")
            pid = _app_pid(term)
            deadline = time.monotonic() + 30
            while not (run / "changes.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # the step's save runs beside that call
            if signum == signal.SIGHUP:
                term.kill()  # the terminal goes: the app gets SIGHUP, as when its window is closed
            else:
                os.kill(pid, signum)
            assert _gone(pid), "the app did not end"
        finally:
            term.kill()
    doc = json.loads((run / "trajectory.json").read_text())
    assert doc["finish_reason"] == (None if signum == signal.SIGKILL else "cancelled")
    assert (run / "files" / "made.txt").read_text() == "out\n"
    assert not (project / "new.txt").exists()  # nothing on the host until asked
    applied = subprocess.run([sys.executable, "-m", "lis_tui.cli", "apply", str(run)], cwd=tmp_path,
                             env=env_for(tmp_path), capture_output=True, text=True, timeout=120)
    assert applied.returncode == 0 and "applied 1 change " in applied.stderr, applied.stderr
    assert (project / "new.txt").read_text() == "kept\n"
