"""What a hostile model writes to take over the terminal that shows its words, and how a test
tells that none of it got through raw.

Each piece does something in a real terminal: OSC 52 sets the clipboard (to "Hacked"), OSC 0 the
window title, CSI 2J clears the screen, U+009B is a CSI on its own, U+202E turns the text after
it around; and Textual would read the markup as an action that quits the app.
"""

OSC52 = "\x1b]52;c;SGFja2Vk\x07"
TITLE = "\x1b]0;pwned-title\x07"
CLEAR = "\x1b[2J"
C1 = "\x9b31m"
BIDI = "\u202eevil\u202c"
MARKUP = "[@click=app.quit]x[/]"
HOSTILE = f"{OSC52}{TITLE}{CLEAR}{C1}{BIDI} {MARKUP}"

RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u202c")
"""None of these may reach a terminal."""
SHOWN = ("\\x1b]52;c;SGFja2Vk\\x07", "\\x1b]0;pwned-title\\x07", "\\x1b[2J", "\\x9b31m",
         "\\u202eevil\\u202c", MARKUP)
"""How HOSTILE reads once made safe: each piece visible, the markup as written."""


def raw_in(text: str) -> list[str]:
    """The raw control characters in `text` (an empty list is what a test wants)."""
    return [repr(c) for c in RAW if c in text]
