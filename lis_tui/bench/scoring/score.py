"""A task's score for an answer: its reward (rewards.py), a judge model's grade, or a paper
suite's own scorer (bench/paper, imported only when a paper task is scored: the paper package
reads the rewards, so the rewards cannot read it)."""
from __future__ import annotations

from typing import Any

from lis_tui.bench.scoring import rewards


def score(answer: str, task: Any, judge: Any = None) -> float:
    """The task's reward for `answer`: the best over the accepted ground truths."""
    name, params = rewards.parse_reward(task.reward)
    truth = task.ground_truth
    truths = truth if isinstance(truth, list) and name != "json" else [truth]
    if name == "judge":
        if judge is None:
            raise rewards.RewardError(f"task {task.id!r} has a judge reward but no judge model is set; "
                                      "pass --judge-model (and --judge-base-url)")
        return judge.grade(task, answer, params)
    if name == "paper":
        from lis_tui.bench.paper import scorer  # noqa: PLC0415 (only paper suites need it)

        suite = str(params.get("value") or params.get("suite"))
        return scorer(suite, str(params.get("scorer") or ""))(answer or "", task)
    reward = rewards.REWARDS[name]
    return max((reward(answer or "", rewards.as_text(t), row=task, **params) for t in truths
                if t is not None), default=0.0)
