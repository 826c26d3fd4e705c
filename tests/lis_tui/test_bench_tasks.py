"""Task files in every form, the mistakes people make in them, and the built-in sets."""

import json
import re

import pytest

from lis_tui.bench import BUILTIN_SETS, TaskError, load_tasks, score
from lis_tui.bench.report.capability import CapabilityCounter, classify, classify_command
from lis_tui.bench.episode import llm_prompt, task_files
from lis_tui.bench.scoring.rewards import parse_reward

PAPER_TASK = {"id": "q1", "problem_statement": "Sum the column.", "ground_truth": "6",
              "input_files": {"data.csv": "x\n1\n2\n3\n"}, "domain": "data", "reward": "numeric"}


def test_a_json_list_in_the_papers_format(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([PAPER_TASK, {"id": "q2", "problem_statement": "Say hi.",
                                             "ground_truth": "hi"}]))
    first, second = load_tasks(path)
    assert (first.id, first.domain, first.reward, first.input_files) == (
        "q1", "data", "numeric", {"data.csv": "x\n1\n2\n3\n"})
    assert (second.domain, second.reward, second.answer_file) == ("general", "normalized", "answer.txt")


def test_jsonl_and_a_file_wide_reward(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"t{i}", "problem_statement": "p",
                                          "ground_truth": str(i)}) for i in range(3)) + "\n\n")
    assert [t.id for t in load_tasks(path)] == ["t0", "t1", "t2"]
    assert {t.reward for t in load_tasks(path, default_reward="numeric:0")} == {"numeric:0"}
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"reward": "exact", "tasks": [PAPER_TASK | {"reward": None}]}))
    assert load_tasks(wrapped)[0].reward == "exact"


def test_the_task_directory_form(tmp_path):
    task = tmp_path / "set" / "count-lines"
    (task / "input" / "sub").mkdir(parents=True)
    (task / "input" / "sub" / "a.txt").write_text("one\ntwo\n")
    (task / "documents").mkdir()
    (task / "documents" / "doc.md").write_text("the fact")
    (task / "task.toml").write_text('problem_statement = """How many lines?"""\n'
                                    'ground_truth = "2"\nreward = "numeric"\ndomain = "files"\n')
    (tmp_path / "set" / "notes").mkdir()  # a folder without task.toml is not a task
    [loaded] = load_tasks(tmp_path / "set")
    assert (loaded.id, loaded.domain, loaded.input_dir, loaded.documents_dir) == (
        "count-lines", "files", task / "input", task / "documents")
    assert task_files(loaded) == [("input/sub/a.txt", "one\ntwo\n"), ("documents/doc.md", "the fact")]


def test_documents_dir_is_relative_to_the_task_file(tmp_path):
    (tmp_path / "docs").mkdir()
    path = tmp_path / "t.json"
    path.write_text(json.dumps([PAPER_TASK | {"documents_dir": "docs"}]))
    assert load_tasks(path)[0].documents_dir == tmp_path / "docs"


