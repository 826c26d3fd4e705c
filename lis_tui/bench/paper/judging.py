"""The judged suites (physics, long_context) graded as llm-in-sandbox 0.2.0's
`benchmark/{physics,long_context}/judge.py` grades them: every answer is shown (an empty one
too), with the text up to its first `</think>` left out; the judge is asked 4 times at
temperature 0.7 (16,384 tokens at most) and the verdicts are averaged; a reply counts 1 when
its last CORRECT comes after its last INCORRECT, read the package's way.
"""
from __future__ import annotations

from typing import Any

SAMPLES = 4
SETTINGS = {"temperature": 0.7, "max_tokens": 16384}
"""What the package's judge script sends by default (`--temperature`, `--max_tokens`)."""
STYLE = "llm-in-sandbox"
"""The judge reward's `verdict` parameter that selects this grading."""


def candidate(answer: str) -> str:
    """The answer as the judge sees it: after the first `</think>`, stripped, when there is one."""
    if "</think>" in answer:
        return answer.partition("</think>")[2].strip()
    return answer


def verdict(reply: str) -> str:
    """CORRECT, INCORRECT or UNKNOWN: whichever comes last; a CORRECT counts unless the two
    characters before it are "IN" ("NOT CORRECT" reads CORRECT, as in the package)."""
    text = reply.upper()
    last_correct = last_incorrect = -1
    pos = text.find("CORRECT")
    while pos != -1:
        if pos == 0 or text[pos - 2:pos] != "IN":
            last_correct = pos
        pos = text.find("CORRECT", pos + 1)
    last_incorrect = text.rfind("INCORRECT")
    if last_correct == -1 and last_incorrect == -1:
        return "UNKNOWN"
    return "INCORRECT" if last_incorrect > last_correct else "CORRECT"


def grade(judge: Any, task: Any, answer: str, template: str) -> float:
    """The mean of SAMPLES verdicts (1 for CORRECT) of `judge` on `answer`."""
    text = judge.fill(template, task.problem_statement, str(task.ground_truth), candidate(answer))
    scores = [1.0 if verdict(judge.ask(text, **SETTINGS)) == "CORRECT" else 0.0
              for _ in range(SAMPLES)]
    return sum(scores) / len(scores)
