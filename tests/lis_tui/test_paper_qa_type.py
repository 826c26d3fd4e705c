"""instruct_pretrain's `qa_type`, as the llm-in-sandbox package writes and reads it: a value
containing "multiple choice" is one answer or several by whether the reference has a comma;
"free-form" (or anything else) is open-ended. The default scorer reads it as the package does
(by `domain` first; several answers split on commas); the lenient one keeps our short names."""
import pytest

from lis_tui.bench.paper import lenient, scorers
from lis_tui.bench.tasks import Task

pytest.importorskip("math_verify")
pytest.importorskip("rouge_score")

LENIENT = [
    ("Multiple Choice", "B", "B", 1.0),
    ("Multiple Choice", "B", "A or B", 0.0),  # one answer asked: two letters are wrong
    ("multiple choice", "A, C", "A, C", 1.0),
    ("multiple choice", "A, C", "A", 2 / 3),
    ("multiple choice", "A, C", "", 0.0),
    ("multiple", "AB", "A or B", 1.0),
    ("single", "B", "A or B", 0.0),
]


@pytest.mark.parametrize("qa_type, truth, answer, want", LENIENT)
def test_the_lenient_scorer_picks_exact_or_f1(qa_type, truth, answer, want):
    row = Task("r", "Which?", ground_truth=truth, domain="instruct_pretrain",
               extra={"qa_type": qa_type})
    assert lenient.instruct_pretrain(answer, row) == pytest.approx(want)


# (domain, qa_type, reference, answer, the package's score)
PACKAGE = [
    ("instruct_pretrain", "Multiple Choice", "A, C", "a, c", 1.0),   # split on commas, upper-cased
    ("instruct_pretrain", "Multiple Choice", "A, C", "AC", 0.0),
    ("instruct_pretrain", "Multiple Choice", "A, C", "A and C", 0.0),
    ("instruct_pretrain", "Multiple Choice", "A, C", "(A), (C)", 0.0),
    ("instruct_pretrain", "Multiple Choice", "A, C", "A", 2 / 3),
    ("instruct_pretrain", "Multiple Choice", "B", "A or B", 1.0),    # the last lone capital
    ("biomed", "Multiple Choice", "C", "Answer: C", 1.0),           # routed by domain
    ("math", "Free-form", "204", "204.", 0.0),
    ("math", "Free-form", "204", r"\boxed{204}", 1.0),
    ("general", "Free-form", "x", "x", 0.0),                        # the package crashes: 0
]


@pytest.mark.parametrize("domain, qa_type, truth, answer, want", PACKAGE)
def test_the_default_scorer_routes_by_domain_then_qa_type(domain, qa_type, truth, answer, want):
    row = Task("r", "Which?", ground_truth=truth, domain=domain, extra={"qa_type": qa_type})
    assert scorers.instruct_pretrain(answer, row) == pytest.approx(want)
    assert bool(scorers.row_note("instruct_pretrain", row)) is (domain == "general")
