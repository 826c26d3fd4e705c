"""Give the user's terminal back as a relayed program found it, and keep it from wiping the screen.

A program sets terminal modes that outlive it: mouse reporting, the alternate screen, a hidden
cursor, the kitty keyboard protocol's flags, synchronized output (which freezes the display). One
that dies, or is hostile, leaves them set, and the user's shell then gets mouse reports for
keystrokes. So `ScreenGuard` follows the sequences that pass (after ptyfilter's escape strings
are gone) and, at the end, `restore()` undoes what the program left changed: the scroll region,
the kitty keyboard flags it pushed (each screen has its own stack), the alternate screen, every
DEC private mode it set back to the terminal's default, the cursor's shape, the character set and
the colours.

Some sequences never pass: bracketed paste's (mode 2004), whose state before the program we cannot
know (the terminal's own is kept, so it is as it was after); erasing the scrollback (CSI 3J), a full
reset (ESC c), the screen alignment test (ESC # 8), 80/132 columns (mode 3, which clears) and window
operations (CSI t: resizing, iconifying, reporting the title as input). And on the main screen,
where the user's own output is, those that clear or move it all: erasing above or all of it
(CSI 1J, 2J), placing the cursor anywhere on it (CSI H, f, d), scroll regions and scrolling (CSI r,
S, T). A full-screen program draws on the alternate screen, where all of them pass.

The output is read as UTF-8 (bytes that are not UTF-8 pass through as they came); CSI as one C1
byte (8-bit, or UTF-8-encoded) is read as ESC [, as terminals do, and so are the controls a
terminal runs inside a sequence before going on with it (CSI 2 LF J). A sequence split over two
reads is held (at most HELD characters), then judged whole; a longer one, which no terminal takes,
is dropped whole. `clear` and Ctrl-L in a relayed shell therefore clear nothing: the main screen is
the user's.
"""
from __future__ import annotations

import codecs
import re

HELD = 256
_CSI = "\x1b\\[|[\x9b\udc9b]"
# Inside a sequence a terminal runs C0 controls and goes on with it (CSI 2 LF J clears the screen),
# ignores DEL, and gives up at CAN, SUB or ESC: what may come between its bytes.
_C0 = "\x00-\x17\x19\x1c-\x1f\x7f"
# A whole sequence: CSI (parameters, intermediates, final) or another ESC one (intermediates, final).
_SEQUENCE = re.compile(f"(?:{_CSI})([\x30-\x3f{_C0}]*)([\x20-\x2f{_C0}]*)([\x40-\x7e])"
                       f"|\x1b([\x20-\x2f{_C0}]*)([\x30-\x7e])")
_UNFINISHED = re.compile(f"(?:(?:{_CSI})[\x20-\x3f{_C0}]*|\x1b[\x20-\x2f{_C0}]*)\\Z")
_REST = re.compile(f"[\x20-\x3f{_C0}]*([\x40-\x7e])?")  # the rest of an overlong sequence
_CONTROLS = re.compile(f"[{_C0}]")
_ALT_SCREEN = {"47", "1047", "1049"}
# Private modes whose default is set (the rest default to reset): cursor shown, autowrap.
_ON_BY_DEFAULT = {"25", "7"}
_NEVER_MODES = {"2004", "3"}
_MAIN_SCREEN_ONLY_DROPPED = {"H", "f", "d", "r", "S", "T"}


