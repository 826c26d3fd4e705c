"""`--prompts llm-in-sandbox:SUITE` against a small stand-in for the installed package, laid out
as llm-in-sandbox 0.2.0 is (benchmark/SUITE/config.yaml, vanilla_llm_prompt.py), with text of
our own. Its `__init__` raises: reading the prompts must not import the package (the real one
pulls in litellm and docker)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from lis_tui.config.toml_text import ConfigError
from lis_tui.prompts import load_prompts

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """\
dataset: "someone/some-bench"
system_prompt: |-
  You are a careful solver.{command_docs}{demo}
  Work in {working_dir}; files are in {input_dir}.
  Put \\\\boxed{{}} answers in {output_dir}/answer.txt, as in \\\\boxed{{answer}}.
instance_prompt: |-
  PROBLEM:
  {problem_statement}
  Answer file: {output_dir}/answer.txt
output_dir: "/testbed"
"""
VANILLA = '''\
def create_prompt(problem_data):
    return "BASELINE " + problem_data["problem_statement"] + " [" + problem_data["id"] + "]"
'''


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    root = tmp_path / "site" / "llm_in_sandbox"
    (root / "benchmark" / "math").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "__init__.py").write_text('raise ImportError("the package was imported")\n')
    (root / "benchmark" / "__init__.py").write_text("")
    (root / "benchmark" / "math" / "config.yaml").write_text(CONFIG)
    (root / "benchmark" / "math" / "vanilla_llm_prompt.py").write_text(VANILLA)
    (root / "config" / "general.yaml").write_text(CONFIG.replace("careful", "general"))
    monkeypatch.syspath_prepend(str(root.parent))
    from lis_tui.prompts.package import vanilla_prompt
    vanilla_prompt.cache_clear()
    yield root.parent
    vanilla_prompt.cache_clear()


def test_a_suites_prompts_become_templates_of_ours(fake_package):
    p = load_prompts("llm-in-sandbox:math")
    assert p.system == ("You are a careful solver.\nWork in {working_dir}; files are in {input_dir}.\n"
                        "Put \\\\boxed{} answers in {output_dir}/answer.txt, as in \\\\boxed{answer}.")
    assert p.instance == "PROBLEM:\n{problem_statement}\nAnswer file: {output_dir}/answer.txt"
    assert (p.llm_system, p.llm_instance) == ("", "{task}")
    assert "general solver" in load_prompts("llm-in-sandbox:general").system
    assert "llm_in_sandbox" not in sys.modules


def test_an_unknown_suite_lists_the_ones_there_are(fake_package):
    with pytest.raises(ConfigError, match=r"no prompts for 'algebra'; it has: math, general"):
        load_prompts("llm-in-sandbox:algebra")
    with pytest.raises(ConfigError, match="no prompts for '../math'"):
        load_prompts("llm-in-sandbox:../math")


def test_a_field_we_do_not_fill_is_named(fake_package):
    (fake_package / "llm_in_sandbox" / "benchmark" / "math" / "config.yaml").write_text(
        CONFIG.replace("{problem_statement}", "{problem_statement} {hint}"))
    with pytest.raises(ConfigError, match=r"uses \{hint\}, which lis-tui does not fill"):
        load_prompts("llm-in-sandbox:math")


def test_without_the_package_the_error_names_the_install_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "lis_tui.cli", "bench", "demo", "--prompts",
                           "llm-in-sandbox:math", "--base-url", "http://127.0.0.1:9/v1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "not installed; run: pip install llm-in-sandbox" in proc.stderr
    assert not (tmp_path / "lis-bench").exists()  # stopped before any episode


@pytest.mark.sandbox
def test_bench_runs_a_suite_with_the_packages_prompts_in_both_modes(tmp_path, fake_package):
    rows = tmp_path / "math.jsonl"
    rows.write_text(json.dumps({"id": "m1", "problem_statement": "What is 2+2?",
                                "ground_truth": "4"}) + "\n")
    seen = {}

    def model(request):
        if not request.tool_names:
            seen["llm"] = request.messages
            return reply(r"\boxed{4}")
        seen.setdefault("sandbox", request.messages)
        if request.tool_outputs:
            return submit()
        return reply(tool_calls=[call("str_replace_editor", {
            "command": "create", "path": "/testbed/answer.txt", "file_text": r"\boxed{4}"})])

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{fake_package}",
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "LIS_SCRATCH": str(tmp_path / "scratch")}
    with FakeOpenAI(default=model) as server:
        # options before DATA: paper:SUITE's DATA may come after them
        proc = subprocess.run(
            [sys.executable, "-m", "lis_tui.cli", "bench", "paper:math", "--mode", "both",
             "--prompts", "llm-in-sandbox:math", "--base-url", server.base_url, "--model", "m",
             "--output", str(out), "-q", str(rows)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    system, user = seen["sandbox"][0]["content"], seen["sandbox"][1]["content"]
    assert system.startswith("You are a careful solver.\nWork in /testbed; files are in "
                             "/testbed/documents.\nPut \\\\boxed{} answers in /testbed/answer.txt")
    assert user.startswith("PROBLEM:\nWhat is 2+2?\nAnswer file: /testbed/answer.txt")
    assert seen["llm"] == [{"role": "user", "content": "BASELINE What is 2+2? [m1]"}]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["mode"], r["reward"]) for r in results) == [("llm", 1.0), ("sandbox", 1.0)]
