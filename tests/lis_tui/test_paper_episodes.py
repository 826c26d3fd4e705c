"""`bench paper:SUITE` against llm-in-sandbox 0.2.0's own episode: the package's runner and agent
loop (in a venv of its own, litellm included, its files unchanged; only its `docker` client is
replaced at run time by one that runs each exec's `bash -c` line in a real lis-tui sandbox:
paper_package_episode.py) and lis-tui's bench, each against the same scripted model server.
What each sent the server must be the same (tools, messages, sampling fields), request for
request, and so must the number of requests, the answer and the score.

What cannot be the same is listed in docs/paper-suites.md ("Checked against the package's own
loop"), each with the script here that shows it. No package, no pass: an install failure fails.
"""
import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, error, reply
from test_bench_runner import bench_cli
from test_paper_package import package_venv

pytestmark = [pytest.mark.paper_package, pytest.mark.sandbox]
AGENT_LIBRARIES = ("litellm==1.80.0", "rich", "pyyaml", "pydantic", "fire")
"""What the package's agent and runner import besides the scorers' libraries (litellm pinned:
its token counting and request shaping are part of what the model sees)."""
HARNESS = Path(__file__).with_name("paper_package_episode.py")
DOCKER_PATH = ("/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
               "/usr/bin:/sbin:/bin")


@pytest.fixture(scope="module")
def agent_python():
    """The python of a venv with the package, its scorers' libraries and its agent's (made once)."""
    return package_venv(AGENT_LIBRARIES, "agent", "and its agent's libraries to run its episodes")


@pytest.fixture(scope="module")
def package_dir(agent_python, tmp_path_factory):
    """A folder holding only the package (for lis-tui to read its prompts from, as installed)."""
    found = subprocess.run([str(agent_python), "-c", "import importlib.util as u; print(u.find_spec("
                            "'llm_in_sandbox').submodule_search_locations[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    folder = tmp_path_factory.mktemp("package")
    (folder / "llm_in_sandbox").symlink_to(found)
    return folder


# ---- the package's side ----------------------------------------------------------------------

def _serve(sandbox, request: dict) -> dict:
    """One docker call of the package, done in `sandbox` as its container would."""
    if request["op"] == "put":
        sandbox.exec(["mkdir", "-p", request["path"]], cwd="/")
        done = sandbox.exec(["tar", "--no-same-owner", "-xf", "-", "-C", request["path"]],
                            stdin=base64.b64decode(request["tar"]), cwd="/")
        return {"ok": done.exit_code == 0}
    env = dict(request["env"])
    if env.get("PATH") == DOCKER_PATH and "/run/lis-tui/bin" in sandbox.env.get("PATH", ""):
        # the host rootfs's shims are part of its image, as a Docker image's tools would be
        shims = [p for p in sandbox.env["PATH"].split(":") if "/run/lis-tui/bin" in p]
        env["PATH"] = DOCKER_PATH.replace("/usr/local/sbin", ":".join(shims) + ":/usr/local/sbin")
    argv = request["argv"]
    if not request["demux"]:  # one stream, in the order written, as docker's exec gives it
        argv = ["bash", "-c", 'exec "$@" 2>&1', "bash", *argv]
    done = sandbox.exec(argv, cwd=request["cwd"], env=env, timeout=600)
    return {"exit_code": done.exit_code,
            "stdout": base64.b64encode(done.stdout.encode()).decode(),
            "stderr": base64.b64encode(done.stderr.encode()).decode()}


class Harness:
    """The package's episodes, run one after another by paper_package_episode.py in its venv."""

    def __init__(self, python: Path, folder: Path) -> None:
        to_test, from_test = os.pipe2(0), os.pipe2(0)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder),
               "OPENAI_API_KEY": "sk-lis-tui", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "PYTHONHASHSEED": "0", "NO_COLOR": "1",
               "LIS_TO_TEST_FD": str(to_test[1]), "LIS_FROM_TEST_FD": str(from_test[0])}
        self.stderr = folder / "stderr"
        self.proc = subprocess.Popen([str(python), str(HARNESS)], env=env, stdout=subprocess.DEVNULL,
                                     stderr=open(self.stderr, "w"), pass_fds=(to_test[1], from_test[0]))
        os.close(to_test[1]), os.close(from_test[0])
        self.requests = os.fdopen(to_test[0])
        self.answers = os.fdopen(from_test[1], "w", buffering=1)

    def run(self, sandbox, job: dict) -> None:
        """One episode, its docker calls served in `sandbox`."""
        self.answers.write(json.dumps({"op": "job", **job}) + "\n")
        for line in self.requests:
            request = json.loads(line)
            if request["op"] == "done":
                assert "error" not in request, request["error"]
                return
            if request["op"] == "close":
                self.answers.write("{}\n")
                continue
            try:
                self.answers.write(json.dumps(_serve(sandbox, request)) + "\n")
            except Exception as exc:  # noqa: BLE001 (the package sees it as docker's error)
                self.answers.write(json.dumps({"error": repr(exc)}) + "\n")
        raise AssertionError(f"the package's harness exited: {self.stderr.read_text()[-4000:]}")

    def close(self) -> None:
        self.answers.close()
        assert self.proc.wait(timeout=60) == 0, self.stderr.read_text()[-4000:]
        self.requests.close()


