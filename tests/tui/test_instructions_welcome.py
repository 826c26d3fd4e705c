"""The welcome names the AGENTS.md files the model will get (issue 36 item 3), in a real terminal."""

import os
import shutil

import pytest

from fakes.hostile import TITLE
from test_tmux import Tmux, lis_tui_command, wait_gone

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_the_welcome_names_the_instructions_read_and_the_flag_leaves_them_out(tmp_path, size):
    work = tmp_path / f"proj{TITLE}"  # a cloned repository's name may carry escapes: never shown raw
    work.mkdir()
    (work / "AGENTS.md").write_text("Use tabs.\n")
    (tmp_path / "xdg" / "lis-tui").mkdir(parents=True)
    (tmp_path / "xdg" / "lis-tui" / "AGENTS.md").write_text("Be brief.\n")
    for flags, named in (((), True), (("--no-project-instructions",), False)):
        term = Tmux(f"lis-instr-{os.getpid()}-{size[0]}-{named}")
        try:
            term.start(lis_tui_command(tmp_path, "tui", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                                       "--workspace", str(work), *flags), width=size[0], height=size[1])
            shown = term.wait_for("Type a task", "Network")
            assert ("Instructions" in shown) is named, shown
            if named:
                flat = " ".join(line.strip(" █") for line in shown.splitlines())  # █: the welcome's bar
                assert "Instructions  read" in flat and "AGENTS.md (project)" in flat, shown
            assert "pwned" not in term.title() and "\x1b" not in shown
            term.keys("C-q")
            wait_gone(term)
        finally:
            term.kill()
