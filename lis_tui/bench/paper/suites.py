"""The suites: where files go, how an answer is scored, how the `--mode llm` prompt is made."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Any, Callable

from lis_tui.bench.paper import scorers
from lis_tui.bench.paper.data import load_rows
from lis_tui.bench.tasks import Task, TaskError, tasks_from_items

PAPER_EXTRA = "pip install 'lis-tui[paper]'"


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


@dataclass(frozen=True)
class Suite:
    """One of the paper's evaluation configurations."""

    name: str
    reward: Any
    """A reward spec: `paper:NAME` (scorers.SCORERS) or `judge`."""
    needs: tuple[str, ...] = ()
    """Modules the scorer imports (from the `[paper]` extra)."""
    inline_documents: bool = False
    """`--mode llm`: the documents go into the prompt before the question."""
    layout: Layout = Layout()


SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("math", "paper:math", ("math_verify",)),
    Suite("physics", "paper:physics", ("math_verify",)),
    Suite("chem", "paper:chem"),
    Suite("biomed", "paper:biomed"),
    Suite("long_context", "judge", inline_documents=True),
    Suite("instruct_follow", "paper:instruct_follow"),
    Suite("instruct_pretrain", "paper:instruct_pretrain", ("math_verify", "rouge_score"),
          inline_documents=True),
)}


def suite(name: str) -> Suite:
    if name not in SUITES:
        raise TaskError(f"unknown paper suite {name!r}; the suites are {', '.join(SUITES)} "
                        "(e.g. lis-tui bench paper:math rows.parquet)")
    return SUITES[name]


def scorer(name: str) -> Callable[[str, Task], float]:
    """The `(answer, row) -> float in [0, 1]` of a suite scored without a judge."""
    if name not in scorers.SCORERS:
        raise TaskError(f"no scorer for paper suite {name!r}; scored suites: "
                        f"{', '.join(scorers.SCORERS)}")
    return scorers.SCORERS[name]


def check_extras(name: str) -> None:
    """Stop before any episode when the suite's scorer lacks a package."""
    missing = [m for m in suite(name).needs if importlib.util.find_spec(m) is None]
    if missing:
        raise TaskError(f"paper suite {name!r} scores with {', '.join(missing)}, which is not "
                        f"installed; run: {PAPER_EXTRA}")


def load_suite(name: str, data: str) -> list[Task]:
    """The suite's tasks from DATA (a file, folder or hf:NAME:CONFIG[:SPLIT])."""
    chosen = suite(name)
    check_extras(name)
    rows, base, label = load_rows(data)
    tasks = tasks_from_items(rows, base, label, default_reward=None)
    return [replace(t, reward=chosen.reward, layout=chosen.layout,
                    extra={**t.extra, "paper_suite": name}) for t in tasks]


def llm_prompt(task: Task) -> str:
    """The baseline prompt: the problem statement as the paper's package sends it; for the
    context suites the documents come first, inlined, as the paper describes its LLM mode."""
    chosen = SUITES[task.extra["paper_suite"]]
    if not (chosen.inline_documents and task.input_files):
        return task.problem_statement
    docs = "\n\n".join(f"<document name=\"{name}\">\n{text}\n</document>"
                       for name, text in sorted(task.input_files.items()))
    return f"{docs}\n\n{task.problem_statement}"