@pytest.fixture(scope="module")
def harness(agent_python, tmp_path_factory):
    runner = Harness(agent_python, tmp_path_factory.mktemp("harness"))
    yield runner
    runner.close()


def package_episode(harness, suite, mode, row, script, tmp_path, **config):
    """The package's episode of `row`: (its requests' bodies, its result)."""
    from isolation import Sandbox, SandboxSpec

    folder = tmp_path / f"package-{mode}"
    folder.mkdir()
    # the package's container has a network: here lis-tui's proxy, as a paper run has it
    with FakeOpenAI(script=list(script)) as server, Sandbox(SandboxSpec(network="on")) as sandbox:
        agent_config = {"docker_image": "lis-tui", "llm_name": "openai/m",
                        "llm_base_url": server.base_url, "max_steps": 100, "temperature": 1.0,
                        "max_token_limit": 131072 if suite == "long_context" else 65536,
                        "max_tokens_per_call": 65536, "max_response_len": 65536,
                        "extra_body": None, **config}
        (folder / "job.json").write_text(json.dumps(
            {"suite": suite, "mode": mode, "problem": row, "agent_config": agent_config}))
        env = {"HOME": str(folder), **{k: os.environ[k] for k in ("NLTK_DATA", "IFBENCH_PATH") if k in os.environ}}
        harness.run(sandbox, {"job": str(folder / "job.json"), "out": str(folder / "out.json"), "env": env})
        bodies = [r.body for r in server.chat_requests]
    return bodies, json.loads((folder / "out.json").read_text())


# ---- lis-tui's side ----------------------------------------------------------------------------

def our_episode(suite, mode, row, script, tmp_path, package_dir, *flags):
    folder = tmp_path / f"lis-tui-{mode}"
    folder.mkdir()
    data = folder / f"{suite}.jsonl"
    data.write_text(json.dumps(row) + "\n")
    out = folder / "out"
    with FakeOpenAI(script=list(script)) as server:
        proc = bench_cli(f"paper:{suite}", server, out, str(data), "--mode",
                         "llm" if mode == "llm" else "sandbox", "--concurrency", "1", *flags,
                         path=[package_dir])
        _, err = proc.communicate(timeout=600)
        bodies = [r.body for r in server.chat_requests]
    assert proc.returncode == 0, err
    (record,) = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    return bodies, record


def sent(body: dict) -> dict:
    """What a request tells the model and how it samples (the model name aside: the package
    names it `openai/m` and litellm strips the provider)."""
    return {k: v for k, v in body.items() if k not in ("model",)}


