"""`lis-tui shell` in a real terminal (tmux): a prompt, commands, Ctrl-C to the command not the shell."""
from __future__ import annotations

import os
import shlex
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


class Terminal:
    """A tmux server of its own (no config), one window running `command`, read as a screen."""

    def __init__(self, name: str, command: str, **options: str) -> None:
        self.tmux = ["tmux", "-L", name, "-f", "/dev/null"]
        self.name = name
        subprocess.run(self.tmux + ["new-session", "-d", "-s", name, "-x", "120", "-y", "30", command],
                       check=True, env={**os.environ, "TMUX": ""})
        for option, value in options.items():
            self.run("set-option", "-g", option, value)

    def run(self, *args: str) -> str:
        return subprocess.run(self.tmux + list(args), capture_output=True, text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.name, *keys)

    def shows(self, want: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.run("capture-pane", "-t", self.name, "-p")
            if want in text or time.monotonic() > deadline:
                assert want in text, f"{want!r} never appeared:\n{text}"
                return text
            time.sleep(0.1)

    def state(self) -> tuple[str, str]:
        """The pane's title and path (both set by programs, OSC 2 and OSC 7), and tmux's buffers
        (OSC 52 makes one when set-clipboard is on)."""
        return (self.run("display-message", "-p", "-t", self.name, "#{pane_title}|#{pane_path}").strip(),
                self.run("list-buffers", "-F", "#{buffer_sample}"))

    def close(self) -> None:
        subprocess.run(self.tmux + ["kill-server"], capture_output=True)


# Clipboard, title and working directory, each split over two writes (two reads of the relay).
SETS_STATE = (r"printf 'before\n\033]52;c;'; sleep 0.3; printf '%s\a' $(printf {word}-clip | base64); "
              r"printf '\033]2;{word}-'; sleep 0.3; printf 'title\033\\'; "
              r"printf '\033]7;file://h/{word}-dir\a\033]0;{word}-title0\a'; printf 'after\n'")


def test_clipboard_title_and_directory_strings_from_the_sandbox_do_not_reach_the_terminal():
    """`lis-tui exec` on a terminal relayed OSC 52 (tmux took it into a buffer: the host's
    clipboard, where the terminal allows it), OSC 0/2 (the title) and OSC 7 raw."""
    term = Terminal(f"lis-osc-{os.getpid()}", "bash --norc --noprofile", **{"set-clipboard": "on"})
    try:
        term.keys(SETS_STATE.format(word="outer") + "; echo outer-done-$((40+2))", "Enter")  # from the host's shell...
        term.shows("outer-done-42")
        title, buffers = term.state()
        assert title == "outer-title0|file://h/outer-dir" and "outer-clip" in buffers  # ...takes effect
        term.keys("clear", "Enter")
        term.keys(f"{LIS} exec -- {shlex.quote(SETS_STATE.format(word='sandbox'))}; echo exec-done-$?", "Enter")
        screen = term.shows("exec-done-0")
        title, buffers = term.state()
    finally:
        term.close()
    assert "before\n" in screen and "after\n" in screen  # the program ran, its text came through
    assert title == "outer-title0|file://h/outer-dir" and "sandbox" not in buffers


def test_less_and_vi_work_through_the_relay():
    """Full-screen programs draw and take keys through the filtered relay."""
    term = Terminal(f"lis-fs-{os.getpid()}", f"{LIS} shell; echo shell-exited-$?; sleep 30")
    try:
        term.shows("(lis-sandbox) /testbed#")
        term.keys("seq 1 500 > /tmp/n; less /tmp/n", "Enter")
        screen = term.shows("\n29\n")
        assert screen.startswith("1\n2\n3\n") and "(lis-sandbox)" not in screen  # less owns the screen
        term.keys("G")
        assert "(END)" in term.shows("500")
        term.keys("q")
        term.shows("(lis-sandbox) /testbed#")
        term.keys("vi /tmp/v.txt", "Enter")
        term.shows("~\n~\n")
        term.keys("i", "written in vi", "Escape", ":wq", "Enter")
        term.keys("clear; cat /tmp/v.txt", "Enter")
        term.shows("written in vi\n(lis-sandbox) /testbed#")
        term.keys("exit", "Enter")
        term.shows("shell-exited-0")
    finally:
        term.close()
