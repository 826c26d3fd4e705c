"""Every absolute path the prompts name exists in that mode's sandbox: the system message and
the first user message of `run` (plain, `--input-dir`, `--workspace`, both), of each paper
suite's layout, and the tool descriptions an MCP client reads. The scripted model's first command
tests each path inside the sandbox the prompt was written for; beside a workspace, nothing the
model keeps for itself (answer, scratch) is a change to the project."""

import json
import re
import shlex
from dataclasses import replace

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit
from isolation import SandboxSpec
from lis_tui.api import run_task
from lis_tui.bench.paper import SUITES, load_suite
from lis_tui.bench.runner import BenchOptions, BenchRunner
from lis_tui.config.settings import load_config
from lis_tui.servers.mcp import SandboxTools
from test_paper_instructions import nltk_data  # noqa: F401 (a fixture: instruct_follow's scorer needs it)

pytestmark = pytest.mark.sandbox
# An absolute path in prose: after a space, a quote, a backtick or a bracket; not a URL's path.
PATH = re.compile(r"(?:(?<=^)|(?<=[\s`'\"(\[]))(/[A-Za-z0-9_.\-/]+)", re.M)
MISSING = "MISSING:"


def named_paths(text: str) -> set[str]:
    return {found.rstrip(".,;:)/") or "/" for found in PATH.findall(text)}


def check_command(paths: set[str]) -> str:
    """Each path must exist; the answer file is one to write, so its folder must."""
    wanted = {p.rsplit("/", 1)[0] if p.endswith("/answer.txt") else p for p in paths}
    return " ".join(f"test -e {shlex.quote(p)} || echo {MISSING}{shlex.quote(p)};" for p in sorted(wanted)) + " echo checked"


def checking_model(seen: list[set[str]]):
    """First request: test every path the system and first user message name; then write the answer
    where the prompt says and submit."""
    def answer(request):
        if not request.tool_names:
            return reply("an answer")
        first = [m for m in request.messages if m["role"] in ("system", "user")][:2]
        if not request.tool_outputs:
            paths = set().union(*(named_paths(m["content"]) for m in first))
            seen.append(paths)
            return reply(tool_calls=[call("execute_bash", {"command": check_command(paths)})])
        if len(request.tool_outputs) == 1:
            output = re.search(r"`(/[^`]*output)`", first[0]["content"] + first[-1]["content"])
            where = output.group(1) if output else "/testbed"
            return reply(tool_calls=[call("str_replace_editor", {
                "command": "create", "path": f"{where}/answer.txt", "file_text": "done\n"})])
        return submit()
    return answer


def assert_all_exist(server: FakeOpenAI, seen: list[set[str]], at_least: set[str]) -> None:
    assert seen and at_least <= set().union(*seen), seen  # the prompt named them: the check ran on them
    outputs = [r.tool_outputs[0] for r in server.chat_requests if len(r.tool_outputs) == 1]
    assert outputs and all("checked" in out for out in outputs), outputs
    missing = [line for out in outputs for line in out.splitlines() if MISSING in line]
    assert not missing, missing


@pytest.mark.parametrize("mode", ["plain", "input", "workspace", "workspace+input"])
def test_run_names_only_folders_its_sandbox_has(tmp_path, mode):
    given = tmp_path / "given"
    given.mkdir()
    (given / "data.txt").write_text("1\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")
    spec = SandboxSpec(input_dir=given if "input" in mode else None,
                       workspace=project if "workspace" in mode else None)
    seen: list[set[str]] = []
    with FakeOpenAI(default=checking_model(seen)) as server:
        config = load_config(None, {"model.base_url": server.base_url, "model.model": "m",
                                    "sandbox.rootfs": "host"})
        result = run_task("Say done.", config=config, spec=spec, output_dir=tmp_path / "out")
        assert_all_exist(server, seen, {spec.places.output, spec.places.input, spec.places.working})
    assert result.finish_reason == "submitted" and result.answer == "done", result
    if "workspace" in mode:
        # the model's own folders are outside the project: its answer is no change to review
        assert "/testbed/output" not in set().union(*seen) and spec.places.scratch in set().union(*seen)
        assert sorted(p.name for p in project.iterdir()) == ["main.py"]


def test_every_paper_suite_names_only_folders_its_sandbox_has(tmp_path, nltk_data):
    pytest.importorskip("math_verify")
    tasks = []
    for suite in SUITES:
        row = {"id": f"{suite}-1", "problem_statement": f"Question of {suite}?", "ground_truth": "A",
               "input_files": json.dumps({"report.txt": "text"}), "qa_type": "Free-form",
               "domain": suite}
        path = tmp_path / f"{suite}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        tasks += load_suite(suite, str(path))
    seen: list[set[str]] = []
    with FakeOpenAI(default=checking_model(seen)) as server:
        config = load_config(None, {"model.base_url": server.base_url, "model.model": "m",
                                    "sandbox.rootfs": "host"})
        options = BenchOptions(output=tmp_path / "out", modes=("sandbox",), concurrency=2, progress=None)
        results = BenchRunner(tasks, config, None, options, None).run().results
        assert_all_exist(server, seen, {"/testbed"})
    assert len(seen) == len(SUITES) and not [r for r in results if r["crashed"]], results


@pytest.mark.parametrize("workspace", [False, True])
def test_mcp_tools_name_only_folders_the_sandbox_has(tmp_path, workspace):
    project = tmp_path / "project"
    project.mkdir()
    tools = SandboxTools(SandboxSpec(workspace=project if workspace else None), allow_apply=True)
    try:
        paths = set().union(*(named_paths(s["description"]) | named_paths(json.dumps(s["parameters"]))
                              for s in tools.schemas()))
        paths -= {"/testbed/main.py"}  # the editor's example of an absolute path, not a folder we promise
        assert tools.spec.places.output in paths
        out = tools.call("execute_bash", {"command": check_command(paths)})
        assert "checked" in out.output and MISSING not in out.output, out.output
        tools.call("execute_bash", {"command": f"echo done > {tools.spec.places.answer}"})
        assert tools.call("read_output", {"path": "answer.txt"}).output.strip() == "done"
        if workspace:
            assert tools.call("list_changes", {}).output == f"No changes in {project.resolve()}."
    finally:
        tools.close()