def compare(harness, package_dir, tmp_path, suite, row, script, mode="llm-in-sandbox",
            package_config=None, flags=(), score=True):
    theirs, result = package_episode(harness, suite, mode, row, script, tmp_path,
                                     **(package_config or {}))
    ours, record = our_episode(suite, mode, row, script, tmp_path, package_dir, *flags)
    differ = [line for n, (a, b) in enumerate(zip(theirs, ours)) for line in _differences(n, a, b)]
    assert not differ, "\n".join(differ)
    assert len(ours) == len(theirs)
    assert record["answer"] == result["answer"]
    if score:  # the judged suites' package score is a placeholder 0 until its judge runs
        assert record["reward"] == result["score"]
    return theirs, result, record


def _differences(n: int, theirs: dict, ours: dict):
    """Readable lines for each field of request n that differs (each message apart)."""
    theirs, ours = sent(theirs), sent(ours)
    for key in sorted(set(theirs) | set(ours)):
        if key == "messages" and key in theirs and key in ours:
            a, b = theirs[key], ours[key]
            for m, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    yield f"request {n + 1} message {m}: package {x!r}\n  lis-tui {y!r}"
            if len(a) != len(b):
                yield f"request {n + 1}: {len(a)} messages from the package, {len(b)} from lis-tui"
        elif theirs.get(key, "<absent>") != ours.get(key, "<absent>"):
            yield (f"request {n + 1} {key}: package {theirs.get(key, '<absent>')!r}\n"
                   f"  lis-tui {ours.get(key, '<absent>')!r}")


# ---- the scripts -------------------------------------------------------------------------------

CHEM = {"id": "c1", "problem_statement": "Which is a noble gas? (A) Ne (B) Na", "ground_truth": "A"}


def bash(command, id):
    return call("execute_bash", {"command": command}, id=id)


def editor(id, **args):
    return call("str_replace_editor", args, id=id)


