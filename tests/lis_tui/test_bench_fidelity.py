"""The paper-fidelity fixes (issue 16): rewards as the paper's scorers grade, rows as it loads them.

Cases written from the paper's definitions: right, wrong, badly formatted, empty."""
import json

import pytest

from lis_tui.bench.scoring.answers import extract_choices
from lis_tui.bench.scoring.rewards import boxed, choice, math_verify_missing
from lis_tui.bench.tasks import load_tasks

needs_math_verify = pytest.mark.skipif(math_verify_missing(), reason="pip install 'lis-tui[paper]'")


@pytest.mark.parametrize("answer, truth, expected", [
    ("A", "A", 1.0),                                # right
    ("C", "A", 0.0),                                # wrong
    ("A or D", "A", 0.0),                           # two picks for one answer
    ("A or D", "AD", 1.0),                          # both read, not just D
    ("The answer is (B) and (C)", "BC", 1.0),
    ("B", "BC", 2 / 3),                             # F1: precision 1, recall 1/2
    ("A, B, C", "BC", 0.8),                         # F1: precision 2/3, recall 1
    ("E", "BC", 0.0),
    ("AD", "A, D", 1.0),
    ("", "A", 0.0),                                 # empty
    ("no idea", "A", 0.0),                          # badly formatted
])
def test_choice_reads_every_letter_and_gives_f1_for_several(answer, truth, expected):
    assert choice(answer, truth) == pytest.approx(expected)


def test_extract_choices_forms():
    assert extract_choices("A or D") == {"A", "D"}
    assert extract_choices("Answer: B") == {"B"}
    assert extract_choices("no idea") == set()


@pytest.mark.parametrize("answer, truth, expected", [
    (r"so \boxed{400}", "400", 1.0),
    ("400", "400", 1.0),                            # unboxed: the raw answer, as the paper
    (r"\boxed{401}", "400", 0.0),
    ("", "400", 0.0),
    (r"\boxed{", "400", 0.0),                       # badly formatted
])
def test_boxed_falls_back_to_the_raw_answer(answer, truth, expected):
    assert boxed(answer, truth) == expected


@needs_math_verify
@pytest.mark.parametrize("answer, truth", [
    (r"\boxed{\sqrt{12}}", r"2\sqrt{3}"), (r"\boxed{10^6}", "1000000"),
    (r"\boxed{1+x^2}", "x^2+1"), (r"\boxed{\frac{1}{2}}", "0.5")])
def test_boxed_with_math_verify_sees_equal_expressions(answer, truth):
    assert boxed(answer, truth) == 1.0


def test_rows_load_as_the_package_writes_them(tmp_path):
    rows = [{"id": "a", "problem_statement": "p", "ground_truth": "1", "domain": "x",
             "input_files": json.dumps({"doc.txt": "hello", "gone.txt": None}), "qa_type": "mcq"},
            {"id": "b", "problem_statement": "q", "input_files": {"n.txt": "x"}},
            {"id": "c", "problem_statement": "r", "input_files": ""}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    a, b, c = load_tasks(path)
    assert a.input_files == {"doc.txt": "hello"} and a.extra == {"qa_type": "mcq"}
    assert b.input_files == {"n.txt": "x"} and c.input_files == {}
