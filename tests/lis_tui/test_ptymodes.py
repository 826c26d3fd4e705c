"""The relay's screen guard, byte by byte: what a sandboxed program may not do to the user's screen,
and what gives the terminal's modes back when it ends, fed whole and in every split."""
from __future__ import annotations

import pytest

from lis_tui.app.ptymodes import HELD, ScreenGuard

ESC = b"\x1b"
CSI = ESC + b"["
ALWAYS_DROPPED = {
    "erase the scrollback": CSI + b"3J",
    "full reset": ESC + b"c",
    "alignment test": ESC + b"#8",
    "132 columns (clears)": CSI + b"?3h",
    "bracketed paste on": CSI + b"?2004h",
    "bracketed paste off": CSI + b"?2004l",
    "bracketed paste among others": CSI + b"?1000;2004h",
    "resize the window": CSI + b"8;100;300t",
    "report the title as input": CSI + b"21t",
    "restore saved private modes": CSI + b"?2004r",
    "8-bit CSI": b"\x9b3J",
    "leading zeros": CSI + b"003J",
    "bracketed paste, leading zeros": CSI + b"?02004h",
    "a control inside (run by the terminal, which goes on with the sequence)": CSI + b"3\rJ",
    "a full reset with a control inside": ESC + b"\x00c",
    "UTF-8 C1 CSI": b"\xc2\x9b3J",
}
MAIN_SCREEN_DROPPED = {
    "clear": CSI + b"2J",
    "clear, leading zeros": CSI + b"0;02J",
    "clear, a newline inside": CSI + b"2\nJ",
    "erase above": CSI + b"1J",
    "home": CSI + b"H",
    "move anywhere": CSI + b"5;10H",
    "move anywhere (HVP)": CSI + b"5;10f",
    "to a row": CSI + b"3d",
    "scroll region": CSI + b"1;5r",
    "scroll up": CSI + b"3S",
    "scroll down": CSI + b"T",
}
PASSES = (b"plain \xc3\xa9t\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80 \xff\xfe " + CSI + b"1;31mred" + CSI + b"0m\r"
          + CSI + b"K" + CSI + b"2A" + CSI + b"J" + CSI + b"10G" + ESC + b"7" + ESC + b"8" + b"done\r\n")


def fed(data: bytes, cuts=(), guard: ScreenGuard | None = None) -> bytes:
    guard = guard or ScreenGuard()
    out, last = b"", 0
    for cut in (*cuts, len(data)):
        out += guard.feed(data[last:cut])
        last = cut
    return out


def every_split(data: bytes) -> list[tuple[int, ...]]:
    return [()] + [(i,) for i in range(1, len(data))] + [tuple(range(1, len(data)))]


@pytest.mark.parametrize("name", ALWAYS_DROPPED)
def test_what_no_program_needs_is_dropped_on_either_screen_in_every_split(name):
    for prefix in (b"", CSI + b"?1049h"):
        data = prefix + b"a" + ALWAYS_DROPPED[name] + b"b"
        for cuts in every_split(data):
            assert fed(data, cuts) == prefix + b"ab", (name, prefix, cuts)


@pytest.mark.parametrize("name", MAIN_SCREEN_DROPPED)
def test_what_clears_or_moves_the_main_screen_is_dropped_there_and_passes_on_the_alternate(name):
    data = b"a" + MAIN_SCREEN_DROPPED[name] + b"b"
    for cuts in every_split(data):
        assert fed(data, cuts) == b"ab", (name, cuts)
    drawn = CSI + b"?1049h" + data + CSI + b"?1049l" + data
    assert fed(drawn) == CSI + b"?1049h" + data + CSI + b"?1049l" + b"ab"


def test_text_and_what_draws_a_line_pass_unchanged_in_every_split():
    for cuts in every_split(PASSES):
        assert fed(PASSES, cuts) == PASSES, cuts
    guard = ScreenGuard()
    fed(PASSES, guard=guard)
    assert guard.restore() == CSI + b"m"  # the colours it set


def test_the_modes_a_program_leaves_set_are_given_back():
    guard = ScreenGuard()
    fed(CSI + b"?1000;1006h" + CSI + b"?1049h" + CSI + b"?25l" + CSI + b"?7l" + CSI + b"?2026h" + ESC + b"="
        + CSI + b"4h" + CSI + b"2 q" + ESC + b"(0" + CSI + b">4;1m" + CSI + b"3;20r", guard=guard)
    assert guard.restore() == (ESC + b"7" + CSI + b"r" + ESC + b"8" + CSI + b"?1049l"  # region, then the screen
                               + CSI + b"?1000l" + CSI + b"?1006l" + CSI + b"?2026l" + CSI + b"?25h" + CSI + b"?7h"
                               + CSI + b"4l" + ESC + b">" + CSI + b"0 q" + ESC + b"(B\x0f" + CSI + b">4m")


def test_modes_a_program_put_back_itself_are_left_alone():
    guard = ScreenGuard()
    fed(CSI + b"?1049h" + CSI + b"?1000h" + CSI + b"?25l" + CSI + b"?25h" + CSI + b"?1000l" + CSI + b"?1049l",
        guard=guard)
    assert guard.restore() == b""


def test_kitty_keyboard_flags_are_popped_per_screen_and_the_users_own_never():
    guard = ScreenGuard()
    out = fed(CSI + b"=5u" + CSI + b"<u" + CSI + b">1u" + CSI + b"=3u" + CSI + b"<3u"  # the user's: dropped
              + CSI + b"?1049h" + CSI + b">1u" + CSI + b">1u" + CSI + b"?1049l", guard=guard)
    # leaving the alternate screen pops its two first: its stack would greet the next program there
    assert out == (CSI + b">1u" + CSI + b"=3u" + CSI + b"?1049h" + CSI + b">1u" + CSI + b">1u"
                   + CSI + b"<2u" + CSI + b"?1049l")
    assert guard.restore() == CSI + b"<1u"


def test_a_sequence_too_long_for_any_terminal_is_dropped_whole_across_reads():
    data = b"a" + CSI + b"1" * (HELD + 10) + b"J" + b"b"
    for cuts in ((), (5,), (HELD // 2, HELD + 5), (HELD + 11,)):
        assert fed(data, cuts) == b"ab", cuts
