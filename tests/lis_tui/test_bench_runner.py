"""`lis-tui bench` end to end: real sandboxes, the real openai client, a scripted model server."""

import json
import os
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fakes.hostile import HOSTILE, SHOWN, raw_in
from fakes.openai_server import FakeOpenAI, call, delay, error, reply, submit
from lis_tui.bench import load_tasks
from lis_tui.bench.runner import BenchOptions, BenchRunner
from lis_tui.bench.tasks import Task
from lis_tui.config.settings import load_config

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[2]


def config_for(server, **agent):
    return load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0,
        **{f"agent.{k}": v for k, v in agent.items()}})


def truth_of(tasks):
    """The scripted model's knowledge: task text -> (answer file, the answer to write)."""
    def text(task):
        truth = task.ground_truth
        shown = truth if isinstance(truth, str) else json.dumps(truth)
        return rf"\boxed{{{shown}}}" if task.reward == "boxed" else shown
    return [(t.problem_statement, t.answer_file, text(t)) for t in tasks]


def oracle(tasks):
    """Sandbox mode: look at the files, write the answer, submit. LLM mode: reply with it."""
    known = truth_of(tasks)

    def answer(request):
        task_text = next(m["content"] for m in request.messages if m["role"] == "user")
        _, path, text = next(k for k in known if k[0] in task_text)
        if not request.tool_names:
            return reply(f"Worked it out.\nANSWER:\n{text}" if "\n" in text
                         else f"Worked it out.\nANSWER: {text}")
        done = len(request.tool_outputs)
        if done == 0:
            return reply("Looking first.", [call("execute_bash", {
                "command": "ls /testbed/input /testbed/documents 2>&1; python3 -c 'print(6*7)'"})])
        if done == 1:
            return reply(tool_calls=[call("str_replace_editor", {
                "command": "create", "path": f"/testbed/output/{path}", "file_text": text})])
        return submit()
    return answer


def run_bench(tasks, server, out, **options):
    options.setdefault("progress", None)
    runner = BenchRunner(tasks, config_for(server), None, BenchOptions(output=out, **options))
    return runner, runner.run()


