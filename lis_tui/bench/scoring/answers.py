r"""Pulling the answer out of text: numbers, `\boxed{}`, multiple-choice letters, `ANSWER:` lines."""
from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"[-+−]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?")
_CHOICE_ALONE = re.compile(r"^\s*\(?([A-Za-z])\)?[.:)]?\s*$")
_CHOICE_SAID = re.compile(r"(?:answer|option|choice)\s*(?:is|:)?\s*[:\-]?\s*\(?\**([A-Za-z])\b\)?",
                          re.IGNORECASE)
_ANSWER_START = re.compile(r"^[ \t]*\**[ \t]*(?:final[ \t]+)?answer[ \t]*\**[ \t]*:[ \t]*\**",
                           re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```$", re.DOTALL)


def parse_number(text: str, last: bool = False) -> Fraction | None:
    """The number `text` is (or, with `last`, the last number in it), exactly; None if none.

    Accepts 1,234,567  1_000  -3.5  2.5e-3  7/8  and a trailing %, which is left as it is.
    """
    text = text.strip().rstrip(".").replace("−", "-").replace("\\$", "").replace("$", "")
    whole = _to_fraction(text)
    if whole is not None or not last:
        return whole
    found = _NUMBER.findall(text)
    return _to_fraction(found[-1]) if found else None


def _to_fraction(text: str) -> Fraction | None:
    text = text.strip().rstrip("%").replace(",", "").replace("_", "").replace(" ", "")
    text = text.replace("−", "-")
    if not text or not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(/\d+)?", text):
        return None
    try:
        if "/" in text:
            top, bottom = text.split("/")
            return Fraction(top) / Fraction(bottom)
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def extract_boxed(text: str) -> str | None:
    r"""The contents of the last `\boxed{...}` (or `\fbox{...}`), braces balanced; None if none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip()
        i += 1
    return None


def extract_choice(text: str, choices: str = "ABCDEFGHIJ") -> str | None:
    """The one letter the answer picks; None when it picks none or several."""
    allowed = set(choices.upper())
    alone = _CHOICE_ALONE.match(text)
    if alone:
        letter = alone.group(1).upper()
        return letter if letter in allowed else None
    said = [m.upper() for m in _CHOICE_SAID.findall(text) if m.upper() in allowed]
    if said:
        return said[-1]
    letters = {m for m in re.findall(r"(?<![\w'])\(?([A-Z])\)?(?![\w'])", text) if m in allowed}
    for word in ("A", "I"):  # the article and the pronoun, not picks
        if len(letters) > 1 and re.search(rf"\b{word}\s+[a-z]", text):
            letters.discard(word)
    return letters.pop() if len(letters) == 1 else None


_LETTER_LIST = re.compile(r"\(?\**([A-Z])\**\)?(?:\s*(?:,|;|/|&|\band\b|\bor\b)?\s*\(?\**([A-Z])"
                          r"\**\)?)*(?![A-Za-z0-9])")
_SAID_START = re.compile(r"(?:answers?|options?|choices?)\s*(?:is|are|:)?\s*[:\-]?\s*\**",
                         re.IGNORECASE)


def extract_choices(text: str, choices: str = "ABCDEFGHIJ") -> set[str]:
    """Every letter the answer picks: "A or D", "A, D", "AD", "Answer: (B) and (C)" read as
    lists; a single pick as `extract_choice` reads it; empty when it picks none."""
    allowed = set(choices.upper())
    text = text.strip().rstrip(".")
    if re.fullmatch(r"[A-Z]{2,10}", text) and set(text) <= allowed:  # "AD", as MCQ keys are
        return set(text)
    whole = _letter_list(text, allowed, full=True)
    if whole:
        return whole
    said = [found for m in _SAID_START.finditer(text)
            if (found := _letter_list(text[m.end():], allowed, full=False))]
    if said:
        return said[-1]
    one = extract_choice(text, choices)
    return {one} if one else set()


def _letter_list(text: str, allowed: set[str], full: bool) -> set[str]:
    found = _LETTER_LIST.match(text)
    if not found or (full and found.end() != len(text)):
        return set()
    letters = set(re.findall(r"(?<![A-Za-z])[A-Z](?![A-Za-z])", found.group(0)))
    return letters if letters and letters <= allowed else set()


def final_answer(reply: str) -> str:
    """What follows the last `ANSWER:` of a reply (lines after it too, a code fence taken off),
    or the whole reply when there is none."""
    found = list(_ANSWER_START.finditer(reply))
    if not found:
        return reply.strip()
    text = reply[found[-1].end():].strip()
    fenced = _FENCE.match(text)
    return (fenced.group(1) if fenced else text).strip()
