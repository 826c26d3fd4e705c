"""`safe_terminal_text`: what it makes visible, what it leaves alone."""

from fakes.hostile import HOSTILE, SHOWN, raw_in
from tools.terminal_text import safe_terminal_text


def test_every_control_character_is_shown_as_an_escape():
    shown = safe_terminal_text(HOSTILE)
    assert raw_in(shown) == [] and shown == "".join(SHOWN[:5]) + " " + SHOWN[5]
    every = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
    assert safe_terminal_text(every) == "".join(
        c if c in "\t\n" else f"\\x{ord(c):02x}" for c in every)
    assert safe_terminal_text("a\rb\bc") == "a\\x0db\\x08c"  # nothing is overwritten


def test_bidi_overrides_and_isolates_and_lone_surrogates_are_shown():
    bidi = "".join(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
    assert safe_terminal_text(bidi) == "".join(f"\\u{ord(c):04x}" for c in bidi)
    name = b"n\x9b.txt".decode("utf-8", "surrogateescape")  # a file name that is not UTF-8
    assert safe_terminal_text(name) == "n\\udc9b.txt"


def test_ordinary_text_passes_unchanged():
    """Backslashes stay single, right-to-left prose and its marks pass, markup is left as text
    (not reading it as markup is the TUI's part)."""
    for text in ("", "plain", "tab\tand\nnewline", r"C:\dir \boxed{x} \x1b as typed",
                 "עברית \u200f العربية", "日本語 ✔ ∑ émoji 🙂", "[bold]x[/]"):
        assert safe_terminal_text(text) == text
