"""`lis-tui bench paper:SUITE DATA` end to end: rows in the published schema for every suite,
real sandboxes, a scripted model answering right and wrong, the score of each row."""
import json
import re
from dataclasses import replace

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from lis_tui.bench.scoring.judge import Judge
from lis_tui.bench.paper import load_suite
from lis_tui.bench.runner import BenchOptions, BenchRunner
from lis_tui.bench.report.summary import summarize
from test_bench_runner import bench_cli, config_for
from test_paper_instructions import nltk_data  # noqa: F401 (a fixture)

pytestmark = pytest.mark.sandbox
DOCS = json.dumps({"report.txt": "The plant opened in 1987.", "empty.txt": None})
NUMBERS = json.dumps({"instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2}]})
# suite -> rows; `say` is what the scripted model answers, `doc` an answer read from a document
# in the sandbox (so a right score proves the suite put the documents where it says), `want`
# the expected reward.
ROWS = {
    "math": [{"id": "m1", "problem_statement": "Compute sqrt(12).", "ground_truth": r"2\sqrt{3}",
              "say": r"\boxed{\sqrt{12}}", "want": 1.0},
             {"id": "m2", "problem_statement": "Compute 2+2.", "ground_truth": "4", "say": "5",
              "want": 0.0}],
    "physics": [{"id": "p1", "problem_statement": "g in m/s^2?", "ground_truth": "9.81",
                 "say": r"\boxed{9.81}", "want": 1.0},
                {"id": "p2", "problem_statement": "c in km/s?", "ground_truth": "299792",
                 "say": "", "want": 0.0}],
    "biomed": [{"id": "b1", "problem_statement": "Which is a kinase? (A) PKA (B) Hb",
                "ground_truth": "A", "say": "Answer: A", "want": 1.0},
               # several letters: exact, as the package scores them (no partial credit)
               {"id": "b2", "problem_statement": "Pick both enzymes. (A) PKA (B) Hb (C) Taq",
                "ground_truth": "AC", "say": "A", "want": 0.0}],
    "long_context": [{"id": "l1", "problem_statement": "When did the plant open?",
                      "ground_truth": "The plant opened in 1987.", "input_files": DOCS,
                      "doc": "report.txt", "want": 1.0},
                     {"id": "l2", "problem_statement": "Who built the plant?",
                      "ground_truth": "Acme", "input_files": DOCS, "say": "Globex", "want": 0.0}],
    "instruct_follow": [  # the package's form: the instructions as JSON in ground_truth
        {"id": "f1", "problem_statement": "Write exactly two numbers.", "ground_truth": NUMBERS,
         "say": "1 and 22", "want": 1.0},
        {"id": "f2", "problem_statement": "Write two numbers, no more.", "ground_truth": NUMBERS,
         "say": "1, 2 and 3", "want": 0.0},
        # loose mode drops the first line
        {"id": "f3", "problem_statement": "Write with no whitespace at all.",
         "ground_truth": json.dumps({"instruction_id_list": ["format:no_whitespace"],
                                     "kwargs": [{}]}),
         "say": "Sure here:\nno_space_at_all", "want": 1.0}],
    "instruct_pretrain": [
        {"id": "i1", "problem_statement": "Year it opened? Read the report.",
         "qa_type": "Free-form",
         "domain": "instruct_pretrain", "ground_truth": "The plant opened in 1987.",
         "input_files": DOCS, "doc": "report.txt", "want": 1.0},
        {"id": "i2", "problem_statement": "Which are true? (A) x (B) y (C) z",
         "qa_type": "Multiple Choice", "domain": "instruct_pretrain", "ground_truth": "A, B",
         "say": "a, b", "want": 1.0},
        # one answer: the package reads the last lone capital, here the pronoun
        {"id": "i3", "problem_statement": "Which is true? (A) x (B) y",
         "qa_type": "Multiple Choice",
         "domain": "instruct_pretrain", "ground_truth": "B", "say": "B, I think", "want": 0.0}],
}


def scripted(rows):
    """Sandbox mode: read the document or write the answer to /testbed/answer.txt, submit.
    LLM mode: reply with it. As the judge: CORRECT when the answer holds the reference."""
    def answer(request):
        text = next(m["content"] for m in request.messages if m["role"] == "user")
        if "<reference>" in text:
            ref = text.split("<reference>\n")[1].split("\n</reference>")[0]
            got = text.split("<answer>\n")[1].split("\n</answer>")[0]
            return reply("CORRECT" if ref.strip() in got else "INCORRECT")
        row = next(r for r in rows if r["problem_statement"] in text)
        said = row.get("say", "The plant opened in 1987.")
        if not request.tool_names:
            return reply(said)
        if request.tool_outputs:
            return submit()
        if "doc" in row:
            return reply(tool_calls=[call("execute_bash", {
                "command": f"cat /testbed/documents/{row['doc']} > /testbed/answer.txt"})])
        return reply(tool_calls=[call("str_replace_editor", {
            "command": "create", "path": "/testbed/answer.txt", "file_text": said})])
    return answer


def test_every_suite_scores_each_row_as_the_paper_defines(tmp_path, nltk_data):
    pytest.importorskip("if_verifiable")  # instruct_follow's default scorer: IFBench's checks
    tasks, rows = [], [r for suite in ROWS.values() for r in suite]
    for suite, suite_rows in ROWS.items():
        path = tmp_path / f"{suite}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in suite_rows))
        tasks += load_suite(suite, str(path))
    with FakeOpenAI(default=scripted(rows)) as server:
        config = config_for(server)
        judge = Judge(replace(config.model, model="judge", stream=False))
        runner = BenchRunner(tasks, config, None, BenchOptions(
            output=tmp_path / "out", modes=("sandbox", "llm"), concurrency=2, progress=None),
            judge)
        results = runner.run().results
        judge.close()
    want = {r["id"]: r["want"] for r in rows}
    got = {(r["id"], r["mode"]): r["reward"] for r in results}
    assert not [r for r in results if r["crashed"] or r["reward_error"]]
    for (row_id, mode), reward in got.items():
        assert reward == pytest.approx(want[row_id]), (row_id, mode)
    assert len(got) == 2 * len(rows)
    groups = summarize(results)["groups"]  # the per-suite table's numbers
    assert set(groups) == set(ROWS)
    for suite, suite_rows in ROWS.items():
        right = sum(r["want"] >= 1.0 for r in suite_rows) / len(suite_rows)
        assert groups[suite]["modes"]["sandbox"]["accuracy"] == pytest.approx(right), suite
        assert groups[suite]["modes"]["llm"]["accuracy"] == pytest.approx(right), suite
        assert groups[suite]["accuracy_delta"] == 0.0


def test_chem_from_parquet_through_the_cli_with_suite(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    rows = [{"id": "c1", "domain": "chem", "problem_statement": "Largest molar mass? (A) CO2 (B) SO2",
             "ground_truth": "B", "input_files": "{}", "say": "The answer is B."},
            {"id": "c2", "domain": "chem", "problem_statement": "Noble gas? (A) Ne (B) N2",
             "ground_truth": "A", "input_files": "{}", "say": "A or B"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "chem.parquet")
    out = tmp_path / "out"
    with FakeOpenAI(default=counted(scripted(rows))) as server:
        proc = bench_cli(tmp_path / "chem.parquet", server, out, "--suite", "chem", "--mode", "both")
        _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["id"], r["mode"]): r["reward"] for r in results} == {
        ("c1", "sandbox"): 1.0, ("c1", "llm"): 1.0, ("c2", "sandbox"): 0.0, ("c2", "llm"): 0.0}
    # The per-suite table: two sandbox calls of 100+10 tokens (the last one is the whole
    # trajectory) against one LLM call of 400+50; one of two sandbox steps managed a file.
    md = (out / "summary.md").read_text()
    assert "## Per suite: sandbox against LLM" in md
    assert ("| chem | 50.0% (n=2) | 50.0% (n=2) | +0.0 pts | 0.500 | 0.500 | 220 | 450 | 0.49x | 0.24x "
            "| 0.0% | 50.0% | 0.0% |") in md
    page = (out / "report.html").read_text()
    assert f"<dd>{server.base_url}</dd>" in page and "<dd>m</dd>" in page
    links = re.findall(r'<a href="([^"]+)">trajectory</a>', page)
    assert len(links) == 4 and all((out / link).is_file() for link in links)


def counted(answer):
    """The scripted answers with fixed token counts: 100+10 a sandbox call, 400+50 an LLM one."""
    def with_usage(request):
        r = answer(request)
        prompt, completion = (100, 10) if request.tool_names else (400, 50)
        return replace(r, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion})
    return with_usage


def test_a_suite_asks_for_data_and_names_the_suites(tmp_path):
    from lis_tui.bench.tasks import TaskError
    with pytest.raises(TaskError, match="the suites are math, physics"):
        load_suite("algebra", str(tmp_path))
    with pytest.raises(TaskError, match="no .json, .jsonl or .parquet"):
        load_suite("chem", str(tmp_path))
    with pytest.raises(TaskError, match="hf:NAME:CONFIG"):
        load_suite("chem", "hf:only-a-name")


def probing(seen):
    """Sandbox mode: a command that writes to both streams and fails, the answer, submit; every
    request's messages are kept in `seen`."""
    def answer(request):
        seen.append(request.messages)
        step = len(request.tool_outputs)
        if step == 0:
            return reply(tool_calls=[call("execute_bash", {"command": "echo hi; ls /nope"})])
        if step == 1:
            return reply(tool_calls=[call("str_replace_editor", {
                "command": "create", "path": "/testbed/answer.txt", "file_text": r"\boxed{4}"})])
        return submit()
    return answer


@pytest.mark.parametrize("chosen", [None, "lis-tui"])
def test_a_paper_suite_answers_tools_in_the_papers_frame_unless_told_otherwise(tmp_path, chosen):
    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"id": "m", "problem_statement": "2+2?", "ground_truth": "4"}) + "\n")
    seen = []
    with FakeOpenAI(default=probing(seen)) as server:
        config = config_for(server, max_steps=5, **({"observation": chosen} if chosen else {}))
        runner = BenchRunner(load_suite("math", str(path)), config, None, BenchOptions(
            output=tmp_path / "out", progress=None))
        (result,) = runner.run().results
    assert result["reward"] == 1.0 and result["suite"] == "math"
    first, second = seen[0][-1]["content"], seen[1][-1]["content"]
    missing = "ls: cannot access '/nope': No such file or directory"
    if chosen is None:
        assert first.endswith("\nSteps Remaining: 5")
        # each stream as written, its final newline kept (the package's frame, byte for byte)
        assert second == ("Exit code: Error: Exit code 2\nExecution output of \\[execute_bash]:\n"
                          f"\\[STDOUT]\nhi\n\n\\[STDERR]\n{missing}\n\nSteps Remaining: 4")
        assert seen[2][-1]["content"].startswith("Execution output of \\[str_replace_editor]:")
    else:
        assert "Steps Remaining" not in first
        assert second == f"hi\n{missing}\n[exit code 2]"


