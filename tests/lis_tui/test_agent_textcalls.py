"""Tool calls written as text (agent.tool_format hermes, json, bash) and auto's switch to them:
a real sandbox, the real openai client, the scripted HTTP server."""

import io
import json

import pytest

from fakes.openai_server import FakeOpenAI, call, error, reply
from lis_tui.agent import events
from lis_tui import run_task
from lis_tui.commands.run import StepLog
from lis_tui.config.settings import load_config
from lis_tui.model.textcalls import MAX_BLOCK

pytestmark = pytest.mark.sandbox
ANSWER = "/testbed/output/answer.txt"


def config_for(server, **agent):
    return load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0,
        "sandbox.rootfs": "host", **{f"agent.{k}": v for k, v in agent.items()}})


class Recorder:
    def __init__(self):
        self.events = []

    def on_event(self, event):
        self.events.append(event)

    def of(self, kind):
        return [e for e in self.events if isinstance(e, kind)]


def hermes(name, arguments=None):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments or {}})}\n</tool_call>'


def fenced(value):
    return f"```json\n{json.dumps(value)}\n```"


def sh(command):
    return f"```bash\n{command}\n```"


def run(script, tmp_path, tool_format, listener=None, **agent):
    with FakeOpenAI(script) as server:
        result = run_task("Compute 6*7.", config=config_for(server, tool_format=tool_format, **agent),
                          output_dir=tmp_path / "out", listener=listener)
        requests = server.chat_requests
    return result, requests, json.loads(result.trajectory_path.read_text())


def ran(trajectory):
    """(tool, arguments) of every call that ran, in order."""
    return [(t["name"], json.loads(t["arguments"])) for s in trajectory["steps"] for t in s["tool_calls"]]


# -- hermes -----------------------------------------------------------------------------------------

def test_hermes_calls_run_and_results_come_back_as_tool_responses(tmp_path):
    first = "I will compute it.\n" + hermes("execute_bash", {"command": f"python3 -c 'print(6*7)' > {ANSWER}; cat {ANSWER}"})
    result, requests, trajectory = run([reply(first), reply(hermes("submit"))], tmp_path, "hermes")
    assert (result.answer, result.finish_reason) == ("42", "submitted")
    assert all("tools" not in r.body for r in requests)  # the schemas travel in the prompt
    system = requests[0].messages[0]["content"]
    assert "<tools>" in system and '"name": "str_replace_editor"' in system and "<tool_call>" in system
    assert requests[1].messages[-2] == {"role": "assistant", "content": first}  # as the model wrote it
    assert requests[1].messages[-1] == {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}
    assert trajectory["tool_format"] == "hermes" and "tool_format_switch" not in trajectory
    assert ran(trajectory)[0][0] == "execute_bash" and trajectory["steps"][0]["tool_calls"][0]["output"] == "42"


def test_hermes_several_calls_in_one_reply_run_in_order_in_one_user_turn(tmp_path):
    text = "\n".join([hermes("execute_bash", {"command": "echo one"}),
                      hermes("str_replace_editor", {"command": "create", "path": ANSWER, "file_text": "42"}),
                      hermes("execute_bash", {"command": f"cat {ANSWER}"})])
    result, requests, trajectory = run([reply(text), reply(hermes("submit"))], tmp_path, "hermes")
    assert result.answer == "42" and [n for n, _ in ran(trajectory)] == [
        "execute_bash", "str_replace_editor", "execute_bash", "submit"]
    answer = requests[1].messages[-1]
    assert answer["role"] == "user" and answer["content"].count("<tool_response>") == 3
    assert answer["content"].startswith("<tool_response>\none\n</tool_response>\n<tool_response>\n")
    assert answer["content"].endswith("<tool_response>\n42\n</tool_response>")


