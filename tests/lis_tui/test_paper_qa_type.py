"""instruct_pretrain's `qa_type`, as the llm-in-sandbox package writes and reads it: a value
containing "multiple choice" is one answer or several by whether the reference has a comma;
"free-form" (or anything else) is open-ended. Our short names keep working."""
import pytest

from lis_tui.bench.paper.scorers import instruct_pretrain
from lis_tui.bench.tasks import Task

CASES = [
    ("Multiple Choice", "B", "B", 1.0),
    ("Multiple Choice", "B", "A or B", 0.0),  # one answer asked: two letters are wrong
    ("multiple choice", "A, C", "A, C", 1.0),
    ("multiple choice", "A, C", "A", 2 / 3),
    ("multiple choice", "A, C", "", 0.0),
    ("multiple", "AB", "A or B", 1.0),
    ("single", "B", "A or B", 0.0),
]


@pytest.mark.parametrize("qa_type, truth, answer, want", CASES)
def test_qa_type_picks_exact_or_f1(qa_type, truth, answer, want):
    row = Task("r", "Which?", ground_truth=truth, extra={"qa_type": qa_type})
    assert instruct_pretrain(answer, row) == pytest.approx(want)
