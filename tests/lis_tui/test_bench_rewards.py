"""Every reward type, with the near misses that must score 0; the judge against a scripted server."""

import pytest

from fakes.openai_server import FakeOpenAI, error, reply
from lis_tui.bench.scoring.answers import extract_boxed, final_answer, parse_number
from lis_tui.bench.scoring.judge import Judge, JudgeError, verdict
from lis_tui.bench.scoring.rewards import REWARD_NAMES, RewardError, parse_reward
from lis_tui.bench.scoring.score import score
from lis_tui.bench.tasks import Task
from lis_tui.config.settings import ModelConfig


def graded(reward, truth, answer, **extra):
    return score(answer, Task("t", "the problem", truth, reward=reward, **extra))


@pytest.mark.parametrize("reward, truth, answer, expected", [
    ("exact", "Paris", " Paris\n", 1.0),
    ("exact", "a\nb", "a\r\nb\r\n", 1.0),
    ("exact", "Paris", "paris", 0.0),
    ("exact", "Paris", "Paris.", 0.0),
    ("normalized", "New York", "  new-york. ", 1.0),
    ("normalized", "3.14", "3.14.", 1.0),
    ("normalized", "3.14", "314", 0.0),
    ("normalized", "Paris", "Paris, France", 0.0),
    ("numeric", "1234567", "The total is 1,234,567.", 1.0),
    ("numeric", "0.5", "1/2", 1.0),
    ("numeric", "2.5e-3", "0.0025", 1.0),
    ("numeric", "100", "100.00005", 1.0),          # default relative tolerance 1e-6
    ("numeric", "100", "100.001", 0.0),
    ("numeric", "100", "about a hundred", 0.0),
    ("numeric:0", str(3 ** 200), str(3 ** 200), 1.0),
    ("numeric:0", str(3 ** 200), str(3 ** 200 + 1), 0.0),   # big integers compare exactly
    ("numeric:0.01", "200", "201.9", 1.0),
    ("numeric:0.01", "200", "202.1", 0.0),
    ({"type": "numeric", "tolerance": 0, "abs_tolerance": 0.5}, "7", "7.4", 1.0),
    ("choice", "B", "B", 1.0),
    ("choice", "B", "(b)", 1.0),
    ("choice", "B", "The answer is B.", 1.0),
    ("choice", "B", "I pick B", 1.0),
    ("choice", "B", "C", 0.0),
    ("choice", "B", "B or C", 0.0),
    ("choice", "B", "", 0.0),
    ("choice:ABCD", "B", "E", 0.0),
    ("boxed", "400", r"so the count is \boxed{400}.", 1.0),
    ("boxed", r"\frac{3}{4}", r"\boxed{\dfrac{3}{4}}", 1.0),
    ("boxed", "1/2", r"\boxed{\frac{1}{2}}", 1.0),
    ("boxed", "400", r"\boxed{401}", 0.0),
    ("boxed", "400", "400", 1.0),                   # no \boxed{}: the raw answer, as the paper
    ("boxed", "400", r"\boxed{40}0", 0.0),
    ("contains", "Paris", "The capital of France is Paris.", 1.0),
    ("contains", "Paris", "Parisian cafés", 0.0),
    ("json", "[2, 3, 5]", "[2,3,5]\n", 1.0),
    ("json", {"a": 1, "b": [1, 2]}, '{"b": [1, 2], "a": 1}', 1.0),
    ("json", [2, 3, 5], "[2, 3, 5, 7]", 0.0),
    ("json", [2, 3, 5], "2, 3, 5", 0.0),
])
def test_rewards_score_right_answers_1_and_near_misses_0(reward, truth, answer, expected):
    assert graded(reward, truth, answer) == expected


def test_a_list_of_ground_truths_accepts_any_of_them():
    assert graded("normalized", ["NYC", "New York City"], "new york city") == 1.0
    assert graded("normalized", ["NYC", "New York City"], "new york") == 0.0


def test_numbers_and_boxes_are_extracted_carefully():
    assert parse_number("1_000") == 1000 and parse_number("12%") == 12
    assert parse_number("x = 3, y = 4", last=True) == 4 and parse_number("x = 3") is None
    assert extract_boxed(r"\boxed{\frac{a}{b}} and \boxed{x^{2}}") == "x^{2}"
    assert extract_boxed(r"\boxed{unclosed") is None
    assert final_answer("working...\nANSWER: 17") == "17"
    assert final_answer("**Final answer:** B") == "B"
    assert final_answer("just 17") == "just 17"
    assert final_answer("Answer: wrong\nThe answer: is it?\nANSWER:\n```csv\na,b\n1,2\n```\n") == "a,b\n1,2"
    assert final_answer("ANSWER: two\nlines") == "two\nlines"


def test_unknown_rewards_name_the_known_ones():
    with pytest.raises(RewardError, match="the rewards are exact, normalized"):
        parse_reward("fuzzy")
    assert parse_reward("numeric:0.01") == ("numeric", {"tolerance": 0.01})
    assert parse_reward(None) == ("normalized", {})
    assert "judge" in REWARD_NAMES


def test_a_judge_reward_without_a_judge_says_what_to_pass():
    with pytest.raises(RewardError, match="--judge-model"):
        graded("judge", "x", "y")