def test_hermes_broken_json_runs_nothing_of_the_reply_and_says_why(tmp_path):
    broken = (hermes("execute_bash", {"command": "touch /testbed/output/first"}) +
              '\n<tool_call>{"name": "execute_bash", "arguments": {"command": "touch /testbed/output/second"</tool_call>')
    look = hermes("execute_bash", {"command": "ls /testbed/output; echo listed"})
    _, requests, trajectory = run([reply(broken), reply(look), reply(hermes("submit"))], tmp_path, "hermes")
    told = requests[1].messages[-1]
    assert told["role"] == "user" and told["content"].startswith("Nothing ran: <tool_call> block 2 of 2")
    assert trajectory["steps"][0]["tool_calls"] == [] and trajectory["steps"][0]["nudged"]
    assert trajectory["steps"][1]["tool_calls"][0]["output"] == "listed"  # neither touch ran


def test_hermes_nesting_bomb_and_huge_block_are_refused_and_the_run_goes_on(tmp_path):
    bomb = '<tool_call>{"name": "execute_bash", "arguments": ' + "[" * 100_000 + "</tool_call>"
    huge = hermes("execute_bash", {"command": "echo " + "x" * MAX_BLOCK})
    result, requests, _ = run([reply(bomb), reply(huge), reply(hermes("submit"))], tmp_path, "hermes")
    assert result.finish_reason == "submitted"
    assert "nested too deeply" in requests[1].messages[-1]["content"]
    assert "over the limit" in requests[2].messages[-1]["content"]


# -- json -------------------------------------------------------------------------------------------

def test_json_block_in_prose_and_a_list_of_calls(tmp_path):
    first = ("Let me write the answer.\n" + fenced([
        {"name": "execute_bash", "arguments": {"command": f"echo 42 > {ANSWER}"}},
        {"name": "execute_bash", "arguments": {"command": f"cat {ANSWER}"}}]) + "\nThen I submit.")
    result, requests, trajectory = run([reply(first), reply(fenced({"name": "submit"}))], tmp_path, "json")
    assert result.answer == "42" and "tools" not in requests[0].body
    assert "```json" in requests[0].messages[0]["content"] and "execute_bash" in requests[0].messages[0]["content"]
    answer = requests[1].messages[-1]
    assert answer == {"role": "user", "content": "Result of execute_bash (call_1_0):\n(no output)\n"
                      "Result of execute_bash (call_1_1):\n42"}
    assert trajectory["tool_format"] == "json"


def test_json_broken_and_bomb_are_explained(tmp_path):
    broken = '```json\n{"name": "execute_bash", "arguments": {"command": "ls"\n```'
    bomb = '```json\n{"name": "execute_bash", "arguments": ' + '{"a": ' * 40_000 + "\n```"
    result, requests, _ = run([reply(broken), reply(bomb), reply(fenced({"name": "submit"}))], tmp_path,
                              "json", max_no_action=3)
    assert result.finish_reason == "submitted"
    assert "the fenced JSON block could not be read" in requests[1].messages[-1]["content"]
    assert "not valid JSON" in requests[2].messages[-1]["content"]


# -- bash -------------------------------------------------------------------------------------------

def test_bash_block_runs_in_the_persistent_shell_and_submit_ends(tmp_path):
    first = "I'll use Python.\n" + sh("cd /testbed/output\nX=42\npython3 -c 'print(2**20)'")
    second = sh("echo $X > answer.txt; pwd\nsubmit")  # the shell kept its directory and variable
    result, requests, trajectory = run([reply(first), reply(second)], tmp_path, "bash")
    assert (result.answer, result.finish_reason) == ("42", "submitted")
    assert "tools" not in requests[0].body and "```bash" in requests[0].messages[0]["content"]
    assert requests[1].messages[-1] == {"role": "user", "content": "1048576"}
    assert [n for n, _ in ran(trajectory)] == ["execute_bash", "execute_bash", "submit"]
    assert trajectory["steps"][1]["tool_calls"][0]["output"] == "/testbed/output"


def test_bash_runs_the_first_of_several_blocks_and_says_so(tmp_path):
    two = sh("echo first") + "\nand\n" + sh("touch /testbed/output/second")
    result, requests, trajectory = run([reply(two), reply(sh("ls /testbed/output; echo end")), reply(sh("submit"))],
                                       tmp_path, "bash")
    assert requests[1].messages[-1]["content"] == ("first\n[Your reply had 2 bash blocks; only the first "
                                                   "ran. Write one block per reply.]")
    assert trajectory["steps"][1]["tool_calls"][0]["output"] == "end"


