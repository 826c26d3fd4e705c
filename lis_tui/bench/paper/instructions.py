"""instruct_follow's instruction checks, scored as the paper's package scores them: a row is
right when every one of its instructions is kept (prompt level), each in IFEval's loose mode
(the answer also counts with its asterisks removed, or its first line, last line or both).
`followed_as_package` is the default scorer's (the package's code path, IFBench's ids only);
`all_followed` the lenient one's (IFEval's ids too, the row's own fields).

The package's rows name IFBench's instructions (count:..., ratio:..., format:...). With
if-verifiable installed (`pip install 'lis-tui[ifbench]'`, a PyPI port of IFBench's and IFEval's
own checks) those checks grade them; without it lis-tui's own IFEval-style checks below grade
the ids they know, the summary says so, and a suite whose rows use another id stops at start.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
from typing import Any, Callable

from isolation.extras import install_hint
from lis_tui.bench.scoring.rewards import RewardError
from lis_tui.bench.tasks import TaskError


def _words(text: str) -> int:
    return len(re.findall(r"\b\w+\b", text))


def _compare(count: int, kw: dict, key: str) -> bool:
    n = int(kw.get(key) or kw.get("num_words") or kw.get("num_sentences") or 0)
    relation = str(kw.get("relation") or "at least")
    return count >= n if relation == "at least" else count < n


def _sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s])


CHECKS: dict[str, Callable[[str, dict], bool]] = {  # lis-tui's own
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
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip(), flags=re.IGNORECASE)
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


NLTK_RESOURCES = ("tokenizers/punkt", "tokenizers/punkt_tab",
                  "taggers/averaged_perceptron_tagger_eng", "corpora/stopwords")
"""The NLTK data if-verifiable's checks read (and would download when it is imported)."""
NLTK_DATA = ("python -m nltk.downloader punkt punkt_tab averaged_perceptron_tagger_eng "
             "stopwords")
FALLBACK_NOTE = ("instruct_follow scored with lis-tui's own IFEval-style checks, not IFBench's "
                 "as in the paper (for those: `{hint}`)")


Checks = dict[str, Callable[[str, dict], bool]]


def followed(instruction_id: str, answer: str, kwargs: dict[str, Any],
             known: Checks | None = None) -> bool:
    """Whether `answer` keeps the instruction (strictly), by the `known` checks (default:
    `checks()`); RewardError for an id not checked."""
    check = (checks() if known is None else known).get(instruction_id)
    if check is None:
        raise RewardError(f"instruction {instruction_id!r} has no check here"
                          + ("" if has_ifbench() else f"; for IFBench's, run: {install_hint('ifbench')}"))
    kwargs = {k: v for k, v in kwargs.items() if v is not None}  # Parquet pads with nulls
    return check(answer, kwargs)


