"""`bench paper:SUITE` runs with llm-in-sandbox 0.2.0's settings unless a flag says otherwise,
and `bench paper:all DIR` writes the paper's main table: through the CLI, real sandboxes and a
scripted model server that records every request."""
import json
import re

import pytest

from fakes.openai_server import FakeOpenAI, call, error, reply, submit
from test_bench_runner import bench_cli
from test_prompts_package import fake_package  # noqa: F401 (a fixture: the package's layout)

pytestmark = pytest.mark.sandbox
DOCS = {"b.txt": "Beta is the second letter.", "a.txt": "Alpha is the first."}
# The package's `create_prompt` output for these rows, as its vanilla_llm_prompt.py makes them
# (checked against the installed package: see docs/paper-suites.md).
MATH_PROMPT = ("What is 2+2?\n\nPlease reason step by step, and put your final answer within "
               "\\boxed{}.")
DOCS_PROMPT = ("BEGIN INPUT DOCUMENTS\n\nBEGIN DOCUMENT 1:\nBeta is the second letter.\nEND "
               "DOCUMENT 1\n\nBEGIN DOCUMENT 2:\nAlpha is the first.\nEND DOCUMENT 2\n\nEND INPUT "
               "DOCUMENTS\n\nAnswer the following question using the input documents provided "
               "above.\n\nSTART QUESTION\n\nWhich letter comes first? (A) alpha (B) beta\n\nEND "
               "QUESTION\n")


def two_calls(request):
    """Sandbox: one reply with two tool calls, the right answer then a wrong one; then submit.
    LLM: a reply whose answer is only right when read whole."""
    if not request.tool_names:
        return reply("Two and two make four.\n\\boxed{4}\nANSWER: 5")
    if request.tool_outputs:
        return submit()
    return reply(tool_calls=[
        call("str_replace_editor", {"command": "create", "path": "/testbed/answer.txt",
                                    "file_text": "\\boxed{4}"}, id="right"),
        call("execute_bash", {"command": "echo '\\boxed{5}' > /testbed/answer.txt"}, id="wrong")])


def math_rows(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"id": "m", "problem_statement": "What is 2+2?",
                                "ground_truth": "4"}) + "\n")
    return data


def run_math(tmp_path, model):
    """`bench paper:math` of one row through the CLI against `model`, which must succeed: its
    output folder and the requests the server got."""
    out = tmp_path / "out"
    with FakeOpenAI(default=model) as server:
        proc = bench_cli("paper:math", server, out, str(math_rows(tmp_path)))
        _, err = proc.communicate(timeout=120)
        requests = server.chat_requests
    assert proc.returncode == 0, err
    return out, requests