def test_a_task_file_names_folders_only_inside_its_own_folder_or_allow_dir(tmp_path, monkeypatch, capsys):
    """A downloaded data set naming the person's ~/.ssh: `~`, `..`, an absolute path and a link out
    are each refused in one line, before anything is read, by bench, rollout, env serve --tasks and
    paper rows alike; --allow-dir lets the person open a folder; a link inside a task's folder to a
    file outside is left out of what llm mode inlines."""
    from lis_tui.bench.paper import load_suite
    from lis_tui.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    (secret / "id_ed25519").write_text("PRIVATE KEY")
    docs = tmp_path / "sets" / "docs"
    docs.mkdir(parents=True)
    (docs / "out").symlink_to(secret)
    path = tmp_path / "sets" / "t.jsonl"
    refused = "`input_dir` is not inside the task file's folder or --allow-dir"
    for named in ("~/.ssh", "../home/.ssh", str(secret), "docs/out"):
        path.write_text(json.dumps(PAPER_TASK | {"input_dir": named}) + "\n")
        for load in (lambda: load_tasks(path), lambda: load_suite("long_context", str(path))):
            with pytest.raises(TaskError, match=re.escape(refused)) as err:
                load()
            assert "\n" not in str(err.value) and "--allow-dir DIR" in str(err.value)
    for argv in (["bench", str(path), "--mode", "llm", "--base-url", "http://127.0.0.1:9/v1"],
                 ["rollout", str(path), "--policy-url", "http://127.0.0.1:9/v1", "--output", str(tmp_path / "o")],
                 ["env", "serve", "--tasks", str(path), "--port", "0"]):
        assert main(argv) == 2
        said = capsys.readouterr().err
        assert refused in said and len(said.splitlines()) == 1, said
    path.write_text(json.dumps(PAPER_TASK | {"input_dir": "../home/.ssh"}) + "\n")
    assert load_tasks(path, allow=tmp_path / "home")[0].input_dir == secret  # the person's choice
    (docs / "key").symlink_to(secret / "id_ed25519")
    (docs / "a.txt").write_text("the doc")
    path.write_text(json.dumps(PAPER_TASK | {"input_files": {}, "documents_dir": "docs"}) + "\n")
    assert task_files(load_tasks(path)[0]) == [("documents/a.txt", "the doc")]


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "must be a JSON object"),
    ('{"id": 1}', "expected a JSON list"),
    ("[{\"id\": \"a\"}]", "`id` and `problem_statement` are required"),
    ('[{"id": "a", "problem_statement": "p", "input_files": "{oops"}]', "is a string but not JSON"),
    ('[{"id": "a", "problem_statement": "p", "reward": "fuzzy"}]', "unknown reward 'fuzzy'"),
    ('[{"id": "a", "problem_statement": "p", "input_files": {"../x": "y"}}]', "without `..`"),
    ('[{"id": "a", "problem_statement": "p", "input_files": {"x": 3}}]', "map file names"),
    ('[{"id": "a", "problem_statement": "p", "documents_dir": "nope"}]', "is not a directory"),
    ('[{"id": "a", "problem_statement": "p"}, {"id": "a", "problem_statement": "q"}]',
     "appears twice"),
    ("[{oops", "not valid JSON"),
])
def test_broken_task_files_say_what_to_fix(tmp_path, content, message):
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_tasks(path)


def test_a_bad_jsonl_line_names_its_line_and_a_missing_file_the_choices(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(PAPER_TASK) + "\n{not json}\n")
    with pytest.raises(TaskError, match=r"t.jsonl:2: not valid JSON"):
        load_tasks(path)
    with pytest.raises(TaskError, match="built-in set \\(demo, smoke\\)"):
        load_tasks(tmp_path / "missing.json")


@pytest.mark.parametrize("name", BUILTIN_SETS)
def test_the_built_in_sets_load_and_their_ground_truths_score_1(name):
    tasks = load_tasks(name)
    assert len(tasks) == (4 if name == "demo" else 31)
    for task in tasks:
        kind, _ = parse_reward(task.reward)
        truth = task.ground_truth
        answer = rf"\boxed{{{truth}}}" if kind == "boxed" else truth if isinstance(truth, str) \
            else json.dumps(truth)
        assert score(answer, task) == 1.0, task.id


def test_the_smoke_set_needs_the_sandbox():
    tasks = load_tasks("smoke")
    domains = {t.domain for t in tasks}
    assert domains == {"arithmetic", "csv", "long_document", "format"}
    docs = [t for t in tasks if t.domain == "long_document"]
    assert all(len(t.documents) > 3 and sum(map(len, t.documents.values())) > 30_000 for t in docs)
    assert all("/testbed/input/" in t.problem_statement for t in tasks if t.input_files)
    assert any(t.answer_file != "answer.txt" for t in tasks)