def loose_variants(answer: str) -> list[str]:
    """The answer as loose mode also reads it: asterisks out; first, last or both lines out."""
    lines = answer.split("\n")
    return [answer, answer.replace("*", ""), "\n".join(lines[1:]).strip(),
            "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]


def all_followed(answer: str, ids: list[str], kwargs: list[dict[str, Any]],
                 known: Checks | None = None) -> bool:
    """Every instruction kept by the answer or one of its loose variants (none when empty)."""
    variants = [v for v in loose_variants(answer) if v.strip()]
    kwargs = list(kwargs) + [{}] * (len(ids) - len(kwargs))
    return bool(ids and variants) and all(
        any(followed(i, v, k or {}, known) for v in variants) for i, k in zip(ids, kwargs))


def instructions_of(row: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """(instruction ids, their kwargs): the row's own fields, else its ground truth, which the
    package's published rows make a JSON object of the two."""
    ids, kwargs = row.extra.get("instruction_id_list"), row.extra.get("kwargs")
    if not ids:
        truth = row.ground_truth
        try:
            truth = json.loads(truth) if isinstance(truth, str) else truth
        except ValueError:
            truth = None
        if isinstance(truth, dict):
            ids, kwargs = truth.get("instruction_id_list"), truth.get("kwargs")
    return list(ids or []), [dict(k or {}) for k in kwargs or []]


def prepare(tasks: list[Any]) -> str:
    """At start: TaskError when a row names an instruction nothing here checks; the note for
    the summary when lis-tui's own checks stand in for IFBench's."""
    try:
        known = checks()
    except RewardError as exc:  # no NLTK data for IFBench's checks
        raise TaskError(str(exc)) from None
    missing = sorted({i for t in tasks for i in instructions_of(t)[0]} - set(known))
    if missing:
        hint = (f"run: {install_hint('ifbench')} (IFBench's own checks)" if not has_ifbench() else
                "neither IFBench nor IFEval names them")
        raise TaskError(f"instruct_follow rows name instructions with no check here: "
                        f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}; {hint}")
    return "" if has_ifbench() else FALLBACK_NOTE.format(hint=install_hint("ifbench"))


def has_ifbench() -> bool:
    return importlib.util.find_spec("if_verifiable") is not None


@functools.cache
def checks() -> Checks:
    """Every check by id: IFEval's and IFBench's own when if-verifiable is installed, else ours."""
    if not has_ifbench():
        return dict(CHECKS)
    # Imported without its NLTK data, it would fetch it from the internet: a bench must not
    # download behind the user's back, so it is asked for instead.
    missing = _nltk_missing()
    if missing:
        raise RewardError(f"IFBench's checks (if-verifiable) need NLTK data not found here "
                          f"({', '.join(missing)}); get it once where there is network: "
                          f"{NLTK_DATA} (NLTK_DATA=DIR to keep it elsewhere)")
    from if_verifiable.ifbench import instructions_registry as ifbench  # noqa: PLC0415
    from if_verifiable.ifeval import instructions_registry as ifeval  # noqa: PLC0415

    found = {**ifeval.INSTRUCTION_DICT, **ifbench.INSTRUCTION_DICT}
    return {i: functools.partial(_packaged, i, cls) for i, cls in found.items()}


def _nltk_missing() -> list[str]:
    import nltk  # noqa: PLC0415 (comes with if-verifiable)

    missing = []
    for path in NLTK_RESOURCES:
        try:
            nltk.data.find(path)
        except LookupError:
            missing.append(path.rpartition("/")[2])
    return missing


def _packaged(instruction_id: str, cls: Any, answer: str, kwargs: dict[str, Any]) -> bool:
    instruction = cls(instruction_id)
    try:
        instruction.build_description(**kwargs)
        return bool(instruction.check_following(answer))
    except LookupError:  # NLTK data not downloaded
        raise RewardError(f"IFBench's check {instruction_id!r} needs NLTK data; run once: "
                          f"{NLTK_DATA}") from None


def ifbench_registry() -> dict[str, Any]:
    """IFBench's own instructions by id, the only ones the package's scorer knows
    (if-verifiable's port of IFBench's `instructions_registry`); RewardError without it."""
    if not has_ifbench():
        raise RewardError(f"instruct_follow is scored with IFBench's checks; run: {install_hint('ifbench')}")
    checks()  # the NLTK data first: importing the registry without it would download it
    from if_verifiable.ifbench import instructions_registry  # noqa: PLC0415

    return instructions_registry.INSTRUCTION_DICT


def followed_as_package(answer: str, truth: Any) -> float:
    """The package's instruct_follow reward: the instructions of the JSON ground truth, each
    built once and kept by a non-blank loose variant; 1 for none, 0 for an id IFBench lacks and
    for anything the package's scorer raises on (bad JSON, short kwargs, a failing check)."""
    registry = ifbench_registry()
    try:
        data = json.loads(truth)
        ids, kwargs = data.get("instruction_id_list", []), data.get("kwargs", [])
        variants = loose_variants(answer)
        for n, instruction_id in enumerate(ids):
            if instruction_id not in registry:
                return 0.0
            instruction = registry[instruction_id](instruction_id)
            instruction.build_description(**{k: v for k, v in kwargs[n].items() if v is not None})
            if not any(v.strip() and instruction.check_following(v) for v in variants):
                return 0.0
        return 1.0
    except Exception as exc:  # noqa: BLE001 (the package's scorer returns 0 on any error)
        if type(exc) is LookupError:  # NLTK data missing: this machine's fault, not the row's
            raise RewardError(f"IFBench's checks need NLTK data; run once: {NLTK_DATA}") from None
        return 0.0


def package_row_note(row: Any) -> str:
    """How the package scores a row whose instructions it cannot check, or ""."""
    truth = row.ground_truth
    try:
        data = json.loads(truth) if isinstance(truth, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        fields = " (it reads only the ground truth, not the row's own fields)" if row.extra.get(
            "instruction_id_list") else ""
        return ("instruct_follow: the package's scorer gives 0 to a row whose ground_truth is "
                f"not a JSON object of instruction_id_list and kwargs{fields}; scored 0 here "
                "too (--suite-scorer lenient reads the fields)")
    ids = data.get("instruction_id_list", [])
    unknown = [i for i in ids if isinstance(i, str) and i not in ifbench_registry()] if isinstance(
        ids, list) else []
    if unknown:
        return (f"instruct_follow: the package's scorer gives 0 to a row naming instructions "
                f"IFBench lacks ({', '.join(sorted(set(unknown)))}); scored 0 here too")
    return ""


def prepare_as_package(tasks: list[Any]) -> str:
    """At start, for the default scorer: IFBench's checks and their NLTK data must be here (a
    row naming an id IFBench lacks is not refused: the package scores it 0, row_note says so)."""
    try:
        ifbench_registry()
    except RewardError as exc:
        raise TaskError(str(exc)) from None
    return ""
