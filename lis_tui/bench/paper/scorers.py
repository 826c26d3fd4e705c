"""The suites' default scorers: what llm-in-sandbox 0.2.0's `benchmark/SUITE/reward.py` returns,
quirks included, in our own code (tests/lis_tui/test_paper_package.py checks them against the
package itself). Each is `(answer, row) -> float in [0, 1]`. A row the package's scorer crashes
on scores 0, as the package's runner records it, and `row_note` says so in the episode's record.
physics and long_context are graded by the judge (judging.py); `--suite-scorer lenient` keeps
lis-tui's earlier reading (lenient.py; docs/paper-suites.md lists the differences).
"""
from __future__ import annotations

import functools
import re
from typing import Any

from lis_tui.bench.paper import instructions

BOXED = "\\boxed{"
_ANSWER_JSON = re.compile(r'"answer"\s*:\s*"([A-Z])"', re.IGNORECASE)
_ANSWER_COLON = re.compile(r"answer\s*[:：]\s*([A-Z])\b", re.IGNORECASE)
_ANSWER_IS = re.compile(r"(?:answer|choice)\s+is\s+([A-Z])\b", re.IGNORECASE)
_LONE_LETTER = re.compile(r"\b([A-Z])\b")
PRETRAIN_DOMAINS = ("math", "physics", "chem", "biomed", "instruct_follow", "instruct_pretrain",
                    "long_context")
"""The `domain` prefixes instruct_pretrain's scorer routes; any other crashes it."""


def last_boxed(text: str) -> str:
    """The last `\\boxed{...}`'s content; the whole text when it has none or it is not closed."""
    begin = text.rfind(BOXED)
    if begin == -1:
        return text.strip()
    start = i = begin + len(BOXED)
    depth = 1
    while i < len(text) and depth > 0:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1].strip() if depth == 0 else text.strip()


def math(answer: str, row: Any) -> float:
    return _math(answer, row.ground_truth)


def _math(answer: str, truth: Any) -> float:
    """Both sides in `\\boxed{}`, through math-verify's `math_metric` settings (gold: LaTeX;
    prediction: expression or LaTeX), without its signal timeouts (bench scores in threads)."""
    if not isinstance(truth, str):
        return 0.0  # the package's "\\boxed{" + truth raises; its scorer returns 0
    from math_verify import parse, verify  # noqa: PLC0415 (the [paper] extra, checked at start)
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig  # noqa: PLC0415

    try:
        gold = parse(BOXED + truth + "}", (LatexExtractionConfig(),), parsing_timeout=None)
        if not gold:
            return 0.0  # math_metric raises "No gold targets found": the package scores 0
        got = parse(BOXED + last_boxed(answer) + "}",
                    (ExprExtractionConfig(), LatexExtractionConfig()), parsing_timeout=None)
        return 1.0 if verify(gold, got, 6, timeout_seconds=None) else 0.0
    except Exception:  # noqa: BLE001 (the package's scorer returns 0 on any error)
        return 0.0


def picked_letter(text: str) -> str:
    """The choice the package reads in an answer: `"answer": "X"`, `Answer: X`, `the answer is
    X`, a `\\boxed{}` starting with a letter, the last standalone capital, else the first
    character when it is a letter ("B, I think" picks the pronoun)."""
    if not text:
        return ""
    for pattern in (_ANSWER_JSON, _ANSWER_COLON, _ANSWER_IS):
        found = pattern.search(text)
        if found:
            return found.group(1).upper()
    boxed = last_boxed(text)
    if boxed != text.strip() and boxed and boxed[0].upper().isalpha():
        return boxed[0].upper()
    lone = _LONE_LETTER.findall(text.upper())
    if lone:
        return lone[-1]
    first = text.strip()[:1].upper()
    return first if first.isalpha() else ""


def letter(answer: str, row: Any) -> float:
    return _letter(answer, row.ground_truth)


