"""Rewards: how an answer is scored against a task's ground truth, 1.0 right, 0.0 wrong.

A task's `reward` is a name (`"numeric"`), a name and one parameter (`"numeric:0.01"`) or a
table (`{"type": "numeric", "tolerance": 0.01}`). A list ground truth accepts any of its items.
"""
from __future__ import annotations

import functools
import json
import re
import string
from fractions import Fraction
from typing import Any, Callable

from lis_tui.bench.scoring.answers import extract_boxed, extract_choices, parse_number
from tools import loads_model_json


class RewardError(ValueError):
    """A reward that cannot be used; the message says which are known."""


def exact(answer: str, truth: str, **_: Any) -> float:
    """The answer is the ground truth character for character (outer blanks and CRLF aside)."""
    return float(_lines(answer) == _lines(truth))


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").strip()


def normalize(text: str) -> str:
    """Lower case, punctuation out (but not inside numbers: 3.14 stays), whitespace collapsed."""
    text = re.sub(r"(?<!\d)[" + re.escape(string.punctuation) + r"]|[" +
                  re.escape(string.punctuation) + r"](?!\d)", " ", text.lower())
    return " ".join(text.split())


def normalized(answer: str, truth: str, **_: Any) -> float:
    """Equal after `normalize` (case, whitespace and punctuation do not count)."""
    return float(normalize(answer) == normalize(truth))


def numeric(answer: str, truth: str, tolerance: float = 1e-6, abs_tolerance: float = 0.0,
            **_: Any) -> float:
    """The answer's number (the last one in it) is within `tolerance` (relative) of the truth.

    Exact for integers of any size and for fractions; `tolerance = 0` asks for equality.
    """
    got, want = parse_number(answer, last=True), parse_number(truth)
    if got is None or want is None:
        return 0.0
    allowed = max(Fraction(str(abs_tolerance)), Fraction(str(tolerance)) * abs(want))
    return float(abs(got - want) <= allowed)


def choice(answer: str, truth: str, choices: str = "ABCDEFGHIJ", **_: Any) -> float:
    """Multiple-choice letters: "B", "(B)", "Answer: B", "A or D", "AD". One right letter:
    exactly that letter (two picks score 0). Several ("AD", "A, D"): F1 over the letters."""
    want = choice_letters(truth, choices)
    got = extract_choices(answer, choices)
    if len(want) <= 1:
        return float(bool(want) and got == want)
    return letters_f1(got, want)


def choice_letters(truth: str, choices: str = "ABCDEFGHIJ") -> set[str]:
    """The letters of a choice ground truth: "B", "(B)", "AD", "A, D", '["A", "D"]'."""
    allowed = set(choices.upper())
    words = re.findall(r"[A-Za-z]+", truth)
    joined = "".join(words).upper()
    if words and all(w.isupper() for w in words) and set(joined) <= allowed:
        return set(joined)
    first = re.match(r"\s*\(?([A-Za-z])\b", truth)  # "B) SO2": the key's own letter
    return {first.group(1).upper()} & allowed if first else set()


def letters_f1(got: set[str], want: set[str]) -> float:
    """F1 of the picked letters against the right ones (the paper's multiple-choice score)."""
    hit = len(got & want)
    if not hit:
        return 0.0
    precision, recall = hit / len(got), hit / len(want)
    return 2 * precision * recall / (precision + recall)


def boxed(answer: str, truth: str, **_: Any) -> float:
    r"""The last \boxed{} of the answer (the whole answer when it has none, as the paper's
    scorer does) equals the truth: math-verify when installed, else after light LaTeX
    normalisation, numbers compared exactly."""
    got = extract_boxed(answer)
    if got is None:
        got = answer.strip().strip("$").strip()
    want = extract_boxed(truth) or truth
    if not got:
        return 0.0
    verified = _math_verify(got, want)
    if verified is not None:
        return float(verified)
    return float(_latex_equal(got, want))


def contains(answer: str, truth: str, **_: Any) -> float:
    """The normalised truth appears in the normalised answer as whole words."""
    want = normalize(truth)
    return float(bool(want) and f" {want} " in f" {normalize(answer)} ")


def json_equal(answer: str, truth: str, **_: Any) -> float:
    """The answer parses as JSON and equals the truth's JSON (spacing and key order free)."""
    try:
        return float(loads_model_json(answer) == json.loads(truth))
    except ValueError:
        return 0.0


REWARDS: dict[str, Callable[..., float]] = {
    "exact": exact, "normalized": normalized, "numeric": numeric, "choice": choice,
    "boxed": boxed, "contains": contains, "json": json_equal,
}
REWARD_NAMES = (*REWARDS, "judge", "paper")
"""Every reward; `judge` needs a judge model (`lis_tui.bench.scoring.judge.Judge`); `paper:SUITE` is a
paper suite's scorer (`lis_tui.bench.paper`)."""
_FIRST_PARAM = {"numeric": "tolerance", "choice": "choices", "judge": "prompt", "paper": "suite"}


def parse_reward(spec: Any) -> tuple[str, dict[str, Any]]:
    """(name, parameters) of a reward spec; RewardError if unknown."""
    spec = spec or "normalized"
    if isinstance(spec, dict):
        params = dict(spec)
        name = str(params.pop("type", ""))
    else:
        name, _, param = str(spec).partition(":")
        params = {_FIRST_PARAM.get(name, "value"): _number_or_text(param)} if param else {}
    if name not in REWARD_NAMES:
        raise RewardError(f"unknown reward {name!r}; the rewards are {', '.join(REWARD_NAMES)} "
                          '(e.g. "numeric", "numeric:0.01" or {"type": "numeric", "tolerance": 0.01})')
    return name, params


MATH_REWARDS = {"boxed"}
"""Rewards that compare mathematics: weaker without math-verify (a note in the summary says so)."""


def math_verify_missing() -> bool:
    """True when math-verify is not installed (`pip install 'lis-tui[paper]'`)."""
    import importlib.util  # noqa: PLC0415

    return importlib.util.find_spec("math_verify") is None


def as_text(truth: Any) -> str:
    """A ground truth as the text a reward compares (JSON for anything not a string)."""
    return truth if isinstance(truth, str) else json.dumps(truth)


def _number_or_text(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _math_verify(got: str, want: str) -> bool | None:
    """math-verify's verdict, or None when it is not installed or cannot parse either side."""
    try:
        from math_verify import parse, verify  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return None
    _quiet_timeout_notice()
    try:
        # Its default timeouts use SIGALRM, which only the main thread may set: bench scores
        # in worker threads, where they would raise and every verdict would be lost.
        gold = parse(f"${want}$", parsing_timeout=None)
        pred = parse(f"${got}$", parsing_timeout=None)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception:  # math-verify raises on odd LaTeX; fall back to our comparison
        return None


@functools.cache
def _quiet_timeout_notice() -> None:
    """math-verify warns, once per module and thread race (four times into a bench's output),
    that its timeouts are off: they are, on purpose (below); a person can do nothing about it."""
    import logging  # noqa: PLC0415

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(lambda record: not record.getMessage().startswith("Timeout is disabled"))


def _latex_equal(got: str, want: str) -> bool:
    a, b = _latex_plain(got), _latex_plain(want)
    if a == b:
        return True
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and x == y


def _latex_plain(text: str) -> str:
    text = re.sub(r"\\(left|right|displaystyle|!|,|;|\s)", "", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("$", "")
    text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"^\((-?\d+)\)/\((\d+)\)$", r"\1/\2", "".join(text.split()))
    return text.rstrip(".").lower()
