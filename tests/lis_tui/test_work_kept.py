"""The model's work outlives the process that watched it: a headless run saves its workspace changes
and output files after every step, and a SIGHUP (a closed terminal), SIGTERM or SIGKILL after a step
that wrote files leaves a run folder whose patch `lis-tui apply` takes (real bwrap, real git)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, delay, reply, submit
from proctree import left_behind
from test_run_changes import bash, env_for, lis, make_project, tree

pytestmark = pytest.mark.sandbox
STEP = ("cd /testbed && echo kept > new.txt && printf 'one\\nTWO\\nthree\\n' > notes.txt "
        "&& echo out > /agent/output/made.txt")


def saved_paths(run: Path) -> list[str]:
    try:
        return json.loads((run / "changes.json").read_text())["paths"]
    except (OSError, ValueError, KeyError):
        return []


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_run_stopped_after_a_step_keeps_that_steps_work_for_lis_tui_apply(tmp_path, signum):
    project = make_project(tmp_path / "project")
    before = tree(project)
    run = tmp_path / "run"
    with FakeOpenAI([reply("writing", [bash(STEP)]), delay(120, submit())]) as server:
        proc = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "run", "--base-url", server.base_url, "--model",
                                 "m", "--rootfs", "host", "--workspace", str(project), "--output-dir", str(run), "a task"],
                                cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            server.wait_for_requests(2, timeout=60)  # step 1 ran; the model is being asked for step 2
            deadline = time.monotonic() + 30
            while saved_paths(run) != ["new.txt", "notes.txt"] and time.monotonic() < deadline:
                time.sleep(0.05)  # the step's save runs beside that call
            assert saved_paths(run) == ["new.txt", "notes.txt"]
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    doc = json.loads((run / "trajectory.json").read_text())
    assert (run / "files" / "made.txt").read_text() == "out\n"  # the output folder too
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL and doc["finish_reason"] is None
        assert left_behind(proc.pid) == []  # its sandbox went with it
    else:  # stopped as Ctrl-C stops it: the record finished, the work saved once more
        assert proc.returncode == 130 and doc["finish_reason"] == "cancelled", err
    assert tree(project) == before  # nothing on the host until asked
    applied = lis(tmp_path, "apply", str(run))
    assert applied.returncode == 0 and "applied 2 changes" in applied.stderr, applied.stderr
    assert (project / "new.txt").read_text() == "kept\n" and (project / "notes.txt").read_text() == "one\nTWO\nthree\n"
