"""`lis-tui shell` in a real terminal (tmux): a prompt, commands, Ctrl-C to the command not the shell."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed (install.sh --dev adds it)")]
LIS = str(Path(sys.executable).with_name("lis-tui"))


def test_interactive_shell_in_a_terminal(tmp_path):
    session = f"lis-{os.getpid()}"
    env = {**os.environ, "TMUX": ""}
    subprocess.run(["tmux", "-L", session, "new-session", "-d", "-s", session, "-x", "100", "-y", "20",
                    f"{LIS} shell; echo shell-exited-$?; sleep 30"], check=True, env=env)
    tmux = ["tmux", "-L", session]
    try:
        def keys(*k):
            subprocess.run(tmux + ["send-keys", "-t", session, *k], check=True)

        def shows(want):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                text = subprocess.run(tmux + ["capture-pane", "-t", session, "-p"], capture_output=True,
                                      text=True).stdout
                if want in text:
                    return text
                time.sleep(0.1)
            raise AssertionError(f"{want!r} never appeared:\n{text}")

        shows("(lis-sandbox) /testbed#")
        keys("echo sum=$((40+2)); hostname", "Enter")
        assert "lis-sandbox" in shows("sum=42")
        keys("sleep 300", "Enter")
        time.sleep(0.5)
        keys("C-c")
        keys("echo still-here", "Enter")
        shows("still-here")
        keys("exit 4", "Enter")
        shows("shell-exited-4")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)


def test_tiocsti_from_the_sandbox_shell_reaches_no_outer_shell(tmp_path):
    """The audit pushed a command into the user's terminal from `lis-tui shell` (TIOCSTI) and the
    user's shell ran it after the sandbox exited. Here the sandbox shell tries, on every descriptor
    it has, and the outer shell must run nothing."""
    marker = tmp_path / "injected"
    session = f"lis-sti-{os.getpid()}"
    env = {**os.environ, "TMUX": ""}
    subprocess.run(["tmux", "-L", session, "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "120",
                    "-y", "30", "env PS1='outer$ ' bash --norc --noprofile"], check=True, env=env)
    tmux = ["tmux", "-L", session]
    attack = ("python3 -c \"import fcntl, termios, os\n"
              "for fd in (0, 1, 2):\n"
              "    try:\n"
              f"        [fcntl.ioctl(fd, termios.TIOCSTI, bytes([c])) for c in b'touch {marker}; echo ran\\n']\n"
              "        print('pushed', fd)\n"
              "    except OSError as e:\n"
              "        print('refused', fd, e.errno)\"")
    try:
        def keys(*k):
            subprocess.run(tmux + ["send-keys", "-t", session, *k], check=True)

        def screen() -> str:
            return subprocess.run(tmux + ["capture-pane", "-t", session, "-p", "-S", "-100"], capture_output=True,
                                  text=True).stdout

        def shows(want):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if want in (text := screen()):
                    return text
                time.sleep(0.1)
            raise AssertionError(f"{want!r} never appeared:\n{text}")

        keys(f"{LIS} shell", "Enter")
        shows("(lis-sandbox) /testbed#")
        subprocess.run(tmux + ["load-buffer", "-"], input=attack.encode() + b"\n", check=True)
        subprocess.run(tmux + ["paste-buffer", "-t", session], check=True)
        results = shows("refused 2 ").split("e.errno)\"")[-1]
        # the attack ran, and met EPERM on every descriptor
        assert "refused 0 1\nrefused 1 1\nrefused 2 1" in results and "pushed" not in results
        keys("exit", "Enter")
        deadline = time.monotonic() + 20  # the outer prompt again, after the sandbox's
        while not screen().rstrip().endswith("outer$") and time.monotonic() < deadline:
            time.sleep(0.1)
        keys("echo outer-$((6*7))", "Enter")
        shows("outer-42")
        time.sleep(0.5)
        assert not marker.exists()
        assert "ran" not in screen().split("outer-42")[-1]
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