def leftover_children():
    """Processes this test process started that still run (a sandbox left behind would be one)."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(stat.parent.name)
    return found


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def test_both_modes_on_demo_score_and_report(tmp_path):
    from lis_tui.bench.report.pages import write_reports

    tasks = load_tasks("demo")
    with FakeOpenAI(default=oracle(tasks)) as server:
        runner, outcome = run_bench(tasks, server, tmp_path, modes=("sandbox", "llm"), concurrency=4)
    assert not outcome.interrupted and outcome.ran == 8
    by_key = {r["key"]: r for r in outcome.results}
    assert len(by_key) == 8 and all(r["correct"] for r in by_key.values()), by_key
    box = by_key["demo-long-document|sandbox|0"]
    assert (box["finish_reason"], box["steps"], box["crashed"]) == ("submitted", 3, False)
    assert box["capability"] == {"computation": 1, "file_management": 2, "external_resources": 0}
    assert box["tokens"]["prompt"] > 0 and box["tokens"]["environment"] > 0
    trajectory = json.loads((tmp_path / box["trajectory"]).read_text())
    listing = trajectory["steps"][0]["tool_calls"][0]["output"]
    assert "part-01.txt" in listing and "42" in listing  # the documents were in the sandbox
    assert "recipe.csv" in json.loads((tmp_path / by_key["demo-input-file|sandbox|0"]["trajectory"])
                                      .read_text())["steps"][0]["tool_calls"][0]["output"]
    llm = by_key["demo-math|llm|0"]
    assert (llm["steps"], llm["answer"], llm["capability"]["computation"]) == (1, r"\boxed{400}", 0)

    summary = write_reports(outcome.results, tmp_path, title="demo")
    assert summary["comparison"]["accuracy_delta"] == 0.0
    assert summary["comparison"]["token_ratio"] > 1  # three calls against one
    assert json.loads((tmp_path / "summary.json").read_text())["episodes"] == 8
    md = (tmp_path / "summary.md").read_text()
    assert "| **overall** | 100.0% (n=4) | 100.0% (n=4) | +0.0 pts |" in md
    parser = _Tags()
    page = (tmp_path / "report.html").read_text()
    parser.feed(page)
    assert parser.tags.count("svg") == 3 and "table" in parser.tags
    # self-contained: nothing loaded from elsewhere, no script
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert 'href="http' not in page and "url(" not in page


def test_64_episodes_at_concurrency_16_and_a_crash_does_not_stop_the_rest(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    tasks = [Task(f"t{i:02d}", f"What is {i} + {i}? (task t{i:02d})", str(2 * i), reward="numeric")
             for i in range(62)]
    tasks.append(Task("crash", "Read the documents. (task crash)", "1", documents_dir=docs))
    tasks.append(Task("model-error", "Fail please. (task model-error)", "1"))
    docs.rmdir()  # gone after loading: staging the files raises inside the episode
    answer = oracle(tasks)

    def script(request):
        if "model-error" in request.messages[-1]["content"]:
            return error(400, "this prompt is not allowed")
        return answer(request)

    before = set(leftover_children())  # earlier tests in this process may have left some
    with FakeOpenAI(default=script) as server:
        runner, outcome = run_bench(tasks, server, tmp_path / "out", concurrency=16)
    assert len(outcome.results) == 64 and not outcome.interrupted
    by_id = {r["id"]: r for r in outcome.results}
    assert by_id["crash"]["crashed"] and by_id["crash"]["finish_reason"] == "error"
    assert "FileNotFoundError" in by_id["crash"]["message"]
    error_txt = (tmp_path / "out" / "episodes" / "crash.sandbox.0" / "error.txt").read_text()
    assert error_txt.startswith("the episode crashed: FileNotFoundError") and "Traceback" in error_txt
    assert by_id["model-error"]["finish_reason"] == "error" and not by_id["model-error"]["crashed"]
    assert "400" in by_id["model-error"]["message"]
    assert sum(r["correct"] for r in outcome.results) == 62
    assert not runner.ctx.sandboxes and not runner.ctx.agents
    assert set(leftover_children()) - before == set()

    docs.mkdir()  # the cause of the crash is fixed: a resume runs that episode again, only that
    with FakeOpenAI(default=script) as server:
        _, again = run_bench(tasks, server, tmp_path / "out", concurrency=16, resume=True)
    assert again.ran == sum(r["crashed"] for r in outcome.results) and len(again.results) == 64
    assert {r["id"]: r for r in again.results}["crash"]["correct"]


def write_tasks(path, count):
    path.write_text("".join(json.dumps({"id": f"q{i}", "problem_statement": f"Compute {i} * 3.",
                                        "ground_truth": str(3 * i), "reward": "numeric"}) + "\n"
                            for i in range(count)))
    return load_tasks(path)


def bench_cli(tasks_file, server, out, *extra, path=()):
    return subprocess.Popen(
        [sys.executable, "-m", "lis_tui.cli", "bench", str(tasks_file), "--output", str(out),
         "--base-url", server.base_url, "--model", "m", "--concurrency", "2", *extra],
        cwd=out.parent, env={**os.environ,
                             "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, path)]),
                             "XDG_CONFIG_HOME": str(out.parent / "config"),
                             "LIS_SCRATCH": str(out.parent / "scratch")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_cleanly_and_resume_finishes_the_rest(tmp_path, workers):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 12)
    answer = oracle(tasks)
    out = tmp_path / "out"
    with FakeOpenAI(default=lambda r: delay(0.15, answer(r))) as server:
        proc = bench_cli(tmp_path / "tasks.jsonl", server, out, "--workers", workers)
        results = out / "results.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not results.exists() or
                                               len(results.read_text().splitlines()) < 2):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "--resume" in err
        first = [json.loads(line) for line in results.read_text().splitlines()]
        assert 2 <= len(first) < 12
        assert all(r["finish_reason"] == "submitted" for r in first)
        assert (out / "summary.md").exists()
        # nothing but the folder every sandbox mounts its layers' tmpfs on, each in its own namespace
        assert [p.name for p in (tmp_path / "scratch").iterdir()] in ([], ["layers"])

        with pytest.raises(ValueError, match="exists: pass --resume"):
            BenchRunner(tasks, config_for(server), None, BenchOptions(output=out))

        resumed = bench_cli(tmp_path / "tasks.jsonl", server, out, "--resume", "--workers", workers)
        table, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    final = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(r["id"] for r in final) == sorted(t.id for t in tasks)  # each once
    assert all(r["correct"] for r in final)
    assert "| **overall** |" in table and "(n=12)" in table and "[12/12]" in err
    assert [p.name for p in (tmp_path / "scratch").iterdir()] in ([], ["layers"])  # every sandbox was removed


def test_hostile_ids_domains_and_answers_never_reach_a_report_or_the_terminal_raw(tmp_path):
    (tmp_path / "out").mkdir()
    evil = f"<script>alert(1)</script>{HOSTILE}"
    (tmp_path / "tasks.jsonl").write_text(json.dumps({
        "id": f"id{evil}", "domain": f"dom{evil}", "problem_statement": "Say it.",
        "ground_truth": "it", "reward": "exact"}) + "\n")

    def model(request):  # writes the hostile answer, then submits
        if request.tool_outputs:
            return submit()
        return reply(tool_calls=[call("str_replace_editor", {
            "command": "create", "path": "/testbed/output/answer.txt", "file_text": f"ans{evil}"})])

    with FakeOpenAI(default=model) as server:
        proc = bench_cli(tmp_path / "tasks.jsonl", server, tmp_path / "out")
        table, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    out = tmp_path / "out"
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["answer"] == f"ans{evil}" and record["id"] == f"id{evil}"  # the data, as it was
    md, page = (out / "summary.md").read_text(), (out / "report.html").read_text()
    for shown in (err, table, md, page):
        assert raw_in(shown) == [] and "<script>" not in shown
    assert "<script" not in page  # no tag at all, escaped or not: only text
    visible = "<script>alert(1)</script>" + "".join(SHOWN[:5]) + " " + SHOWN[5]
    assert f"| dom\\<script\\>alert(1)\\</script\\>" in md  # Markdown shows it as written
    assert f"dom{visible}" in "".join(_Text.of(page))
    assert not [p for p in (out / "episodes").rglob("*") if raw_in(p.name)]


class _Text(HTMLParser):
    @classmethod
    def of(cls, page):
        parser = cls()
        parser.text = []
        parser.feed(page)
        return parser.text

    def handle_data(self, data):
        self.text.append(data)


def test_every_smoke_task_is_solvable_in_both_modes(tmp_path):
    """Its files reach the sandbox (or the prompt), and an exact answer scores 1 everywhere."""
    tasks = load_tasks("smoke")
    with FakeOpenAI(default=oracle(tasks)) as server:
        _, outcome = run_bench(tasks, server, tmp_path, modes=("sandbox", "llm"), concurrency=8)
    wrong = [(r["key"], r["answer"][:60], r["message"]) for r in outcome.results
             if not r["correct"]]
    assert len(outcome.results) == 62 and wrong == []
    docs = json.loads((tmp_path / "episodes" / "doc-crates-1.sandbox.0" / "trajectory.json")
                      .read_text())["steps"][0]["tool_calls"][0]["output"]
    assert "part-06.txt" in docs
    llm = json.loads((tmp_path / "episodes" / "doc-crates-1.llm.0" / "trajectory.json").read_text())
    assert "Corrections: an earlier draft" in llm["messages"][-2]["content"]  # inlined documents


class _Lines:
    """A non-terminal stderr stand-in that says when a line appears."""

    def __init__(self):
        import threading
        self.text, self.changed = "", threading.Condition()

    def write(self, text):
        with self.changed:
            self.text += text
            self.changed.notify_all()

    def flush(self):
        pass

    def wait_for(self, needle, timeout=30.0):
        with self.changed:
            return self.changed.wait_for(lambda: needle in self.text, timeout)


def test_progress_shows_running_episodes_before_any_ends(tmp_path):
    import threading

    release = threading.Event()

    def held(request):  # no episode may end until the test has seen the first progress line
        release.wait(60)
        return submit()

    tasks = [Task(f"t{i}", f"What is {i} + {i}? (task t{i})", str(2 * i), reward="numeric") for i in range(3)]
    out = _Lines()
    with FakeOpenAI(default=held) as server:
        worker = threading.Thread(target=run_bench, args=(tasks, server, tmp_path / "out"),
                                  kwargs={"progress": out, "concurrency": 2})
        worker.start()
        try:
            assert out.wait_for("[0/3] running "), out.text
            first = out.text.splitlines()[0]
        finally:
            release.set()
            worker.join(60)
    assert "[0/3] running 1 | acc   -" in first or "[0/3] running 2 | acc   -" in first
    assert out.text.splitlines()[-1].startswith("#" * 20 + " [3/3] running 0")
