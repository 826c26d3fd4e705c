"""Text the model or the sandbox made, made safe to show on a terminal.

A terminal acts on what it is sent: ESC starts a sequence that can set the clipboard (OSC 52),
the window title (OSC 0), clear the screen or move the cursor; a C1 byte such as U+009B is a
CSI on its own; CR and BS overwrite what was shown; bidi overrides reorder what is read, so a
command can show one thing and do another ("Trojan Source"). Every place that shows such text to
a person (the `run` log, the TUI, replay, bench output) passes it through `safe_terminal_text`,
which shows each of these characters as a visible escape and never sends it.

The convention is Python's: `\\xHH` for C0, DEL and C1 (`\\x1b`, `\\x0d`, `\\x9b`) and `\\uHHHH`
for the rest (`\\u202e`, and lone surrogates left by decoding bytes that were not UTF-8). Tab and
newline pass. A backslash already in the text is left as it is: nothing reads the result back,
and doubling it would garble every regex, Windows path and LaTeX answer to guard an ambiguity
that cannot hurt.

The shell's own output for the model goes through `tools.shell_output.clean` first, which drops
escape sequences the way a terminal would render them (colours, redraws); this function is the
last step before a person's terminal, whatever the text went through before. `terminal_view` is
both steps in one, for text a program printed or wrote to a file (a command's output, the answer
file): it reads the way a terminal would show it, wherever it is shown.
"""
from __future__ import annotations

import re

CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f"
"""C0 but tab and newline (ESC and CR included), DEL, and C1, as a regex character class body."""
BIDI = "\u202a-\u202e\u2066-\u2069"
"""Bidi embeddings, overrides and isolates (LRE..RLO, LRI..PDI). The marks LRM, RLM and ALM
pass: they cannot reorder letters, and right-to-left prose uses them."""
_UNSAFE = re.compile(f"[{CONTROL}{BIDI}\ud800-\udfff]")


def safe_terminal_text(text: str) -> str:
    """`text` with every control character, bidi override or isolate and lone surrogate shown as
    a visible escape (`\\x1b`, `\\x9b`, `\\u202e`); tab and newline pass; nothing else changes."""
    if not _UNSAFE.search(text):  # the usual case: no copy
        return text
    return _UNSAFE.sub(_visible, text)


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_view(text: str) -> str:
    """`text` as a terminal would show it (escape sequences, overstrikes and carriage-return
    redraws done, not printed: `tools.shell_output.clean`, the model's view of a command's output),
    then made safe: for what a program printed or wrote, not for commands, names or prose."""
    from tools.shell_output import clean  # noqa: PLC0415 (that module's imports: not for every caller)

    return safe_terminal_text(clean(text))

