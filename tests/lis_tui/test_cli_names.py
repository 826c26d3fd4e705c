"""CLI listings show names read back from the disk (a session's directory and spec.json, a
rootfs's meta.json) with their control characters made visible, never sent raw."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fakes.hostile import HOSTILE, SHOWN, raw_in

REPO = Path(__file__).resolve().parents[2]


def lis(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", *args], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=60)


def test_sessions_list_shows_hostile_names_safely(tmp_path):
    session = tmp_path / "sessions" / f"s{HOSTILE.replace('/', '_')}"
    session.mkdir(parents=True)
    (session / "spec.json").write_text(json.dumps({"rootfs": f"r{HOSTILE}",
                                                   "workspace": f"/w{HOSTILE}"}))
    done = lis(tmp_path, "sessions", "list", LIS_SESSIONS=str(tmp_path / "sessions"))
    assert done.returncode == 0, done.stderr
    assert raw_in(done.stdout) == [] and f"r{SHOWN[0]}" in done.stdout
    assert f"/w{''.join(SHOWN[:5])} {SHOWN[5]}" in done.stdout


def test_rootfs_list_shows_a_hostile_source_safely(tmp_path):
    entry = tmp_path / "store" / "mine"
    (entry / "root").mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"source": f"import /tmp/{HOSTILE}.tar"}))
    done = lis(tmp_path, "rootfs", "--store", str(tmp_path / "store"), "list")
    assert done.returncode == 0, done.stderr
    assert raw_in(done.stdout) == [] and f"import /tmp/{SHOWN[0]}" in done.stdout
