"""physics as the paper scores it: an LLM judge reads the question, the official answer and the
candidate and says CORRECT or INCORRECT, four times at temperature 0.7, averaged
(llm-in-sandbox 0.2.0's benchmark/physics/judge.py); asked once with lis-tui's reading under
--suite-scorer lenient; math-verify with a 1% tolerance only when asked for (--suite-scorer
math-verify)."""
import json

import pytest

from fakes.openai_server import FakeOpenAI, reply
from lis_tui.bench.scoring.judge import Judge
from lis_tui.bench.paper import load_suite
from lis_tui.bench.paper.lenient import physics
from lis_tui.bench.scoring.score import score
from lis_tui.bench.tasks import Task, TaskError
from lis_tui.config.settings import ModelConfig

ROW = {"id": "p", "problem_statement": "Free-fall acceleration at sea level, in m/s^2?",
       "ground_truth": "9.81"}

# (the agent's answer, what the judge replies, the score, the candidate the judge is shown)
JUDGED = [
    (r"\boxed{9.81}", "CORRECT", 1.0, r"\boxed{9.81}"),                # right
    ("about 9.8 m/s^2", "The candidate agrees.\nCORRECT", 1.0, "about 9.8 m/s^2"),
    ("12", "INCORRECT", 0.0, "12"),                                     # wrong
    ("9.81", "It is CORRECT? No: INCORRECT", 0.0, "9.81"),             # the last verdict counts
    ("9.81", "I cannot tell.", 0.0, "9.81"),                            # badly formatted verdict
    ("9.81", "score: 0.7", 0.0, "9.81"),                                # no verdict word: 0
    ("9.81", "NOT CORRECT", 1.0, "9.81"),                               # the package's reading
    ("<think>maybe 12</think>\n9.81", "CORRECT", 1.0, "9.81"),          # thinking left out
    ("<think>9.81?</think>", "INCORRECT", 0.0, ""),                     # only thinking: asked
    ("", "CORRECT", 1.0, ""),                                           # empty: asked too
]
# lis-tui's own reading (--suite-scorer lenient): asked once; nothing to judge is 0 unasked
LENIENT = [
    ("9.81", "score: 0.7", 0.7, "9.81"),
    ("9.81", "NOT CORRECT", 1.0, "9.81"),
    ("<think>maybe 12</think>\n9.81", "CORRECT", 1.0, "\n9.81"),
    ("<think>9.81?</think>", "CORRECT", 0.0, None),
    ("", "CORRECT", 0.0, None),
]


def tasks(tmp_path, scorer=""):
    path = tmp_path / "physics.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    return load_suite("physics", str(path), scorer)


@pytest.mark.parametrize("answer, says, want, shown", JUDGED)
def test_physics_is_graded_by_the_judge_four_times(tmp_path, answer, says, want, shown):
    (task,) = tasks(tmp_path)
    with FakeOpenAI(default=lambda r: reply(says)) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="judge", max_retries=0))
        try:
            assert score(answer, task, judge) == want
        finally:
            judge.close()
        asked = server.chat_requests
    assert len(asked) == 4
    assert {(r.body["temperature"], r.body["max_tokens"]) for r in asked} == {(0.7, 16384)}
    (prompt,) = {r.last_content for r in asked}
    assert f"<question>\n{ROW['problem_statement']}\n</question>" in prompt
    assert "<reference>\n9.81\n</reference>" in prompt
    assert f"<answer>\n{shown}\n</answer>" in prompt
    assert "CORRECT or INCORRECT" in prompt


def test_the_four_verdicts_are_averaged(tmp_path):
    (task,) = tasks(tmp_path)
    with FakeOpenAI(script=[reply(r) for r in ("CORRECT", "INCORRECT", "CORRECT", "UNSURE")],
                    default=reply("CORRECT")) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="judge", max_retries=0))
        try:
            assert score("9.81", task, judge) == 0.5
        finally:
            judge.close()


@pytest.mark.parametrize("answer, says, want, shown", LENIENT)
def test_the_lenient_judge_asks_once(tmp_path, answer, says, want, shown):
    (task,) = tasks(tmp_path, "lenient")
    assert "not the package's metric" in task.extra["scorer_note"]
    with FakeOpenAI(default=lambda r: reply(says)) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="judge", max_retries=0))
        try:
            assert score(answer, task, judge) == want
        finally:
            judge.close()
        asked = [r.last_content for r in server.chat_requests]
    if shown is None:
        assert asked == []
        return
    (prompt,) = asked
    assert f"<answer>\n{shown}\n</answer>" in prompt


def test_physics_without_a_judge_says_what_to_pass(tmp_path):
    (task,) = tasks(tmp_path)
    from lis_tui.bench.scoring.rewards import RewardError
    with pytest.raises(RewardError, match="--judge-model"):
        score("9.81", task)


# The opt-in math-verify scorer: the last \boxed{} (else the answer) equal to the reference, or a
# number within 1% of it.
BY_MATH = [
    (r"\boxed{9.81}", "9.81", 1.0),
    (r"\boxed{9.8}", "9.81", 1.0),         # within 1%
    ("g = 9.78", "9.81", 1.0),             # unboxed: the last number
    (r"\boxed{9.6}", "9.81", 0.0),         # 2% off
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{", "9.81", 0.0),             # badly formatted
    ("", "9.81", 0.0),
]


@pytest.mark.parametrize("answer, truth, want", BY_MATH)
def test_the_math_verify_scorer(answer, truth, want):
    pytest.importorskip("math_verify")
    assert physics(answer, Task("p", "q", ground_truth=truth)) == want


def test_math_verify_is_chosen_by_name_and_noted_as_not_the_papers_metric(tmp_path):
    pytest.importorskip("math_verify")
    (task,) = tasks(tmp_path, "math-verify")
    assert score(r"\boxed{9.8}", task) == 1.0  # no judge needed
    assert "not the paper's metric" in task.extra["scorer_note"]
    (judged,) = tasks(tmp_path)
    assert "scorer_note" not in judged.extra
    with pytest.raises(TaskError, match="its other scorers are: lenient, math-verify"):
        tasks(tmp_path, "sympy")
    with pytest.raises(TaskError, match="its other scorers are: lenient$"):
        load_suite("chem", str(tmp_path / "physics.jsonl"), "math-verify")
