"""The suites' lenient scorers (`--suite-scorer lenient`), each `(answer, row) -> float in [0, 1]`:
lis-tui's reading of the paper's metrics before they matched the package's quirks
(docs/paper-suites.md says per suite how they differ from the default, scorers.py).

math: the last \\boxed{} (else the raw answer) checked with math-verify; physics (only with
--suite-scorer math-verify) also accepts a number within 1% (relative) of the reference.
chem / biomed: the chosen letter(s). instruct_pretrain: by `qa_type`: single choice exact,
multiple choice F1 over letters, open-ended math-verify first, then ROUGE-L F1.
instruct_follow: every listed instruction kept, each in loose mode (as the package scores
IFBench). physics and long_context are graded by the `judge` reward instead
(suites.JUDGE_PROMPT); `physics` below is the opt-in math-verify scorer.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

from lis_tui.bench.scoring.answers import extract_boxed, extract_choices, parse_number
from lis_tui.bench.paper.instructions import all_followed, instructions_of
from lis_tui.bench.scoring.rewards import boxed, choice, choice_letters, letters_f1

PHYSICS_TOLERANCE = Fraction(1, 100)
"""Relative tolerance for physics numbers (numeric answers rounded by the model)."""


def _truths(row: Any) -> list[str]:
    truth = row.ground_truth
    return [str(t) for t in truth] if isinstance(truth, list) else [str(truth or "")]


def math(answer: str, row: Any) -> float:
    return max(boxed(answer, t) for t in _truths(row))


def physics(answer: str, row: Any) -> float:
    if math(answer, row):
        return 1.0
    got = parse_number(extract_boxed(answer) or answer, last=True)
    for truth in _truths(row):
        want = parse_number(extract_boxed(truth) or truth, last=True)
        if got is not None and want is not None and abs(got - want) <= PHYSICS_TOLERANCE * abs(want):
            return 1.0
    return 0.0


def letter(answer: str, row: Any) -> float:
    return max(choice(answer, t) for t in _truths(row))


def instruct_pretrain(answer: str, row: Any) -> float:
    kind = str(row.extra.get("qa_type") or "").lower()
    truth = _truths(row)[0]
    if "multiple choice" in kind:  # the package's own value: a comma in the truth means several
        kind = "multiple" if "," in truth else "single"
    if "multi" in kind:
        return letters_f1(extract_choices(answer), choice_letters(truth))
    if "single" in kind or "choice" in kind:
        want = choice_letters(truth)
        return float(len(want) == 1 and extract_choices(answer) == want)
    return open_ended(answer, truth)


def open_ended(answer: str, truth: str) -> float:
    """Math verification first (a number or formula), else ROUGE-L F1 against the reference."""
    if not answer.strip() or not truth.strip():
        return 0.0
    if boxed(answer, truth):
        return 1.0
    from rouge_score import rouge_scorer  # noqa: PLC0415 (the [paper] extra, checked at start)

    scored = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(truth, answer)
    return scored["rougeL"].fmeasure


def instruct_follow(answer: str, row: Any) -> float:
    """1 when every instruction of the row is kept, in loose mode (instructions.py)."""
    return float(all_followed(answer, *instructions_of(row)))


SCORERS = {"math": math, "physics": physics, "chem": letter, "biomed": letter,
           "instruct_pretrain": instruct_pretrain, "instruct_follow": instruct_follow}