def _grader(request):
    """A judge that reads the reference and the answer out of the prompt and compares them."""
    prompt = request.last_content
    reference = prompt.split("<reference>\n")[1].split("\n</reference>")[0]
    answer = prompt.split("<answer>\n")[1].split("\n</answer>")[0]
    right = answer == reference or f"capital is {reference}" in answer
    return reply("The answer names the same city.\nCORRECT" if right
                 else "It names another city.\nINCORRECT")


def test_the_judge_grades_with_a_second_model_server():
    with FakeOpenAI(default=_grader) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="judge-m", max_retries=0))
        task = Task("t", "What is the capital of France?", "Paris", reward="judge")
        try:
            assert score("Paris", task, judge) == 1.0
            assert score("I think the capital is Paris.", task, judge) == 1.0
            assert score("Lyon", task, judge) == 0.0
            assert score("", task, judge) == 0.0  # nothing to grade: no call
        finally:
            judge.close()
        requests = server.chat_requests
    assert len(requests) == 3
    body = requests[0].body
    assert body["model"] == "judge-m" and "tools" not in body
    assert "What is the capital of France?" in requests[0].last_content
    assert "<reference>\nParis\n</reference>" in requests[0].last_content


def test_a_task_may_bring_its_own_judge_prompt():
    with FakeOpenAI(default=lambda r: reply("score: 0.5" if "RUBRIC" in r.last_content else "?")) \
            as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="j", max_retries=0))
        task = Task("t", "p", "g", reward={"type": "judge", "prompt": "RUBRIC {problem} {answer}"})
        assert score("anything", task, judge) == 0.5
        assert server.chat_requests[0].last_content == "RUBRIC p anything"
        judge.close()


def test_a_judge_server_that_fails_raises_a_judge_error():
    with FakeOpenAI(default=error(400, "bad request")) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="j", max_retries=0))
        with pytest.raises(JudgeError, match="the judge model failed"):
            score("Paris", Task("t", "p", "Paris", reward="judge"), judge)
        judge.close()


@pytest.mark.parametrize("text, expected", [
    ("Reasons.\nCORRECT", 1.0), ("Reasons.\nINCORRECT", 0.0), ("**Correct**", 1.0),
    ("It is correct... no wait.\nINCORRECT", 0.0), ("score: 0.25", 0.25), ("no idea", 0.0)])
def test_verdicts(text, expected):
    assert verdict(text) == expected


def test_a_bench_run_grades_with_the_judge_on_its_own_server(tmp_path):
    """`lis-tui bench --mode llm --judge-model`: the model on one server, the judge on another."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([
        {"id": "fr", "problem_statement": "What is the capital of France?", "ground_truth": "Paris",
         "reward": "judge", "domain": "geo"},
        {"id": "it", "problem_statement": "What is the capital of Italy?", "ground_truth": "Rome",
         "reward": "judge", "domain": "geo"}]))
    with FakeOpenAI(default=reply("Let me think.\nANSWER: Paris")) as model, \
            FakeOpenAI(default=_grader, model="judge-m") as judge:
        proc = subprocess.run(
            [sys.executable, "-m", "lis_tui.cli", "bench", str(tasks), "--mode", "llm", "-q",
             "--output", str(tmp_path / "out"), "--base-url", model.base_url, "--model", "m",
             "--judge-model", "judge-m", "--judge-base-url", judge.base_url],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(root), "XDG_CONFIG_HOME": str(tmp_path)})
        graded = judge.chat_requests
    assert proc.returncode == 0, proc.stderr
    results = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").open())}
    assert (results["fr"]["answer"], results["fr"]["reward"]) == ("Paris", 1.0)
    assert (results["it"]["answer"], results["it"]["reward"]) == ("Paris", 0.0)
    assert len(graded) == 2 and {r.body["model"] for r in graded} == {"judge-m"}


def test_bench_refuses_judge_tasks_without_a_judge(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    tasks = tmp_path / "t.json"
    tasks.write_text(json.dumps([{"id": "a", "problem_statement": "p", "reward": "judge"}]))
    proc = subprocess.run([sys.executable, "-m", "lis_tui.cli", "bench", str(tasks), "--mode", "llm",
                           "--output", str(tmp_path / "o")], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert proc.returncode == 2 and "--judge-model" in proc.stderr


def test_a_nesting_bomb_from_the_model_scores_zero_and_counts_no_capability():
    """The answer and the tool arguments are the model's: nested past the parser's limit they
    are just wrong, not a RecursionError in the scorer or in the capability count."""
    from lis_tui.bench.report.capability import classify

    task = Task(id="j", problem_statement="p", ground_truth='{"a": 1}', reward="json")
    assert score("[" * 100_000, task) == 0.0
    assert classify("execute_bash", "[" * 100_000) == set()


def test_math_verify_says_nothing_of_the_timeouts_we_turned_off():
    """Its notice came four times into a bench's output (two modules, threads racing)."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("math_verify")
    code = ("import threading\nfrom lis_tui.bench.scoring.rewards import _math_verify\n"
            "ts = [threading.Thread(target=_math_verify, args=('1/2', '0.5')) for _ in range(4)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(_math_verify('\\\\frac{1}{2}', '0.5'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "True", done.stderr  # math-verify ran and compared
    assert "Timeout is disabled" not in done.stderr
