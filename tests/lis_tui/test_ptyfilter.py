"""The relay's escape-string filter, byte by byte: what a sandboxed program may not send to the
user's terminal, fed whole and in every split, and what must pass unchanged."""
from __future__ import annotations

import random
import re

import pytest

from lis_tui.app.ptyfilter import EscapeStringFilter

ESC = b"\x1b"
ATTACKS = {
    "clipboard, BEL": ESC + b"]52;c;cm0gLXJmIH4K\x07",
    "clipboard, ST": ESC + b"]52;c;cm0gLXJmIH4K" + ESC + b"\\",
    "title": ESC + b"]0;pwned\x07",
    "window title": ESC + b"]2;pwned" + ESC + b"\\",
    "cwd": ESC + b"]7;file:///etc\x07",
    "hyperlink": ESC + b"]8;;file:///etc/passwd\x07",
    "palette": ESC + b"]4;1;rgb:00/00/00\x07",
    "notification": ESC + b"]777;notify;hi;there\x07",
    "tmux passthrough": ESC + b"Ptmux;" + ESC + ESC + b"]52;c;eA==\x07" + ESC + b"\\",
    "kitty graphics": ESC + b"_Gf=100,t=f;L2V0Yy9wYXNzd2Q=" + ESC + b"\\",
    "PM": ESC + b"^secret" + ESC + b"\\",
    "SOS": ESC + b"Xsecret" + ESC + b"\\",
    "UTF-8 C1 OSC": b"\xc2\x9d52;c;eA==\xc2\x9c",
    "8-bit C1 OSC": b"\x9d2;pwned\x9c",
    "8-bit DCS": b"\x90tmux;x\x9c",
    "cancelled": ESC + b"]52;c;eA==\x18",
}
SCREEN = (b"plain \xc3\xa9t\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80 " + ESC + b"[1;31mred" + ESC + b"[0m"
          + ESC + b"[?1049h" + ESC + b"[H" + ESC + b"[2J" + ESC + b"(B" + ESC + b"=" + ESC + b"7" + b"\r\n")


def filtered(data: bytes, cuts=()) -> bytes:
    f = EscapeStringFilter()
    out, last = b"", 0
    for cut in (*cuts, len(data)):
        out += f.feed(data[last:cut])
        last = cut
    return out + f.flush()


@pytest.mark.parametrize("name", ATTACKS)
def test_each_string_is_dropped_whole_and_the_text_around_it_kept(name):
    data = b"before " + ATTACKS[name] + b" after"
    assert filtered(data) == b"before  after"
    for cut in range(1, len(data)):  # split between two reads anywhere
        assert filtered(data, (cut,)) == b"before  after", (name, cut)


def test_a_screen_of_control_sequences_and_utf8_passes_unchanged_in_any_split():
    assert filtered(SCREEN) == SCREEN
    for cut in range(1, len(SCREEN)):
        assert filtered(SCREEN, (cut,)) == SCREEN, cut
    assert filtered(SCREEN, range(1, len(SCREEN))) == SCREEN  # a byte at a time


def test_a_string_never_ended_drops_all_it_carries_and_holds_no_memory():
    f = EscapeStringFilter()
    assert f.feed(b"x" + ESC + b"]52;c;") == b"x"
    for _ in range(100):
        assert f.feed(b"A" * 65536) == b""
    assert f.feed(b"\x07back") == b"back"
    assert f.dropped == 1 and f.flush() == b""


def test_an_escape_inside_a_string_ends_it_and_starts_what_follows():
    assert filtered(ESC + b"]0;t" + ESC + b"[1mbold") == ESC + b"[1mbold"
    assert filtered(ESC + b"]0;t" + ESC + b"]52;c;eA==\x07ok") == b"ok"


def test_a_lone_escape_or_split_character_at_the_end_is_passed_on_at_the_close():
    f = EscapeStringFilter()
    assert f.feed(b"a" + ESC) == b"a"
    assert f.flush() == ESC
    assert filtered(b"\xe2\x86") == b"\xe2\x86"
    assert filtered(b"bad \xff \x80 bytes") == b"bad \xff \x80 bytes"  # not UTF-8, not strings


def test_no_soup_of_pieces_in_any_split_gets_a_string_to_the_terminal():
    """Dropping must not splice one: ESC + a dropped string + "]52;..." would be OSC 52."""
    pieces = [ESC, b"]", b"P", b"_", b"\\", b"\x07", b"\x18", b"\xc2", b"\x9d", b"\x9c", b"\x90",
              b"\xe2", b"\x80", b"52;c;eA==", b"0;t", b"a", b"[1m", b"\xf0\x9f\x98\x80"]
    string_start = re.compile("\x1b[\\]PX^_]|[\x90\x98\x9d-\x9f\udc90\udc98\udc9d-\udc9f]")
    rng = random.Random(24)
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 16)))
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(0, 4))))
        out = filtered(data, cuts).decode("utf-8", "surrogateescape")
        assert not string_start.search(out), (data, cuts, out)