def test_physics_through_the_cli_is_judged_and_math_verify_only_when_asked(tmp_path):
    rows = ROWS["physics"] + [{"id": "p3", "problem_statement": "h in J s?",
                               "ground_truth": "6.626e-34", "say": "6.0e-34", "want": 0.0}]
    data = tmp_path / "physics.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    with FakeOpenAI(default=scripted(rows)) as server:
        refused = bench_cli("paper:physics", server, tmp_path / "refused", str(data))
        _, refusal = refused.communicate(timeout=120)
        asked_before = len(server.chat_requests)
        proc = bench_cli("paper:physics", server, out, str(data), "--mode", "both",
                         "--judge-model", "judge")
        _, err = proc.communicate(timeout=240)
        judged = [r for r in server.chat_requests if r.body["model"] == "judge"]
    assert refused.returncode == 2 and asked_before == 0
    assert "--judge-model" in refusal and "--suite-scorer math-verify" in refusal, refusal
    assert "--suite-scorer lenient" not in refusal  # it needs a judge too
    assert not (tmp_path / "refused" / "results.jsonl").exists()
    assert proc.returncode == 0, err
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["id"], r["mode"]): r["reward"] for r in results} == {
        (r["id"], mode): r["want"] for r in rows for mode in ("sandbox", "llm")}
    assert not [r for r in results if r["reward_error"] or r["notes"]]
    # every answer, p2's empty one too, is judged 4 times at 0.7, as the package does
    assert len(judged) == 3 * 2 * 4 and all("<question>" in r.last_content for r in judged)
    assert {(r.body["temperature"], r.body["max_tokens"]) for r in judged} == {(0.7, 16384)}
    md = (out / "summary.md").read_text()
    assert "| physics | 33.3% (n=3) | 33.3% (n=3) | +0.0 pts |" in md, md
    assert "not the paper's" not in md

    by_math = tmp_path / "by-math"
    with FakeOpenAI(default=scripted(rows)) as server:
        proc = bench_cli("paper:physics", server, by_math, str(data), "--suite-scorer",
                         "math-verify")
        _, err = proc.communicate(timeout=240)
        assert not [r for r in server.chat_requests if r.body["model"] == "judge"]
    assert proc.returncode == 0, err
    results = [json.loads(line) for line in (by_math / "results.jsonl").read_text().splitlines()]
    assert {r["id"]: r["reward"] for r in results} == {"p1": 1.0, "p2": 0.0, "p3": 0.0}
    assert "not the paper's metric" in (by_math / "summary.md").read_text()