def test_bash_editor_and_submit_as_shell_commands(tmp_path):
    create = sh(f"str_replace_editor create {ANSWER} --file_text 'forty two'")
    edit = sh(f"str_replace_editor str_replace {ANSWER} --old_str 'forty two' --new_str 42")
    broken = sh(f"str_replace_editor create {ANSWER} --file_text 'unclosed")
    result, requests, trajectory = run([reply(create), reply(edit), reply(broken), reply(sh("submit"))],
                                       tmp_path, "bash")
    assert (result.answer, result.finish_reason) == ("42", "submitted")
    assert ran(trajectory)[0] == ("str_replace_editor", {"command": "create", "path": ANSWER,
                                                         "file_text": "forty two"})
    assert requests[3].messages[-1]["content"].startswith("Nothing ran: the str_replace_editor command "
                                                          "could not be split into words")


def test_bash_a_reply_without_a_block_is_nudged_in_its_words(tmp_path):
    result, requests, _ = run([reply("The answer is 42.")], tmp_path, "bash", max_no_action=1)
    assert result.finish_reason == "no_action" and "```bash" in requests[0].messages[0]["content"]


# -- auto -------------------------------------------------------------------------------------------

def test_auto_switches_to_hermes_when_the_server_refuses_tools(tmp_path):
    log, recorder = io.StringIO(), Recorder()
    script = [error(400, "tools param requires --jinja flag"),
              reply(hermes("execute_bash", {"command": f"echo 42 > {ANSWER}"})), reply(hermes("submit"))]
    with FakeOpenAI(script) as server:
        result = run_task("Compute 6*7.", config=config_for(server), output_dir=tmp_path / "out",
                          listener=events.Listeners(recorder, StepLog(log)))
        requests = server.chat_requests
    trajectory = json.loads(result.trajectory_path.read_text())
    assert (result.answer, result.finish_reason) == ("42", "submitted")
    assert "tools" in requests[0].body and "tools" not in requests[1].body
    assert "<tools>" in requests[1].messages[0]["content"] and "<tools>" not in requests[0].messages[0]["content"]
    assert trajectory["tool_format"] == "hermes"
    assert trajectory["tool_format_switch"]["from"] == "native" and "400" in trajectory["tool_format_switch"]["reason"]
    assert trajectory["messages"][0] == requests[1].messages[0]  # the prompt the model answered
    assert [e.new for e in recorder.of(events.ToolFormatChanged)] == ["hermes"]
    assert "tool format: native -> hermes" in log.getvalue()


def test_auto_switches_at_once_on_llama_cpps_500_for_tools_without_jinja(tmp_path):
    script = [error(500, "tools param requires --jinja flag"), reply(hermes("submit"))]
    with FakeOpenAI(script) as server:
        config = config_for(server)
        config.model.max_retries = 3
        result = run_task("Compute 6*7.", config=config, output_dir=tmp_path / "out")
        requests = server.chat_requests
    trajectory = json.loads(result.trajectory_path.read_text())
    assert result.finish_reason == "submitted" and trajectory["tool_format"] == "hermes"
    assert ["tools" in r.body for r in requests] == [True, False]  # not retried: it would not change