SUBMIT = reply(None, [call("submit", {}, id="done")])
ANSWER = reply(None, [bash("echo A > /testbed/answer.txt", "answer")])
SCRIPTS = {
    # D2 state (cwd, variables, exit) and D3 framing, D4 `git init` and `ls`
    "state": [
        reply("Looking around.", [bash("cd /tmp && export X=42", "a")]),
        reply(None, [bash('pwd; echo "X=$X"; ls -A; printf \'first\\n\'; echo oops >&2; '
                          'echo "${HTTPS_PROXY:+a network through a proxy}"', "b")]),
        reply(None, [bash("mkdir -p d && touch d/one d/two && ls d; exit 3", "c")]),
        ANSWER, SUBMIT],
    # two calls (only the first runs), arguments that are not JSON or not an object, no call,
    # an unknown tool, an empty and a missing command (D10)
    "calls": [
        reply(None, [bash("echo B > /testbed/answer.txt", "a1"), bash("echo C > x", "a2")]),
        reply(None, [call("execute_bash", '{"command": "ls', id="b")]),
        reply(None, [call("execute_bash", "[1]", id="c")]),
        reply("I think it is A."),
        reply(None, [call("python", {"code": "print(1)"}, id="d")]),
        reply(None, [bash("", "e")]),
        reply(None, [call("execute_bash", {}, id="f")]),
        reply(None, [call("str_replace_editor", {"path": "/testbed"}, id="g")]),
        ANSWER, SUBMIT],
    # D5: views of folders and of files the package refuses, create over a file, edits
    "editor": [
        reply(None, [editor("a", command="view", path="/testbed")]),
        reply(None, [editor("b", command="create", path="/testbed/notes.txt", file_text="x\ty\n")]),
        reply(None, [editor("c", command="view", path="/testbed/notes.txt")]),
        reply(None, [editor("d", command="create", path="/testbed/s.py",
                            file_text="a = 1\nb = 'it''s'\nprint(a)\n")]),
        reply(None, [editor("e", command="create", path="/testbed/s.py", file_text="a = 2\n")]),
        reply(None, [editor("f", command="str_replace", path="/testbed/s.py", old_str="a = 2",
                            new_str="a = 3\nb = 4")]),
        reply(None, [editor("g", command="insert", path="/testbed/s.py", insert_line=1,
                            new_str="# note")]),
        reply(None, [editor("h", command="view", path="/testbed/s.py", view_range=[2, -1])]),
        reply(None, [editor("i", command="view", path="/testbed/s.py", view_range=[9, 12])]),
        reply(None, [editor("j", command="str_replace", path="/testbed/s.py", old_str="zzz")]),
        reply(None, [editor("k", command="view", path="/testbed/nope")]),
        reply(None, [editor("l", command="undo_edit", path="/testbed/s.py")]),
        reply(None, [editor("m", command="view", path="/testbed")]),
        reply(None, [editor("n", command="create", path="/testbed/answer.txt", file_text="A")]),
        SUBMIT],
    # D3 and D11: long streams, blank output, no final newline, colours, a timeout's status
    "output": [
        reply(None, [bash("seq 1 200; seq 1 100 >&2", "a")]),
        reply(None, [bash("echo; echo '  ' >&2", "b")]),
        reply(None, [bash("printf 'no newline'; printf '\\033[31mred\\033[0m\\r\\n' >&2", "c")]),
        reply(None, [bash("echo started; exit 124", "d")]),
        reply(None, [bash("cat /nonexistent", "e")]),
        ANSWER, SUBMIT],
    # D6 and D7: reasoning re-sent (either field name), empty and missing text
    "reasoning": [
        reply("", [bash("echo A > /testbed/answer.txt", "a")], reasoning="Think first."),
        reply(None, [bash("true", "b")], reasoning="More.", reasoning_key="reasoning"),
        reply("Plain."),
        SUBMIT],
    # the server finds the prompt too long: asked again with fewer max_tokens (twice)
    "too_long": [
        error(400, "This model's maximum context length of 80000 tokens. You requested a total "
              "of 95536 tokens: 30000 tokens from the input messages and 65536 tokens for the "
              "completion. Please reduce the length."),
        error(400, "The prompt is too long for the token limit (70000 in the messages)."),
        ANSWER, SUBMIT],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_chem_episode_is_the_packages(harness, package_dir, tmp_path, name):
    compare(harness, package_dir, tmp_path, "chem", CHEM, SCRIPTS[name])


def test_max_steps_end_the_episode_as_in_the_package(harness, package_dir, tmp_path):
    script = [reply(None, [bash(f"echo {n}", f"s{n}")]) for n in range(5)]
    theirs, result, record = compare(harness, package_dir, tmp_path, "chem", CHEM, script,
                                     package_config={"max_steps": 3},
                                     flags=("--max-steps", "3"))
    assert len(theirs) == 3 and record["finish_reason"] == "max_steps"


DOCS = {"report.txt": "The plant opened in 1987.\n", "notes.md": "# Notes\nNone."}
NO_RULES = json.dumps({"instruction_id_list": [], "kwargs": []})
SUITES = {  # suite -> (row, the answer the scripted model gives)
    "math": ({"id": "m1", "problem_statement": "What is 2+2?", "ground_truth": "4"}, "\\boxed{4}"),
    "physics": ({"id": "p1", "problem_statement": "g in m/s^2?", "ground_truth": "9.81"},
                "\\boxed{9.81}"),
    "chem": (CHEM, "A"),
    "biomed": ({"id": "b1", "problem_statement": "Which is a kinase? (A) PKA (B) Hb",
                "ground_truth": "A"}, "Answer: A"),
    "long_context": ({"id": "l1", "problem_statement": "When did the plant open?",
                      "ground_truth": "1987", "input_files": json.dumps(DOCS)}, "In 1987."),
    "instruct_follow": ({"id": "f1", "problem_statement": "Write anything.",
                         "ground_truth": NO_RULES}, "Anything."),
    "instruct_pretrain": ({"id": "i1", "problem_statement": "Which is true? (A) x (B) y",
                           "qa_type": "Multiple Choice", "domain": "instruct_pretrain",
                           "ground_truth": "B", "input_files": DOCS}, "B"),
}
JUDGED = ("physics", "long_context")


@pytest.mark.parametrize("mode", ["llm-in-sandbox", "llm"])
@pytest.mark.parametrize("suite", sorted(SUITES))
def test_every_suite_in_both_modes_is_the_packages(harness, package_dir, tmp_path,
                                                   monkeypatch, suite, mode):
    row, answer = SUITES[suite]
    script = [reply(f"So: {answer}")] if mode == "llm" else [
        reply("Reading.", [bash("ls -A; cat documents/* 2>&1 | head -5", "a")]),
        reply(None, [editor("b", command="create", path="/testbed/answer.txt", file_text=answer)]),
        reply(None, [bash("cat answer.txt", "c")]),
        SUBMIT]
    _scorers_data(tmp_path, monkeypatch)
    flags = ("--suite-scorer", "math-verify") if suite == "physics" else ()
    if suite == "long_context":
        judge = FakeOpenAI(default=reply("CORRECT")).start()
        flags = ("--judge-model", "j", "--judge-base-url", judge.base_url)
    try:
        compare(harness, package_dir, tmp_path, suite, row, script, mode=mode, flags=flags,
                score=suite not in JUDGED)
    finally:
        if suite == "long_context":
            judge.close()


def _scorers_data(tmp_path, monkeypatch):
    """NLTK's data folders (empty: no check here reads them) and IFBench's registry for the
    package (if-verifiable's port, as test_paper_package gives it), on both sides."""
    from lis_tui.bench.paper import instructions
    from test_paper_package import IFBENCH_REGISTRY

    for resource in instructions.NLTK_RESOURCES:
        (tmp_path / "nltk" / resource).mkdir(parents=True)
    (tmp_path / "ifbench").mkdir()
    (tmp_path / "ifbench" / "instructions_registry.py").write_text(IFBENCH_REGISTRY)
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "nltk"))
    monkeypatch.setenv("IFBENCH_PATH", str(tmp_path / "ifbench"))


