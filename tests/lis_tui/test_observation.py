"""The paper's observation frame, case by case (what llm-in-sandbox 0.2.0's harness sends)."""
import pytest

from lis_tui.agent.observation import paper_observation, steps_remaining
from tools import ToolResult

LONG = "\n".join(f"l{i}" for i in range(1, 101))
CASES = [
    ("ok, no stderr", "execute_bash", ToolResult("hi", exit_code=0, stderr=""),
     "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nhi"),
    ("failed, both streams", "execute_bash", ToolResult("out", exit_code=2, stderr="no such file"),
     "Exit code: Error: Exit code 2\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nout\n"
     "\\[STDERR]\nno such file"),
    ("silent", "execute_bash", ToolResult("", exit_code=0, stderr="  \n"),
     "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n"),
    ("timed out", "execute_bash", ToolResult("[timed out]", exit_code=130, timed_out=True, stderr=""),
     "Exit code: -1\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n[timed out]"),
    ("a mistake, not a command", "execute_bash", ToolResult("Missing `command`.", error=True),
     "Execution output of \\[execute_bash]:\nMissing `command`."),
    ("editor", "str_replace_editor", ToolResult("File created."),
     "Execution output of \\[str_replace_editor]:\nFile created."),
    ("submit", "submit", ToolResult("Submitted.", submitted=True), "<<< Finished >>>"),
]


@pytest.mark.parametrize("tool, result, want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_kind_of_answer_is_framed_as_the_paper_frames_it(tool, result, want):
    assert paper_observation(tool, result, 20_000) == want


def test_a_long_stream_keeps_its_first_and_last_40_lines():
    text = paper_observation("execute_bash", ToolResult(LONG, exit_code=0, stderr=LONG), 20_000)
    out, err = text.split("\\[STDERR]\n")
    for part in (out, err):
        lines = part.rstrip("\n").splitlines()
        assert "l40" in lines and "l61" in lines and "l41" not in lines and "l60" not in lines
        assert "<Observation truncated in middle for saving context>" in lines
    assert len(paper_observation("execute_bash", ToolResult("x" * 5000, exit_code=0), 1000)) < 1200


def test_steps_remaining_counts_down_to_a_last_call():
    assert steps_remaining(3) == "Steps Remaining: 3"
    assert steps_remaining(0).startswith("You have reached the maximum number of steps")
