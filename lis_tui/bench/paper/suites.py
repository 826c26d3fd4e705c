"""The suites: where files go, how an answer is scored, how the `--mode llm` prompt is made."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from isolation.extras import install_hint
from lis_tui.bench.paper import instructions, judging, lenient, scorers
from lis_tui.bench.paper.data import load_rows
from lis_tui.bench.paper.llm_mode import DOCUMENT_SUITES
from lis_tui.bench.tasks import Task, TaskError, tasks_from_items



@dataclass(frozen=True)
class Layout:
    """Where a suite's files live in the sandbox (the paper package's defaults)."""

    input_dir: str = "/testbed/documents"
    """The row's `input_files` are placed here."""
    output_dir: str = "/testbed"
    """The agent is told to write answer.txt here."""

    @property
    def answer_path(self) -> str:
        return f"{self.output_dir}/answer.txt"


JUDGE_PROMPT = """\
Grade a candidate answer against the official answer.

The question is here only so you know what was asked; do not solve it yourself:
<question>
{problem}
</question>

Official answer:
<reference>
{ground_truth}
</reference>

Candidate answer:
<answer>
{answer}
</answer>

The candidate is CORRECT when it is consistent with the official answer, and INCORRECT when it
gives a different, incomplete or no result. Reply with the one word CORRECT or INCORRECT."""
"""The judge prompt of the judged suites (long_context, physics): what the paper's judge checks
(the candidate consistent with the official answer, the question for reference only, a one-word
verdict), in lis-tui's words. The verdict is read as the package reads it (judging.py)."""
JUDGED = {"type": "judge", "prompt": JUDGE_PROMPT, "verdict": judging.STYLE}
LENIENT_JUDGED = {"type": "judge", "prompt": JUDGE_PROMPT}
"""lis-tui's own judging: asked once (at the judge model's temperature), an empty answer is 0
without asking, a `score: x` is read when there is no verdict word."""


@dataclass(frozen=True)
class Scoring:
    """A way to score a suite other than the paper's, chosen with `--suite-scorer NAME`."""

    name: str
    reward: Any
    needs: tuple[str, ...] = ()
    note: str = ""
    """Shown in summary.md: how this differs from the paper's metric."""
    prepare: Callable[[list[Task]], str] | None = None
    """Checks the rows at start (TaskError) and returns a note for the summary, or ""."""


@dataclass(frozen=True)
class Suite:
    """One of the paper's evaluation configurations."""

    name: str
    reward: Any
    """A reward spec: `paper:NAME` (scorers.SCORERS) or `judge` (JUDGED)."""
    needs: tuple[str, ...] = ()
    """Modules the scorer imports (from the `[paper]` extra)."""
    inline_documents: bool = False
    """`--mode llm`: the documents go into the prompt before the question."""
    layout: Layout = Layout()
    others: tuple[Scoring, ...] = ()
    """Scorers that are not the paper's, for those who cannot use its own (`--suite-scorer`)."""
    prepare: Callable[[list[Task]], str] | None = None
    """Checks the rows at start (TaskError) and returns a note for the summary, or ""."""


def _lenient(name: str) -> Scoring:
    judged = name in ("physics", "long_context")
    return Scoring(
        "lenient", LENIENT_JUDGED if judged else {"type": "paper", "suite": name,
                                                  "scorer": "lenient"},
        ("math_verify", "rouge_score") if name == "instruct_pretrain" else
        ("math_verify",) if name == "math" else (),
        f"{name} scored with --suite-scorer lenient, not the package's metric "
        "(docs/paper-suites.md says how they differ)",
        instructions.prepare if name == "instruct_follow" else None)


PHYSICS_BY_MATH = Scoring(
    "math-verify", {"type": "paper", "suite": "physics", "scorer": "math-verify"},
    ("math_verify",),
    "physics scored with math-verify and a 1% numeric tolerance (--suite-scorer math-verify), "
    "not the paper's metric: the paper grades physics with an LLM judge (--judge-model M)")
SUITES: dict[str, Suite] = {s.name: replace(s, others=(_lenient(s.name), *s.others)) for s in (
    Suite("math", "paper:math", ("math_verify",)),
    Suite("physics", JUDGED, others=(PHYSICS_BY_MATH,)),
    Suite("chem", "paper:chem"),
    Suite("biomed", "paper:biomed"),
    Suite("long_context", JUDGED, inline_documents=True),
    Suite("instruct_follow", "paper:instruct_follow", ("if_verifiable",),
          prepare=instructions.prepare_as_package),
    Suite("instruct_pretrain", "paper:instruct_pretrain", ("math_verify", "rouge_score"),
          inline_documents=True),
)}


