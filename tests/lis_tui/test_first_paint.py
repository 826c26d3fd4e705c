"""Issue 36 item 9: what the first frame does not need is not imported before it (a fresh
interpreter each, so nothing another test imported counts). Timings are benchmarks/first_paint.py's."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("openai", "httpx", "pygments", "rich.syntax", "markdown_it", "textual.widgets._markdown",
        "lis_tui.app.screens.review", "lis_tui.app.screens.approve_command", "lis_tui.app.screens.files", "lis_tui.bench",
        "isolation.sandbox", "isolation.records", "tools.shell", "lis_tui.api", "lis_tui.runs.changes")
"""Loaded with the first model call (the welcome's server check: after the first frame), the first
command or edit shown, the first reply drawn as Markdown, the key that opens the screen, or the
first task (the sandbox, its shell, the run's folder; the changes saved when a session closes)."""


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nsys.stderr.write(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1]))


def test_importing_the_app_leaves_out_what_its_first_frame_does_not_need():
    loaded = loaded_after("import lis_tui.app.tui")
    assert "textual.app" in loaded  # the probe saw the app's imports
    assert sorted(m for m in loaded if m.split(".")[0] in {n.split(".")[0] for n in LAZY}
                  and any(m == n or m.startswith(f"{n}.") for n in LAZY)) == []


def test_version_builds_no_parser():
    loaded = loaded_after("from lis_tui.cli import main\nmain(['--version'])")
    assert not [m for m in loaded if m.startswith("lis_tui.commands")]
    assert "isolation" not in loaded