def test_llm_mode_lowers_max_tokens_for_a_prompt_too_long_as_the_package(
        harness, package_dir, tmp_path):
    script = [error(400, "This model's maximum context length is 32768 tokens. However, you "
                    "requested 98304 tokens (32768 in the messages, 65536 in the completion)."),
              error(400, "Still over the token limit (32768 in the messages)."),
              reply("\\boxed{4}")]
    theirs, _, record = compare(harness, package_dir, tmp_path, "math",
                                SUITES["math"][0], script, mode="llm")
    assert [b["max_tokens"] for b in theirs] == [65536, 32768, 16384]
    assert record["reward"] == 1.0


def test_the_token_limit_stops_where_the_package_stops(harness, package_dir, tmp_path):
    """Each step adds about 650 tokens of prose; the limit falls mid-step, where the package's
    tokenizer and lis-tui's estimate agree (docs/paper-suites.md, "Counting ...")."""
    prose = "yes 'The quick brown fox jumps over the lazy dog.' | head -60"
    script = [reply(None, [bash(prose, f"s{n}")]) for n in range(8)]
    theirs, result, record = compare(harness, package_dir, tmp_path, "chem", CHEM, script,
                                     package_config={"max_token_limit": 3600},
                                     flags=("--max-context-tokens", "3600"))
    assert 1 < len(theirs) < 8 and record["finish_reason"] == "max_context"


def test_a_run_without_an_answer_names_the_file_the_suite_reads(harness, package_dir,
                                                                 tmp_path):
    _, result, record = compare(harness, package_dir, tmp_path, "chem", CHEM, [SUBMIT])
    assert result["answer"] == "" and record["message"] == "no /testbed/answer.txt was written"