def suite(name: str) -> Suite:
    if name not in SUITES:
        raise TaskError(f"unknown paper suite {name!r}; the suites are {', '.join(SUITES)} "
                        "(e.g. lis-tui bench paper:math rows.parquet)")
    return SUITES[name]


def scorer(name: str, kind: str = "") -> Callable[[str, Task], float]:
    """The `(answer, row) -> float in [0, 1]` of a suite scored without a judge: the package's
    (scorers.py), or with `kind` (lenient, math-verify) lis-tui's own (lenient.py)."""
    table = lenient.SCORERS if kind else scorers.SCORERS
    if name not in table:
        raise TaskError(f"no scorer for paper suite {name!r}; scored suites: {', '.join(table)}")
    return table[name]


def check_extras(name: str, scorer_name: str = "") -> None:
    """Stop before any episode when the suite's scorer lacks a package."""
    needs = scoring(name, scorer_name).needs if scorer_name else suite(name).needs
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        fix = install_hint("ifbench" if missing == ["if_verifiable"] else "paper")
        raise TaskError(f"paper suite {name!r} scores with {', '.join(missing)}, which is not "
                        f"installed; run: {fix}")


def scoring(name: str, scorer_name: str) -> Scoring:
    """The suite's other scorer called `scorer_name`; TaskError naming the ones it has."""
    chosen = suite(name)
    for other in chosen.others:
        if other.name == scorer_name:
            return other
    names = ", ".join(o.name for o in chosen.others)
    raise TaskError(f"paper suite {name!r} has no scorer {scorer_name!r}; "
                    + (f"its other scorers are: {names}" if names else
                       "it has only the paper's own (leave out --suite-scorer)"))


def load_suite(name: str, data: str, scorer_name: str = "", allow: Path | None = None) -> list[Task]:
    """The suite's tasks from DATA (a file, folder or hf:NAME:CONFIG[:SPLIT]), scored as the
    paper does, or with its other scorer `scorer_name` (a note in the summary says so); the host
    folders rows name inside DATA's folder or `allow` (lis_tui.bench.tasks)."""
    chosen = suite(name)
    other = scoring(name, scorer_name) if scorer_name else None
    check_extras(name, scorer_name)
    rows, base, label = load_rows(data)
    tasks = tasks_from_items(rows, base, label, None, allow)
    prepare = other.prepare if other else chosen.prepare
    shared = [other.note if other else "", prepare(tasks) if prepare else ""]
    return [replace(t, reward=other.reward if other else chosen.reward, layout=chosen.layout,
                    extra={**t.extra, "paper_suite": name, **null_documents(name, row),
                           **_note([*shared, "" if other else scorers.row_note(name, t)])})
            for t, row in zip(tasks, rows)]


def null_documents(name: str, row: dict) -> dict[str, Any]:
    """What a Task, which keeps only the files that have text, loses of a row whose files
    include null ones: the documents the package's LLM mode inlines (`llm_documents`, the
    nulls as None) and whether its sandbox mode still makes the (empty) input folder."""
    extra: dict[str, Any] = {}
    files = _mapping(row.get("input_files"))
    if files and all(text is None for text in files.values()):
        extra["empty_input_dir"] = True
    documents = _mapping(row.get("documents")) or files
    if name in DOCUMENT_SUITES and documents and None in documents.values():
        extra["llm_documents"] = list(documents.values())
    return extra


def _mapping(value: Any) -> dict | None:
    if isinstance(value, str):  # a Task was made from it: it is JSON, or blank
        value = json.loads(value) if value.strip() else None
    return value if isinstance(value, dict) else None


def _note(notes: list[str]) -> dict[str, str]:
    """The summary's note for a row: its suite's and its own (a row the package cannot score)."""
    notes = [n for n in notes if n]
    return {"scorer_note": "; ".join(notes)} if notes else {}


def llm_prompt(task: Task) -> str:
    """The baseline prompt: the problem statement as the paper's package sends it; for the
    context suites the documents come first, inlined, as the paper describes its LLM mode."""
    chosen = SUITES[task.extra["paper_suite"]]
    if not (chosen.inline_documents and task.input_files):
        return task.problem_statement
    docs = "\n\n".join(f"<document name=\"{name}\">\n{text}\n</document>"
                       for name, text in sorted(task.input_files.items()))
    return f"{docs}\n\n{task.problem_statement}"
