"""IFEval-style instruction checks (the ids the instruct_follow rows use), written from the
instruction texts; no maintained PyPI package implements them without heavy dependencies."""
from __future__ import annotations

import re
from typing import Any, Callable

from lis_tui.bench.rewards import RewardError


def _words(text: str) -> int:
    return len(re.findall(r"\b\w+\b", text))


def _compare(count: int, kw: dict, key: str) -> bool:
    n = int(kw.get(key) or kw.get("num_words") or kw.get("num_sentences") or 0)
    relation = str(kw.get("relation") or "at least")
    return count >= n if relation == "at least" else count < n


def _sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s])


CHECKS: dict[str, Callable[[str, dict], bool]] = {
    "length_constraints:number_words": lambda t, kw: _compare(_words(t), kw, "num_words"),
    "length_constraints:number_sentences": lambda t, kw: _compare(_sentences(t), kw,
                                                                  "num_sentences"),
    "length_constraints:number_paragraphs": lambda t, kw: len(
        [p for p in re.split(r"\s?\*\*\*\s?", t) if p.strip()]) == int(kw["num_paragraphs"]),
    "detectable_format:number_bullet_lists": lambda t, kw: len(
        re.findall(r"^\s*[*-]\s", t, re.MULTILINE)) == int(kw["num_bullets"]),
    "detectable_format:title": lambda t, kw: bool(re.search(r"<<[^\n]+>>", t)),
    "detectable_format:json_format": lambda t, kw: _is_json(t),
    "change_case:english_lowercase": lambda t, kw: t == t.lower() and t != t.upper(),
    "change_case:english_capital": lambda t, kw: t == t.upper() and t != t.lower(),
    "punctuation:no_comma": lambda t, kw: "," not in t,
    "startend:end_checker": lambda t, kw: t.strip().lower().endswith(
        str(kw["end_phrase"]).strip().lower()),
    "startend:quotation": lambda t, kw: len(t.strip()) > 1 and t.strip()[0] == t.strip()[-1] == '"',
    "keywords:existence": lambda t, kw: all(
        re.search(rf"\b{re.escape(k)}\b", t, re.IGNORECASE) for k in kw["keywords"]),
    "keywords:forbidden_words": lambda t, kw: not any(
        re.search(rf"\b{re.escape(k)}\b", t, re.IGNORECASE) for k in kw["forbidden_words"]),
    "keywords:frequency": lambda t, kw: _compare(
        len(re.findall(rf"\b{re.escape(kw['keyword'])}\b", t, re.IGNORECASE)),
        {"n": kw["frequency"], "relation": kw.get("relation")}, "n"),
}


def _is_json(text: str) -> bool:
    import json  # noqa: PLC0415

    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip(), flags=re.IGNORECASE)
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def followed(instruction_id: str, answer: str, kwargs: dict[str, Any]) -> bool:
    """Whether `answer` keeps the instruction; RewardError for an id we do not check."""
    check = CHECKS.get(instruction_id)
    if check is None:
        raise RewardError(f"instruction {instruction_id!r} has no check here; the checked ones "
                          f"are {', '.join(sorted(CHECKS))} (add one in "
                          "lis_tui/bench/paper/instructions.py)")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}  # Parquet pads with nulls
    return check(answer, kwargs)
