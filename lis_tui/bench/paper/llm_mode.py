"""`--mode llm` of a paper suite as llm-in-sandbox 0.2.0 runs it: one user message (no system
prompt, no tools) made by the suite's `create_prompt(row)`, and the whole reply as the answer.

What the package's `benchmark/SUITE/vanilla_llm_prompt.py` sends, written out here in our own
code (the text the model reads must be the same, so the two fixed lines are quoted exactly):
math adds a line asking for step-by-step reasoning and a boxed answer; long_context and
instruct_pretrain put the row's documents first, each numbered between BEGIN/END DOCUMENT
lines, inside BEGIN/END INPUT DOCUMENTS, then the question between START/END QUESTION; the
other suites send the problem statement as it is.
"""
from __future__ import annotations

from lis_tui.bench.tasks import Task

STEP_BY_STEP = "Please reason step by step, and put your final answer within \\boxed{}."
DOCUMENT_SUITES = ("long_context", "instruct_pretrain")


def package_prompt(task: Task) -> str:
    """The one user message the package sends for this row in its LLM mode."""
    suite = task.extra.get("paper_suite")
    statement = task.problem_statement
    if suite == "math":
        return f"{statement}\n\n{STEP_BY_STEP}"
    # the row's `documents` first, as there; a null one is inlined as the word None, as there
    documents = (task.extra.get("llm_documents")
                 or list((task.documents or task.input_files).values()))
    if suite not in DOCUMENT_SUITES or not documents:
        return statement
    numbered = "\n\n".join(f"BEGIN DOCUMENT {n}:\n{text}\nEND DOCUMENT {n}"
                           for n, text in enumerate(documents, start=1))
    return (f"BEGIN INPUT DOCUMENTS\n\n{numbered}\n\nEND INPUT DOCUMENTS\n\n"
            "Answer the following question using the input documents provided above.\n\n"
            f"START QUESTION\n\n{statement}\n\nEND QUESTION\n")
