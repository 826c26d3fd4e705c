"""`lis-tui exec` and `lis-tui shell` in a real terminal (tmux) give it back as it found it (issue 35, item 7): a
sandboxed program that wipes the screen and the scrollback, then sets every mode it can and exits
without a word, leaves the user's screen, scrollback and terminal modes as they were."""
from __future__ import annotations

import os
import shlex
import shutil

import pytest
from test_tmux import Tmux, lis_tui_command

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
MODES = ("mouse_any_flag", "mouse_sgr_flag", "alternate_on", "cursor_flag", "keypad_flag", "keypad_cursor_flag",
         "insert_flag", "origin_flag", "wrap_flag", "scroll_region_upper", "scroll_region_lower")
# On the main screen: clear it and its scrollback, home the cursor, set a scroll region, scroll;
# then the alternate screen, mouse reporting (SGR), bracketed paste, a hidden cursor, the keypad and
# cursor keys in application mode, insert and origin mode, no autowrap, the kitty keyboard flags.
WIPE = r"\033[2J\033[3J\033[H\033[1;5r\033[3S" + "FAKE PROMPT$ "
MODE_SET = r"\033[?1049h\033[?1000h\033[?1006h\033[?2004h\033[?25l\033=\033[?1h\033[4h\033[?6h\033[?7l\033[>1u"


def _modes(term: Tmux) -> str:
    return term.tmux("display-message", "-p", "-t", "t", " ".join(f"#{{{m}}}" for m in MODES)).strip()


@pytest.mark.parametrize("how", ["exec", "shell"])
def test_exec_and_shell_give_the_terminal_back_as_they_found_it(tmp_path, how):
    printf = ["printf", WIPE + MODE_SET]
    argv = ["exec", "--", *printf] if how == "exec" else ["shell"]
    script = f"seq 1 60; echo BEFORE; read go; {lis_tui_command(tmp_path, *argv, output_dir=False)}; echo; " \
             "echo AFTER; exec cat -v"
    term = Tmux(f"lis-{how}-{os.getpid()}")
    try:
        term.start(f"sh -c {shlex.quote(script)}", width=100, height=30)
        term.wait_for("BEFORE")
        before = _modes(term)
        term.keys("Enter")
        if how == "shell":
            term.wait_for("(lis-sandbox)")
            term.keys(f"{shlex.join(printf)}; exit", "Enter")
        shown = term.wait_for("AFTER")
        after = _modes(term)
        history = term.tmux("capture-pane", "-p", "-t", "t", "-S", "-")
        term.tmux("set-buffer", "pasted")
        term.tmux("paste-buffer", "-p", "-t", "t")  # bracketed only if the program in the pane asked for it
        term.keys("Enter")
        pasted = term.wait_for("pasted")
    finally:
        term.kill()
    assert after == before, dict(zip(MODES, zip(before.split(), after.split())))
    assert "BEFORE" in shown and "FAKE PROMPT$" in shown, shown  # the screen was neither cleared nor scrolled
    assert {"1", "30", "60"} <= set(history.split()), history  # nor the scrollback erased
    assert "[200~" not in pasted and "pasted" in pasted, pasted
