"""`lis-tui tui` in a real terminal: tmux runs it against the scripted model server, keys go in
with `send-keys`, and `capture-pane` shows what a person would see."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.hostile import HOSTILE, MARKUP, OSC52, TITLE
from fakes.openai_server import FakeOpenAI, call, error, reply, submit

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
REPO = Path(__file__).resolve().parents[2]


class Tmux:
    """One tmux server of our own (-L), one session in it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True,
                              timeout=10)
        return done.stdout

    def start(self, command: str, width: int = 120, height: int = 40) -> None:
        # set-clipboard on: a program in the pane may set tmux's buffer with OSC 52, as a
        # terminal that honours it would set the clipboard (what the hostile test attempts)
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width),
                  "-y", str(height), command, ";", "set-option", "-g", "set-clipboard", "on")

    def title(self) -> str:
        return self.tmux("display-message", "-p", "-t", "t", "#{pane_title}").strip()

    def buffer(self) -> str | None:
        """tmux's paste buffer, or None when nothing set one."""
        done = subprocess.run(["tmux", "-L", self.name, "show-buffer"], capture_output=True,
                              text=True, timeout=10)
        return done.stdout if done.returncode == 0 else None

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def quit_after_run(self) -> None:
        """ctrl+q once the run has ended, which the status line's "ready" says (the prompt's
        placeholder may be covered by a key typed meanwhile): the answer, "submitted" or an exit
        code show while the run still finishes, and a ctrl+q then asks first. Returns once the
        app is gone."""
        self.wait_for(" · ready ", line=0)
        self.keys("C-q")
        wait_gone(self)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def answer(self, key: str, *shows: str) -> str:
        """Send a dialog's answer key once the dialog on screen is past its grace (question.GRACE_S,
        from when it was drawn, a moment before tmux showed it), again if a busy app drew it later
        than that; the screen once it shows `shows`."""
        from lis_tui.app.screens.question import GRACE_S  # noqa: PLC0415 (textual: only for this)

        for _ in range(3):
            time.sleep(GRACE_S)
            self.keys(key)
            with contextlib.suppress(AssertionError):
                return self.wait_for(*shows, timeout=10)
        return self.wait_for(*shows, timeout=1)

    def wait_for(self, *texts: str, timeout: float = 30.0, line: int | None = None) -> str:
        """The screen once it shows every one of `texts` (all on line `line`, if given)."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            where = shown if line is None else (shown.splitlines() or [""])[line]
            if all(t in where for t in texts):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {texts} on the screen:\n{shown}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "-L", self.name, "has-session", "-t", "t"],
                              capture_output=True).returncode == 0

    def kill(self) -> None:
        self.tmux("kill-server")


def lis_tui_command(tmp_path: Path, *args: str, cwd: Path | None = None,
                    output_dir: bool = True) -> str:
    """`lis-tui ARGS` run from `cwd` (default `tmp_path`), with a config dir of its own (empty
    unless written); runs go to tmp_path/out unless `output_dir` is False (the data dir then)."""
    # tmux started without a terminal (as under pytest) sets COLUMNS=80 LINES=24, which would
    # win over the real pane size: unset them. No variable may say where a model is.
    env = {"PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "TERM": "xterm-256color",
           "LIS_SCRATCH": os.environ.get("LIS_SCRATCH", str(tmp_path / "scratch"))}
    argv = [sys.executable, "-m", "lis_tui.cli", *args]
    if output_dir:
        argv += ["--output-dir", str(tmp_path / "out")]
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    unset = " ".join(f"-u {name}" for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL",
                                                "COLUMNS", "LINES"))
    return f"cd {shlex.quote(str(cwd or tmp_path))} && env {unset} {exports} {shlex.join(argv)}"


def wait_gone(term: Tmux, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while term.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not term.alive(), term.screen()


def test_a_task_in_a_real_terminal(tmp_path):
    script = [reply("I will compute it in the sandbox.",
                    [call("execute_bash", {"command": "echo $((6*7)) > /testbed/output/answer.txt"
                                                      " && cat /testbed/output/answer.txt"})]),
              submit()]
    term = Tmux(f"lis-test-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "m"))
            term.wait_for("Type a task")
            term.keys("What is 6*7?", "Enter")
            # The model's words are drawn as Markdown a moment after the answer may show.
            shown = term.wait_for("Answer", "submit", "I will compute it in the sandbox.")
            assert "What is 6*7?" in shown
            assert "echo $((6*7))" in shown
            assert "exit 0" in shown
            assert "42" in shown.split("Answer", 1)[1]
            term.quit_after_run()
        finally:
            term.kill()
    assert (tmp_path / "out" / "answer.txt").read_text() == "42\n"


def test_first_run_setup_opens_a_sandbox_shell_and_comes_back(tmp_path):
    term = Tmux(f"lis-shell-{os.getpid()}")
    try:
        term.start(lis_tui_command(tmp_path))  # nothing says where the model is: setup first
        term.wait_for("Where is the model?", "Shell (ctrl+o)")
        term.keys("C-o")
        term.wait_for("(lis-sandbox)")
        term.keys("echo in-sandbox-$((6*7)); hostname", "Enter")
        shown = term.wait_for("in-sandbox-42\nlis-sandbox")
        assert "Where is the model?" not in shown  # the app stepped aside for the shell
        term.keys("exit", "Enter")
        shown = term.wait_for("Where is the model?", "The sandbox shell exited (0)")
        assert "in-sandbox-42" not in shown  # the app drew itself again over the shell
        term.keys("Escape")  # later: the main screen, still alive
        term.wait_for("Type a task")
        term.keys("C-q")
        wait_gone(term)
    finally:
        term.kill()


def test_a_sandbox_shell_that_cannot_start_is_named_on_the_setup_screen(tmp_path):
    term = Tmux(f"lis-noshell-{os.getpid()}")
    try:
        term.start(lis_tui_command(tmp_path, "--rootfs", str(tmp_path / "no-such-rootfs")))
        term.wait_for("Where is the model?", "Shell (ctrl+o)")
        term.keys("C-o")
        term.wait_for("Where is the model?", "the sandbox shell failed")
        term.keys("Escape")  # the app took the terminal back: keys work
        term.wait_for("Type a task")
        term.keys("C-q")
        wait_gone(term)
    finally:
        term.kill()


def test_hostile_text_sets_neither_the_title_nor_the_clipboard(tmp_path):
    # First the attack itself, raw, in a terminal like the app's: it works there.
    bare = Tmux(f"lis-bare-{os.getpid()}")
    try:
        bare.start(f"printf %s {shlex.quote(OSC52 + TITLE)}; sleep 30")
        deadline = time.monotonic() + 10
        while bare.buffer() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (bare.title(), bare.buffer()) == ("pwned-title", "Hacked")
    finally:
        bare.kill()

    command = call("execute_bash", {"command": f"true '{HOSTILE}'"})
    script = [reply(f"Working. {HOSTILE}", [command]),
              reply(tool_calls=[call("str_replace_editor", {
                  "command": "create", "path": "/testbed/output/answer.txt",
                  "file_text": f"42 {HOSTILE}\n"})]),
              submit()]
    term = Tmux(f"lis-hostile-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "m"))
            term.wait_for("Type a task")
            before = term.title()
            term.keys("Do it.", "Enter")
            answer = tmp_path / "out" / "answer.txt"  # written once the run is over
            deadline = time.monotonic() + 30
            while not answer.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1)  # the last events are drawn (the model's words as Markdown last)
            assert (term.title(), term.buffer()) == (before, None)
            assert before != "pwned-title"
            shown = term.wait_for("Answer", "submit", "Working.")
            assert "\\x1b]52;c;SGFja2Vk\\x07" in shown and MARKUP in shown
            # the Answer box shows the file as a terminal would (escapes done, the rest visible)
            assert "42 31m\\u202eevil" in shown.split("Answer", 1)[1]
            term.quit_after_run()
        finally:
            term.kill()


def test_started_where_it_cannot_write_the_run_goes_to_the_data_dir_and_a_failure_stays(tmp_path):
    # Issue 14: started in a directory the user cannot write (like /tmp with another user's
    # lis-output/), every run failed and only a vanishing toast said so.
    readonly = tmp_path / "readonly"
    (readonly / "lis-output").mkdir(parents=True)
    readonly.chmod(0o555)
    script = [reply("Writing it.", [call("execute_bash", {"command": "echo 7 > /testbed/output/answer.txt"})]),
              submit(),
              error(400, "forced failure: this server refuses the follow-up")]
    term = Tmux(f"lis-readonly-{os.getpid()}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "m", cwd=readonly, output_dir=False),
                       width=100, height=30)
            term.wait_for("Type a task", "Runs go to")
            term.keys("What is 3+4?", "Enter")
            # the prompt's placeholder comes back once the run is idle: an Enter before that is not a follow-up
            shown = term.wait_for("Answer", "7", "run ", "Type a follow-up")
            assert "data/lis-tui/runs/" in shown  # the status line names the run's directory
            term.keys("And now?", "Enter")
            term.wait_for("The run failed", "refuses the follow-up")
            # The status line says so too, in the same frame, but tmux can be read while that frame
            # is half written: the CI once caught the transcript's notice with the old status line.
            term.wait_for(" failed ", line=0, timeout=10)
            time.sleep(12)  # longer than any toast lasts: the failure is still on screen
            assert "refuses the follow-up" in term.screen(), term.screen()
            term.keys("C-q")
            wait_gone(term)
        finally:
            term.kill()
            readonly.chmod(0o755)
    runs = list((tmp_path / "data" / "lis-tui" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "answer.txt").read_text() == "7\n"
    assert list((readonly / "lis-output").iterdir()) == []


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_a_running_command_s_output_shows_as_it_comes(tmp_path, size):
    # Issue 27 item 4: a 10 s loop showed only "running 14s" until it ended.
    # each line comes with a clipboard (OSC 52) and a title string: live, as later, they stay text
    loop = f"for i in $(seq 1 10); do echo tick-$i; printf %s {shlex.quote(OSC52 + TITLE)}; sleep 1; done"
    script = [reply(tool_calls=[call("execute_bash", {"command": loop})]), submit()]
    term = Tmux(f"lis-live-{os.getpid()}-{size[0]}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", server.base_url,
                                       "--model", "a-model-with-a-long-name-from-its-server"),
                       width=size[0], height=size[1])
            term.wait_for("Type a task")
            before = term.title()
            term.keys("Count to ten slowly.", "Enter")
            early = term.wait_for("tick-2", "running")
            assert "tick-10" not in early and "exit 0" not in early  # still running
            assert (term.title(), term.buffer()) == (before, None)
            status = early.splitlines()[:2]
            assert "NET OFF" in status[0] and status[1].lstrip().startswith("▶ step 1")  # no wrap
            shown = term.wait_for("tick-10", "exit 0", timeout=40)
            assert "all of it shows when it ends" not in shown  # the live view gave way
            term.quit_after_run()
        finally:
            term.kill()


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_setup_then_tab_keeps_the_draft_and_goes_prompt_transcript_prompt(tmp_path, size):
    # Issue 27 item 10: with no server found, typing on the setup screen went nowhere; every
    # output block was a Tab stop; tabbing back into the prompt selected the draft, so the
    # next key replaced it.
    from lis_tui.model.discover import KNOWN_PORTS, find_servers
    if find_servers(KNOWN_PORTS):
        pytest.skip("a model server runs on this machine: the setup screen offers it instead")
    long = "seq 1 40; echo listed"
    script = [reply(tool_calls=[call("execute_bash", {"command": long}),
                                call("execute_bash", {"command": long})]), submit()]
    term = Tmux(f"lis-focus-{os.getpid()}-{size[0]}")
    with FakeOpenAI(script) as server:
        try:
            term.start(lis_tui_command(tmp_path), width=size[0], height=size[1])
            term.wait_for("Where is the model?", "No model server found")
            term.keys(server.base_url)  # typed straight away: the URL field has the keys
            term.wait_for(server.base_url)
            term.keys("C-s")
            term.wait_for("Type a task", "Saved to")  # the setup screen closed
            term.keys("List them.", "Enter")
            term.wait_for("Answer", "exit 0", "Type a follow-up")  # idle: the draft is typed into the follow-up prompt
            term.keys("draft")
            term.wait_for("draft")
            # Tab: to the transcript, past no output block; Tab: back to the prompt, where the
            # draft is kept as it was (not selected, so the next key adds to it)
            term.keys("Tab", "Tab", "+more")
            shown = term.wait_for("draft+more")
            assert "draft+more" in shown.splitlines()[-3], shown  # in the prompt, above the footer
            term.keys("C-q")
            wait_gone(term)
        finally:
            term.kill()
    assert server.base_url in (tmp_path / "xdg" / "lis-tui" / "config.toml").read_text()