def results(out):
    return {r["mode"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_a_paper_suite_runs_with_the_packages_settings(tmp_path, fake_package):
    out = tmp_path / "out"
    with FakeOpenAI(default=two_calls) as server:
        proc = bench_cli("paper:math", server, out, str(math_rows(tmp_path)), "--mode", "both",
                         "--concurrency", "1", path=[fake_package])
        _, err = proc.communicate(timeout=240)
        requests = server.chat_requests
    assert proc.returncode == 0, err
    assert all(r.body["temperature"] == 1.0 and r.body["max_tokens"] == 65536 for r in requests)
    (llm,) = [r for r in requests if not r.tool_names]
    assert llm.messages == [{"role": "user", "content": MATH_PROMPT}]
    # only the first tool call ran, and only it was answered (the package tells the model nothing)
    box = [r for r in requests if r.tool_names]
    assert len(box) == 2
    tool_messages = [m for m in box[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["right"]
    assert tool_messages[0]["content"].startswith("Execution output of \\[str_replace_editor]:")
    assert tool_messages[0]["content"].endswith("\nSteps Remaining: 99")
    got = results(out)
    assert got["sandbox"]["reward"] == 1.0  # the second call (a wrong answer) never ran
    assert got["llm"]["reward"] == 1.0 and got["llm"]["answer"].endswith("ANSWER: 5")
    assert err.startswith("settings: paper (llm-in-sandbox 0.2.0's defaults for math)\n"), err
    md = (out / "summary.md").read_text()
    assert "Settings: paper (llm-in-sandbox 0.2.0's defaults for math)" in md
    for row in ("| temperature | 1.0 | 1.0 | --temperature |",
                "| max tokens per call | 65,536 | 65,536 | --max-tokens |",
                "| max tokens per trajectory | 65,536 | 65,536 | --max-context-tokens |",
                "| max steps | 100 | 100 | --max-steps |",
                "| replies without a tool call before stopping | no limit | no limit | "
                "--max-no-action |",
                "| tool calls run per reply | first only | first only | --tool-calls |",
                "| observation format | the package's | the package's | --observation |",
                "| LLM-mode prompt and answer | the package's | the package's | --llm-prompt |"):
        assert row in md, row


def test_each_setting_yields_to_its_flag_and_the_summary_says_custom(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAI(default=two_calls) as server:
        proc = bench_cli("paper:math", server, out, str(math_rows(tmp_path)), "--mode", "both",
                         "--temperature", "0.7", "--max-tokens", "4096", "--tool-calls", "all",
                         "--llm-prompt", "lis-tui", "--max-steps", "7", "--observation", "lis-tui")
        _, err = proc.communicate(timeout=240)
        requests = server.chat_requests
    assert proc.returncode == 0, err
    assert all(r.body["temperature"] == 0.7 and r.body["max_tokens"] == 4096 for r in requests)
    (llm,) = [r for r in requests if not r.tool_names]
    assert llm.messages[0]["role"] == "system" and llm.messages[-1]["content"] == "What is 2+2?"
    second = [r for r in requests if r.tool_names][1]
    assert [m["tool_call_id"] for m in second.messages if m["role"] == "tool"] == ["right", "wrong"]
    got = results(out)
    assert got["sandbox"]["reward"] == 0.0 and got["llm"]["answer"] == "5"
    md = (out / "summary.md").read_text()
    assert "Settings: custom for math (temperature (--temperature), max tokens per call" in md
    assert "| temperature | 0.7 | 1.0 | --temperature |" in md
    assert "| max steps | 7 | 100 | --max-steps |" in md


def test_replies_without_a_tool_call_get_the_packages_message_and_never_stop_the_run(tmp_path):
    """The package answers a reply that called no tool with its own message and goes on (only
    max steps stops it); lis-tui's default would stop after 3 in a row."""
    def talker(request):
        if len(request.messages) < 2 + 2 * 4:  # four replies in a row without a tool call
            return reply("Let me think about it.")
        return two_calls(request)

    out, requests = run_math(tmp_path, talker)
    assert results(out)["sandbox"]["reward"] == 1.0 and len(requests) == 6
    nudge = ("\nYou forgot to use a function call in your response. \nYOU MUST USE A FUNCTION "
             "CALL IN EACH RESPONSE.\n\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n")
    assert requests[1].messages[-1] == {"role": "user", "content": nudge + "\nSteps Remaining: 99"}
    assert requests[4].messages[-1]["content"] == nudge + "\nSteps Remaining: 96"


def test_a_documents_row_gets_the_packages_llm_prompt(tmp_path):
    data = tmp_path / "pretrain.jsonl"
    data.write_text(json.dumps({
        "id": "d", "problem_statement": "Which letter comes first? (A) alpha (B) beta",
        "ground_truth": "A", "qa_type": "single", "input_files": json.dumps(DOCS)}) + "\n")
    out = tmp_path / "out"
    with FakeOpenAI(default=reply("A")) as server:
        proc = bench_cli("paper:instruct_pretrain", server, out, str(data), "--mode", "llm")
        _, err = proc.communicate(timeout=120)
        (request,) = server.chat_requests
    assert proc.returncode == 0, err
    assert request.messages == [{"role": "user", "content": DOCS_PROMPT}]
    assert request.body["max_tokens"] == 65536 and "tools" not in request.body


def test_paper_all_writes_the_main_table_and_names_what_it_could_not_run(tmp_path, fake_package):
    benchmark = fake_package / "llm_in_sandbox" / "benchmark"
    (benchmark / "chem").mkdir()
    (benchmark / "chem" / "config.yaml").write_text(
        (benchmark / "math" / "config.yaml").read_text())
    suites = tmp_path / "suites"
    (suites / "chem").mkdir(parents=True)
    (suites / "biomed").mkdir()  # a suite folder without its data file
    math_rows(tmp_path).rename(suites / "math.jsonl")
    (suites / "chem" / "test.jsonl").write_text(json.dumps({
        "id": "c", "problem_statement": "Noble gas? (A) Ne (B) N2", "ground_truth": "A"}) + "\n")
    (suites / "algebra.jsonl").write_text("[]")  # names no suite
    (suites / "README.md").write_text("not data")

    def answer(request):
        if any("Noble" in (m.get("content") or "") for m in request.messages):
            if not request.tool_names:
                return reply("A")
            if request.tool_outputs:
                return submit()
            return reply(tool_calls=[call("execute_bash",
                                          {"command": "echo A > /testbed/answer.txt"})])
        return two_calls(request)

    out = tmp_path / "out"
    with FakeOpenAI(default=answer) as server:
        proc = bench_cli("paper:all", server, out, str(suites), path=[fake_package])
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # two entries could not run; the others did
    assert "algebra" in err and "names no paper suite" in err
    assert "biomed" in err and "no .json, .jsonl or .parquet" in err
    md = (out / "summary.md").read_text()
    assert "## The paper's main table" in md
    number = r"\d[\d,]*"
    assert re.search(rf"\| chem \| 1 \| 100\.0 \| 100\.0 \| \+0\.0 \| {number} \| {number} \| 2\.0 \|",
                     md), md
    assert re.search(r"\| math \| 1 \| 100\.0 \| 100\.0 \| \+0\.0 \| .* \| 2\.0 \|", md), md
    assert "| algebra | 0 | - |" in md and "| biomed | 0 | - |" in md
    for suite in ("chem", "math"):  # each with its own prompts
        assert f"Settings: paper (llm-in-sandbox 0.2.0's defaults for {suite})" in md
    for suite in ("math", "chem"):
        assert (out / suite / "results.jsonl").is_file() and (out / suite / "summary.md").is_file()
    page = (out / "report.html").read_text()
    assert "main table" in page
    links = re.findall(r'<a href="([^"]+)">trajectory</a>', page)
    assert len(links) == 4 and all((out / link).is_file() for link in links)


def test_a_task_file_keeps_lis_tuis_own_settings(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "problem_statement": "Say hi.",
                                 "ground_truth": "hi"}) + "\n")

    def answer(request):
        if request.tool_outputs:
            return submit()
        return reply(tool_calls=[call("execute_bash", {"command": "true"}, id="one"),
                                 call("execute_bash", {"command": "true"}, id="two")])

    out = tmp_path / "out"
    with FakeOpenAI(default=answer) as server:
        proc = bench_cli(tasks, server, out)
        _, err = proc.communicate(timeout=120)
        requests = server.chat_requests
    assert proc.returncode == 0, err
    assert not any("temperature" in r.body or "max_tokens" in r.body for r in requests)
    assert [m["tool_call_id"] for m in requests[1].messages if m["role"] == "tool"] == ["one", "two"]
    assert "settings:" not in err and "Settings" not in (out / "summary.md").read_text()


NUDGE = ("\nYou forgot to use a function call in your response. \nYOU MUST USE A FUNCTION CALL IN "
         "EACH RESPONSE.\n\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n")


def test_a_tool_call_whose_arguments_are_not_json_is_taken_as_no_call(tmp_path):
    """The package's json.loads fails on such arguments, so its reply has no action: the call
    is not answered and the user message says a function call was forgotten. JSON that is not
    an object runs nothing and is answered with the frame around no output."""
    def model(request):
        if len(request.messages) == 2:
            return reply(tool_calls=[call("execute_bash", '{"command": "echo hi', id="bad")])
        if len(request.messages) == 4:
            return reply(tool_calls=[call("execute_bash", '["echo hi"]', id="list")])
        if len(request.messages) == 6:
            return reply(tool_calls=[call("str_replace_editor", {
                "command": "create", "path": "/testbed/answer.txt", "file_text": "\\boxed{4}"})])
        return submit()

    out, requests = run_math(tmp_path, model)
    second = requests[1].messages
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["id"] == "bad"
    assert second[-1] == {"role": "user", "content": NUDGE + "\nSteps Remaining: 99"}
    assert not any(m["role"] == "tool" for m in second)
    assert requests[2].messages[-1] == {
        "role": "tool", "tool_call_id": "list",
        "content": "Exit code: 0\nExecution output of \\[execute_bash]:\n\nSteps Remaining: 98"}
    assert results(out)["sandbox"]["reward"] == 1.0


def test_a_prompt_too_long_is_asked_again_with_fewer_max_tokens_as_the_package_does(tmp_path):
    """With the context and the prompt's tokens in the server's message: what is left less 100;
    without: half, down to 8192; each model call starts again from 65,536."""
    parsed = ("This model's maximum context length of 40000 tokens. You requested a total of "
              "95536 tokens: 30000 tokens from the input messages and 65536 tokens for the "
              "completion")
    vllm = ("This model's maximum context length is 32768 tokens. However, you requested 98304 "
            "tokens (32768 in the messages, 65536 in the completion).")

    def model(request):
        if not request.tool_outputs:
            if request.body["max_tokens"] > 9900:
                return error(400, parsed)
            return reply(tool_calls=[call("str_replace_editor", {
                "command": "create", "path": "/testbed/answer.txt", "file_text": "\\boxed{4}"})])
        return error(400, vllm) if request.body["max_tokens"] > 16384 else submit()

    out, requests = run_math(tmp_path, model)
    assert [r.body["max_tokens"] for r in requests] == [65536, 9900, 65536, 32768, 16384]
    assert results(out)["sandbox"]["reward"] == 1.0


def test_a_null_document_is_inlined_as_none_and_left_out_of_the_sandbox(tmp_path):
    """As the package: `None` in the LLM prompt; in the sandbox no file, and a row whose files
    are all null still gets its (empty) documents folder."""
    data = tmp_path / "pretrain.jsonl"
    data.write_text(json.dumps({
        "id": "d", "problem_statement": "Which letter comes first? (A) alpha (B) beta",
        "ground_truth": "A", "qa_type": "single",
        "input_files": json.dumps({"a.txt": None, "b.txt": DOCS["b.txt"]})}) + "\n" + json.dumps({
        "id": "e", "problem_statement": "Empty? (A) yes (B) no", "ground_truth": "A",
        "qa_type": "single", "input_files": {"a.txt": None}}) + "\n")

    def model(request):
        if not request.tool_names:
            return reply("A")
        if request.tool_outputs:
            return submit()
        return reply(tool_calls=[call("execute_bash", {"command": "ls /testbed/documents"})])

    out = tmp_path / "out"
    with FakeOpenAI(default=model) as server:
        proc = bench_cli("paper:instruct_pretrain", server, out, str(data), "--mode", "both")
        _, err = proc.communicate(timeout=120)
        requests = server.chat_requests
    assert proc.returncode == 0, err
    llm = sorted(r.messages[0]["content"] for r in requests if not r.tool_names)
    assert llm[0].startswith(
        "BEGIN INPUT DOCUMENTS\n\nBEGIN DOCUMENT 1:\nNone\nEND DOCUMENT 1\n\nBEGIN DOCUMENT 2:\n"
        "Beta is the second letter.\nEND DOCUMENT 2\n\nEND INPUT DOCUMENTS")
    assert llm[1].startswith("BEGIN INPUT DOCUMENTS\n\nBEGIN DOCUMENT 1:\nNone\nEND DOCUMENT 1\n"
                             "\nEND INPUT DOCUMENTS")
    listings = {"Empty" if "Empty?" in r.messages[1]["content"] else "first": r.tool_outputs[0]
                for r in requests if r.tool_outputs}
    assert "b.txt" in listings["first"] and "a.txt" not in listings["first"]
    assert listings["Empty"].startswith("Exit code: 0\n")  # there, but empty


def test_paper_suites_use_the_packages_prompts_when_it_is_here_and_say_so_when_not(
        tmp_path, fake_package):
    system = {}

    def model(request):
        if len(request.messages) == 2:
            system[request.messages[0]["content"][:25]] = True
        return two_calls(request)

    with FakeOpenAI(default=model) as server:
        for name, path in (("with", [fake_package]), ("without", [])):
            out = tmp_path / name
            proc = bench_cli("paper:math", server, out, str(math_rows(tmp_path)), path=path)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            md = (out / "summary.md").read_text()
            if path:
                assert err.startswith("settings: paper (")
                assert "sandbox-mode prompts: the package's (llm-in-sandbox:math)\n" in err
            else:
                assert err.startswith("settings: custom for math (sandbox-mode prompts "
                                      "(--prompts): not llm-in-sandbox 0.2.0's)")
                line = re.search(r"sandbox-mode prompts: lis-tui's; for the package's: (.*)", err)
                assert line and line[1].endswith(" -m pip install --no-deps "
                                                 "llm-in-sandbox==0.2.0"), err
                assert f"| sandbox-mode prompts | lis-tui's; for the package's: {line[1]} |" in md
    assert "You are a careful solver." in system and len(system) == 2


@pytest.mark.parametrize("message, tried, then", [
    ("maximum context length of 40000 tokens; 30000 tokens from the input messages", 65536, 9900),
    ("maximum context length of 40000 tokens; 35000 tokens from the input messages", 65536, None),
    ("maximum context length of 40000 tokens; 30000 tokens in the prompt", 9900, None),
    ("This model's maximum context length is 32768 tokens (32768 in the messages)", 65536, 32768),
    ("This model's maximum context length is 32768 tokens (32768 in the messages)", 12000, 8192),
    ("This model's maximum context length is 32768 tokens (32768 in the messages)", 8192, None),
    ("max_tokens must be at least 1", 65536, None),  # no "exceed", "limit" or "maximum"
])
def test_the_packages_rule_for_lowering_max_tokens(message, tried, then):
    from lis_tui.agent.loop import shrunk_max_tokens
    assert shrunk_max_tokens(message, tried) == then


def test_paper_settings_have_the_network_on_and_network_off_makes_them_custom(tmp_path,
                                                                              fake_package):
    """The package's container has a network: a paper run's sandboxes reach the internet
    through lis-tui's proxy (public addresses only), and the header says so."""
    def probe(request):
        if not request.tool_names or request.tool_outputs:
            return submit() if request.tool_names else reply("4")
        return reply(tool_calls=[call("execute_bash", {"command": 'echo "proxy=${HTTPS_PROXY:+yes}"'})])

    seen = {}
    for network in (None, "off"):
        out = tmp_path / f"out-{network}"
        with FakeOpenAI(default=probe) as server:
            proc = bench_cli("paper:math", server, out, str(math_rows(tmp_path)),
                             *(("--network", network) if network else ()), path=[fake_package])
            _, err = proc.communicate(timeout=240)
            seen[network] = (err, [r.tool_outputs for r in server.chat_requests])
        assert proc.returncode == 0, err
    err, outputs = seen[None]
    assert "network: on, through lis-tui's proxy (public addresses only)\n" in err
    assert err.startswith("settings: paper (")
    assert "proxy=yes" in outputs[-1][0]
    err, outputs = seen["off"]
    assert err.startswith("settings: custom for math (network (--network): not "), err
    assert "proxy=\n" in outputs[-1][0]
