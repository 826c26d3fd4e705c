"""The system prompt says what the rootfs offers, so the model does not spend steps finding out."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, submit
from isolation.rootfs.facts import RootfsFacts
from lis_tui.prompts.environment import describe, environment_note

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.sandbox
def test_the_system_prompt_of_a_real_run_carries_the_host_note(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL")}
    env.update(PYTHONPATH=str(REPO), XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_STATE_HOME=str(tmp_path / "s"))
    with FakeOpenAI([submit()]) as server:
        done = subprocess.run([sys.executable, "-m", "lis_tui.cli", "run", "--base-url", server.base_url,
                               "--rootfs", "host", "--output-dir", "out", "say hi"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        system = server.chat_requests[0].messages[0]["content"]
    assert done.returncode == 0, done.stderr
    note = environment_note("host")
    assert note and note in system and "{environment_note}" not in system
    assert "There is no apt here" in note and "pip install X" in note


def test_the_note_names_what_there_is_and_the_way_to_what_is_not():
    ubuntu = RootfsFacts("Ubuntu 24.04 LTS", True, "3.12", True, False, False, ("numpy", "sympy"))
    text = describe(ubuntu, host=False)
    assert "Ubuntu 24.04 LTS; you are root" in text and "Python 3.12 with pip; already installed: numpy, sympy" in text
    assert "(system-wide)" in text and "apt-get update && apt-get install -y X" in text
    bare = RootfsFacts("Debian", True, None, False, False, False, ())
    assert "No Python is installed" in describe(bare, False)
    assert "apt-get install -y python3 python3-pip" in describe(bare, False)
    host = RootfsFacts("Debian 12", False, "3.11", True, True, True, ())
    text = describe(host, host=True)
    assert "read-only" in text and "they go to /root/.local" in text and "`uv pip install X`" in text
    assert "no apt here" in text and "npm install -g" in text and "already installed" not in text
    assert "without pip" in describe(RootfsFacts("", False, "3.11", False, False, False, ()), host=True)


def test_a_rootfs_that_cannot_be_read_gets_no_note(tmp_path):
    assert environment_note(str(tmp_path / "missing")) == ""