class ScreenGuard:
    """`feed(output)` returns what may reach the terminal; `restore()` what gives it back."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._held = ""
        self._skipping = False  # inside a sequence longer than HELD, dropped to its final byte
        self._alt: str | None = None  # the alternate-screen mode in force, if any
        self._modes: dict[str, bool] = {}  # private modes the program changed: set or reset
        self._pushed = {False: 0, True: 0}  # kitty keyboard flags pushed, per screen (alternate: True)
        self._region = self._shape = self._sgr = self._charset = self._insert = self._keypad = False
        self._modify_keys = False
        self._before = ""  # what goes out before the sequence just judged
        self.dropped = 0
        """How many sequences were dropped."""

    def feed(self, data: bytes) -> bytes:
        text = self._held + self._decoder.decode(data)
        self._held = ""
        if self._skipping:
            rest = _REST.match(text)
            self._skipping = rest.group(1) is None
            text = text[rest.end():]
        tail = _UNFINISHED.search(text)
        if tail is not None and tail.start() < len(text):
            if len(text) - tail.start() > HELD:  # no terminal takes such a sequence: dropped whole
                self._skipping = True
                self.dropped += 1
            else:
                self._held = text[tail.start():]
            text = text[:tail.start()]
        return self._judge(text)

    def restore(self) -> bytes:
        """What undoes every mode the program left changed (an unfinished sequence it held goes unsent)."""
        out = []
        if self._region:  # DECSTBM homes the cursor: saved and restored around it
            out.append("\x1b7\x1b[r\x1b8")
        if self._alt is not None:
            if self._pushed[True]:
                out.append(f"\x1b[<{self._pushed[True]}u")
            out.append(f"\x1b[?{self._alt}l")
        if self._pushed[False]:
            out.append(f"\x1b[<{self._pushed[False]}u")
        changed = sorted(mode for mode, on in self._modes.items() if on != (mode in _ON_BY_DEFAULT))
        out += [f"\x1b[?{mode}{'h' if mode in _ON_BY_DEFAULT else 'l'}" for mode in changed]
        out += ["\x1b[4l"] * self._insert + ["\x1b>"] * self._keypad + ["\x1b[0 q"] * self._shape
        out += ["\x1b(B\x0f"] * self._charset + ["\x1b[m"] * self._sgr + ["\x1b[>4m"] * self._modify_keys
        return "".join(out).encode()

    def _judge(self, text: str) -> bytes:
        out, pos = [], 0
        for found in _SEQUENCE.finditer(text):
            out.append(text[pos:found.start()])
            pos = found.end()
            parts = [_CONTROLS.sub("", part or "") for part in found.group(1, 2, 3, 4, 5)]
            keep = len(found.group()) <= HELD and (self._csi(*parts[:3]) if found.group(3) else self._esc(*parts[3:]))
            if keep:
                out += [self._before, found.group()]
                self._before = ""
            else:
                self.dropped += 1
        out.append(text[pos:])
        joined = "".join(out)
        self._charset = self._charset or "\x0e" in joined  # SO: the G1 set, until SI
        return joined.encode("utf-8", "surrogateescape")

    def _esc(self, between: str, final: str) -> bool:
        if (between, final) in (("", "c"), ("#", "8")):  # full reset; screen alignment (fills it with E)
            return False
        if between in ("(", ")", "*", "+"):
            self._charset = True
        elif not between and final in "=>":
            self._keypad = final == "="
        return True

    def _csi(self, params: str, between: str, final: str) -> bool:
        if between == " " and final == "q":
            self._shape = True
            return True
        if between:
            return True
        if params.startswith("?") and final in "hlsr":  # set, reset; save or restore (XTSAVE, XTRESTORE)
            modes = [str(n) for n in map(_number, params[1:].split(";")) if n > 0]
            return final in "hl" and self._private(modes, final == "h")
        erased = {_number(p) for p in params.split(";")} if final == "J" else set()  # 0 (or none): below
        if final == "t" or 3 in erased:
            return False
        if self._alt is None and (final in _MAIN_SCREEN_ONLY_DROPPED or erased & {1, 2}):
            return False
        if final == "u" and params[:1] in ("<", ">", "="):
            return self._kitty(params)
        if final == "r":
            self._region = True
        elif final == "m" and params.startswith(">"):  # xterm's modifyOtherKeys
            self._modify_keys = True
        elif final == "m":
            self._sgr = True
        elif final in "hl" and 4 in {_number(p) for p in params.split(";")}:
            self._insert = final == "h"
        return True

    def _private(self, modes: list[str], on: bool) -> bool:
        if any(mode in _NEVER_MODES for mode in modes):
            return False
        for mode in modes:
            if mode in _ALT_SCREEN:
                if not on and self._pushed[True]:  # the alternate screen keeps its stack: popped first
                    self._before, self._pushed[True] = f"\x1b[<{self._pushed[True]}u", 0
                self._alt = mode if on else None
            else:
                self._modes[mode] = on
        return True

    def _kitty(self, params: str) -> bool:
        """Kitty keyboard flags: a push, a pop, or a change of the flags on top of the stack,
        which is the user's own unless the program pushed some first (then dropped)."""
        screen = self._alt is not None
        if params[0] == ">":
            self._pushed[screen] += 1
        elif params[0] == "<":  # never past what the program pushed: the rest are the user's
            count = int(params[1:]) if params[1:].isdigit() else 1
            if count > self._pushed[screen]:
                return False
            self._pushed[screen] -= count
        elif not self._pushed[screen]:
            return False
        return True


def _number(param: str) -> int:
    """A parameter as a terminal reads it: leading zeros and all ("0002" is 2); -1 if not a number."""
    return int(param) if param.isdigit() else 0 if not param else -1