def _letter(answer: str, truth: Any) -> float:
    """The whole answer, or the letter picked from it, equal to the key (case aside): exact,
    so a key of several letters ("AC") needs them all, in order."""
    if not isinstance(truth, str):
        return 0.0  # the package crashes on it (row_note); its runner records 0
    want = truth.strip().upper()
    if answer.strip().upper() == want:
        return 1.0
    return float(picked_letter(answer).strip().upper() == want)


def instruct_pretrain(answer: str, row: Any) -> float:
    """By `domain` first (math/physics: math; chem/biomed: letter; instruct_follow), then by
    `qa_type`: single choice as a letter; several (a comma in the key): F1 over the
    comma-separated answers, upper-cased; open-ended: math, else ROUGE-L F1."""
    truth = row.ground_truth
    if not answer or not truth:
        return 0.0
    if _pretrain_crash(row):
        return 0.0
    domain, answer, truth = row.domain.lower(), answer.strip(), truth.strip()
    if domain.startswith(("math", "physics")):
        return _math(answer, truth)
    if domain.startswith(("chem", "biomed")):
        return _letter(answer, truth)
    if domain.startswith("instruct_follow"):
        return instructions.followed_as_package(answer, truth)
    kind = question_type(row.extra.get("qa_type", "open_ended"), truth)
    if kind == "single":
        return _letter(answer, truth)
    if kind == "multiple":
        return _choices_f1(answer, truth)
    if _math(answer, truth) > 0:
        return 1.0
    return _rouge().score(truth, answer)["rougeL"].fmeasure


def question_type(qa_type: Any, truth: str) -> str:
    """single, multiple or open, as the package maps `qa_type`."""
    if not qa_type or "multiple choice" not in qa_type.lower():
        return "open"
    return "multiple" if "," in truth else "single"


def _choices_f1(answer: str, truth: str) -> float:
    got = {c.strip().upper() for c in answer.split(",") if c.strip()}
    want = {c.strip().upper() for c in truth.split(",") if c.strip()}
    if not got or not want:
        return 0.0
    hit = got & want
    precision, recall = len(hit) / len(got), len(hit) / len(want)
    if precision + recall == 0:
        return 0.0
    return 2 * (precision * recall) / (precision + recall)


@functools.cache
def _rouge() -> Any:
    from rouge_score import rouge_scorer  # noqa: PLC0415 (the [paper] extra, checked at start)

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def _pretrain_crash(row: Any) -> str:
    """Why the package's instruct_pretrain scorer crashes on a row with an answer, or ""."""
    domain = row.domain.lower()
    if not domain.startswith(PRETRAIN_DOMAINS):
        return (f"its domain {row.domain!r} is none of {', '.join(PRETRAIN_DOMAINS)} "
                "(KeyError or AssertionError there)")
    if row.ground_truth and not isinstance(row.ground_truth, str):
        return "its ground_truth is not text (AttributeError there)"
    qa_type = row.extra.get("qa_type")
    if domain.startswith(("instruct_pretrain", "long_context")) and qa_type and not isinstance(
            qa_type, str):
        return "its qa_type is not text (AttributeError there)"
    return ""


def instruct_follow(answer: str, row: Any) -> float:
    """1 when every instruction of the JSON ground truth is kept in loose mode (instructions.py)."""
    return instructions.followed_as_package(answer, row.ground_truth)


SCORERS = {"math": math, "chem": letter, "biomed": letter,
           "instruct_pretrain": instruct_pretrain, "instruct_follow": instruct_follow}


def row_note(suite: str, row: Any) -> str:
    """What the package does with a row it cannot score properly, or "": shown in the row's
    record, so a score of 0 there is not taken for the model's."""
    truth = row.ground_truth
    if suite in ("math", "chem", "biomed") and not isinstance(truth, str):
        how = "crashes" if suite != "math" else "fails"
        return (f"{suite}: the package's scorer {how} on a row whose ground_truth is not text "
                "and records 0; scored 0 here too (--suite-scorer lenient reads it)")
    if suite == "instruct_pretrain" and _pretrain_crash(row):
        return (f"instruct_pretrain: the package's scorer crashes on a row when "
                f"{_pretrain_crash(row)} and records 0; scored 0 here too")
    if suite == "instruct_follow":
        return instructions.package_row_note(row)
    return ""
