"""Drop the escape strings a sandboxed program could use to set state of the user's terminal.

A relayed program draws its screen with control sequences (CSI: cursor, colours, modes), and
none of that outlives the screen. Escape *strings* are another matter: OSC 52 writes the
clipboard, OSC 0/1/2 the window title, OSC 7 the working directory new tabs open in, OSC 8 a
link whose text need not be its target (and a `file://` target is a host path), OSC 4/10-19 the
palette, OSC 9/777 notifications; DCS carries tmux and screen passthrough (a sequence for the
terminal outside tmux), APC kitty's graphics (which can name host files), PM and SOS nothing
anyone needs. No full-screen program needs one to draw (`less`, `vi`, `top` work without: a
query such as vim's OSC 11 just gets no answer), so every one is dropped, whole: OSC, DCS, SOS,
PM and APC, introduced by ESC, by a UTF-8-encoded C1 control or by a stray 8-bit one, to ST,
CAN, SUB or the next ESC (but ESC ESC, which tmux's passthrough reads as one ESC of its
content), and OSC to BEL too. The text around them passes unchanged.

The output is read as UTF-8 (bytes that are not UTF-8 pass through as they came), so a C1 byte
inside a longer character is text. The filter keeps its state across reads (a string split over
two reads is dropped whole, its bytes never kept) and holds back at most three bytes: an ESC or
an unfinished character at the end of a read.
"""
from __future__ import annotations

import codecs
import re

# Where a string may start: ESC and an introducer (OSC, DCS, SOS, PM, APC; an ESC before
# anything else is not matched), or a C1 introducer (U+0090, U+0098, U+009D, U+009E, U+009F),
# UTF-8-encoded or as a lone 8-bit byte (a surrogate escape here).
_C1 = "\x90\x98\x9d-\x9f\udc90\udc98\udc9d-\udc9f"
_START = re.compile(f"[\x1b{_C1}](?<!\x1b(?![\\]PX^_]))")
# Inside a string: where it may end (CAN, SUB, ESC, ST as C1; an OSC at BEL too, which ends no
# other string: xterm and tmux ignore it there).
_END = re.compile("[\x18\x1a\x1b\x9c\udc9c]")
_OSC_END = re.compile("[\x07\x18\x1a\x1b\x9c\udc9c]")
_OSC = ("]", "\x9d", "\udc9d")


class EscapeStringFilter:
    """`feed(output)` returns what may reach the terminal; `flush()` what was held at the end."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._esc = ""  # an ESC that ended a read
        self._in_string = False
        self._end = _END
        self.dropped = 0
        """How many strings were dropped (whole or begun)."""

    def feed(self, data: bytes) -> bytes:
        text = self._esc + self._decoder.decode(data)
        self._esc = ""
        if text.endswith("\x1b"):
            text, self._esc = text[:-1], "\x1b"
        return self._filter(text)

    def flush(self) -> bytes:
        text = self._esc + self._decoder.decode(b"", final=True)
        self._esc = ""
        return self._filter(text)

    def _filter(self, text: str) -> bytes:
        out = []
        pos = 0
        while pos < len(text):
            if self._in_string:
                pos = self._skip_string(text, pos)
                continue
            found = _START.search(text, pos)
            if found is None:
                out.append(text[pos:])
                break
            # ESCs right before a string go with it: after the string they would join what follows
            # ("ESC" + a dropped string + "]52;..." must not become OSC 52)
            out.append(text[pos:found.start()].rstrip("\x1b"))
            kind = text[found.start()]
            pos = found.end()
            if kind == "\x1b":
                kind = text[pos]
                pos += 1
            self._begin(kind)
        return "".join(out).encode("utf-8", "surrogateescape")

    def _begin(self, kind: str) -> None:
        self._in_string = True
        self._end = _OSC_END if kind in _OSC else _END
        self.dropped += 1

    def _skip_string(self, text: str, pos: int) -> int:
        found = self._end.search(text, pos)
        if found is None:
            return len(text)
        at = found.start()
        if text[at] != "\x1b":
            self._in_string = False
            return at + 1
        after = text[at + 1:at + 2] or self._esc  # a final ESC is held for the next read
        if after == "\x1b":  # ESC ESC: tmux's passthrough carries an ESC so
            if at + 1 == len(text):
                self._esc = ""
            return at + 2
        self._in_string = False
        return at + 2 if after == "\\" else at  # ST, or a new sequence to look at