def test_llm_mode_inlines_the_files_a_task_brings():
    task = load_tasks("demo")[2]
    prompt = llm_prompt(task)
    assert '<file path="/testbed/input/recipe.csv">\nitem,grams' in prompt
    assert prompt.endswith("the answer is that file's exact contents.")


# -- capability classification ----------------------------------------------------------------

@pytest.mark.parametrize("command, kinds", [
    ("python3 solve.py", {"computation"}),
    ("cd /testbed && python3 -c 'print(2**100)'", {"computation"}),
    ("ls -la /testbed/input", {"file_management"}),
    ("grep -rn crates /testbed/documents | head -20", {"file_management"}),
    ("pip install sympy", {"external_resources"}),
    ("python3 -m pip install numpy", {"external_resources"}),
    ("apt-get install -y jq", {"external_resources"}),
    ("curl -sL https://example.org/data.csv -o data.csv", {"external_resources"}),
    ("git clone https://github.com/x/y", {"external_resources"}),
    ("FOO=1 timeout 60 ./run.sh", {"computation"}),
    ("echo $((2 + 3))", {"computation"}),
    ("cat > s.py <<'EOF'\nls\nimport requests\nrequests.get('http://x')\nEOF\npython3 s.py",
     {"file_management", "computation", "external_resources"}),
    ("echo hi", set()),
    ("", set()),
])
def test_commands_are_classified_as_the_paper_does(command, kinds):
    assert classify_command(command) == kinds


def test_tool_calls_and_steps_are_counted():
    assert classify("str_replace_editor", '{"command": "view", "path": "/testbed"}') == \
        {"file_management"}
    assert classify("submit", "{}") == set()
    assert classify("execute_bash", "{broken json") == set()

    class Step:  # the shape of events.StepFinished / StepRecord that the counter reads
        def __init__(self, *calls):
            self.record = type("R", (), {"tool_calls": [dict(name=n, arguments=json.dumps(a))
                                                        for n, a in calls]})()

    from lis_tui.agent.events import StepFinished
    counter = CapabilityCounter()
    for step in (Step(("execute_bash", {"command": "ls"}), ("execute_bash", {"command": "ls -l"})),
                 Step(("execute_bash", {"command": "python3 x.py"})), Step(("submit", {}))):
        counter.on_event(StepFinished(0, step.record, []))
    assert counter.steps == 3
    assert counter.counts == {"computation": 1, "file_management": 1, "external_resources": 0}


# -- the command line's refusals ------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["bench", "nope.jsonl"], "no task file or directory 'nope.jsonl'"),
    (["bench", "demo", "--workspace", "."], "do not apply to bench"),
    (["bench", "demo", "--resume"], "--resume needs --output DIR"),
    (["bench", "demo", "--reward", "fuzzy"], "unknown reward 'fuzzy'"),
    (["bench", "demo", "--concurrency", "0", "--output", "{tmp}/o"], "at least 1"),
])
def test_bench_usage_errors_exit_2_with_the_fix(argv, message, tmp_path, capsys, monkeypatch):
    from lis_tui.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_bench_stops_at_once_when_the_model_server_is_down(tmp_path, capsys, monkeypatch):
    from lis_tui.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["bench", "demo", "--mode", "llm", "--base-url", "http://127.0.0.1:9/v1",
                 "--model", "m", "--output", str(tmp_path / "o")])
    assert code == 1 and "is the server running?" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("given", ["set", ".", "./set/"])
def test_a_folder_of_task_folders_given_by_a_relative_path(tmp_path, monkeypatch, given):
    task = tmp_path / "set" / "t1"
    (task / "input").mkdir(parents=True)
    (task / "input" / "a.txt").write_text("x")
    (task / "task.toml").write_text('problem_statement = "p"\nground_truth = "1"\n')
    monkeypatch.chdir(tmp_path / "set" if given == "." else tmp_path)
    [loaded] = load_tasks(given)
    assert loaded.input_dir == task / "input" and loaded.input_dir.is_absolute()
    assert task_files(loaded) == [("input/a.txt", "x")]