def test_auto_runs_the_first_call_written_as_text_and_says_so(tmp_path):
    """The model's first <tool_call> runs: answering "Your reply called no tool" would be false."""
    log = io.StringIO()
    script = [reply(hermes("execute_bash", {"command": f"echo 42 > {ANSWER}"})), reply(hermes("submit"))]
    result, requests, trajectory = run(script, tmp_path, "auto", listener=StepLog(log))
    assert (result.answer, result.finish_reason) == ("42", "submitted") and len(requests) == 2
    assert "tools" in requests[0].body and "tools" not in requests[1].body
    assert not trajectory["steps"][0]["nudged"]
    assert ran(trajectory)[0] == ("execute_bash", {"command": f"echo 42 > {ANSWER}"})
    assert "called no tool" not in json.dumps(requests[1].messages)
    assert requests[1].messages[-1]["role"] == "user" and "<tool_response>" in requests[1].messages[-1]["content"]
    # the model answered the first prompt as it was: it is not rewritten behind it
    assert requests[1].messages[0] == requests[0].messages[0] == trajectory["messages"][0]
    assert trajectory["tool_format_switch"]["step"] == 1 and trajectory["tool_format"] == "hermes"
    assert "tool format: native -> hermes (the model wrote a tool call as hermes text; it runs" in log.getvalue()


def test_auto_runs_a_first_fenced_json_call_too(tmp_path):
    script = [reply("Let me write it.\n" + fenced({"name": "execute_bash",
                                                     "arguments": {"command": f"echo 7 > {ANSWER}"}})),
              reply(fenced({"name": "submit", "arguments": {}}))]
    result, _, trajectory = run(script, tmp_path, "auto")
    assert (result.answer, trajectory["tool_format"]) == ("7", "json")
    assert not trajectory["steps"][0]["nudged"]


def test_auto_switches_to_bash_only_after_two_bash_blocks(tmp_path):
    """A bash block may be an example in prose: the first is nudged, the second switches and runs."""
    script = [reply("Try:\n" + sh("echo early")), reply(sh(f"echo 42 > {ANSWER}")), reply(sh("submit"))]
    result, requests, trajectory = run(script, tmp_path, "auto")
    assert (result.answer, result.finish_reason) == ("42", "submitted")
    assert "tools" in requests[1].body and "tools" not in requests[2].body
    assert trajectory["steps"][0]["nudged"] and trajectory["steps"][0]["tool_calls"] == []
    assert trajectory["tool_format_switch"]["step"] == 2 and trajectory["tool_format"] == "bash"


def test_auto_does_not_switch_on_a_400_once_tools_were_accepted(tmp_path):
    script = [reply("thinking"), error(400, "context too long")]
    result, requests, trajectory = run(script, tmp_path, "auto")
    assert result.finish_reason == "error" and "400" in result.message
    assert len(requests) == 2 and "tool_format_switch" not in trajectory


def test_auto_does_not_switch_on_a_first_400_about_the_context_length(tmp_path):
    script = [error(400, "This model's maximum context length is 4096 tokens; you asked for 9000")]
    result, requests, trajectory = run(script, tmp_path, "auto")
    # nothing to compact yet (lis_tui.agent.compaction): the limit, in the server's words
    assert result.finish_reason == "max_context" and "maximum context length" in result.message
    assert len(requests) == 1 and "tool_format_switch" not in trajectory


def test_native_and_auto_send_the_same_requests(tmp_path):
    def script():
        return [reply("looking"), reply(None, [call("execute_bash", {"command": f"echo 42 > {ANSWER}"}, id="c1")]),
                reply(None, [call("submit", {}, id="c2")])]
    bodies = {}
    for name in ("native", "auto"):
        _, requests, _ = run(script(), tmp_path / name, name)
        bodies[name] = [(r.body["messages"], r.body["tools"]) for r in requests]
    assert bodies["native"] == bodies["auto"] and len(bodies["native"]) == 3


def test_a_follow_up_keeps_the_format_auto_switched_to(tmp_path):
    from isolation import SandboxSpec
    from lis_tui.conversation import Conversation

    def server_without_tools(request):
        return error(400, "this model does not support tools") if "tools" in request.body else \
            reply(hermes("submit"))
    with FakeOpenAI(default=server_without_tools) as server:
        conversation = Conversation(config_for(server), SandboxSpec(rootfs="host"), tmp_path / "out",
                                    stream=False)
        try:
            first, second = conversation.ask("one"), conversation.ask("two")
        finally:
            conversation.close()
        requests = server.chat_requests
    assert (first.reason, second.reason) == ("submitted", "submitted")
    assert ["tools" in r.body for r in requests] == [True, False, False]  # no second refusal
