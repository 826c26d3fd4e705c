"""The agent loop end to end: a real sandbox, the real openai client, a scripted HTTP server."""

import json
import subprocess
import sys
import threading

import pytest

from fakes.openai_server import FakeOpenAI, call, error, reply, submit
from isolation import Sandbox
from lis_tui.agent import events
from lis_tui import run_task
from lis_tui.agent.loop import Agent
from lis_tui.config.settings import ConfigError, load_config
from lis_tui.model.client import ModelClient
from tools import TOOL_SCHEMAS, Toolbox

pytestmark = pytest.mark.sandbox


def bash(command: str, **kw):
    return call("execute_bash", {"command": command}, **kw)


def config_for(server, **agent):
    """Settings from nowhere but here: no user files, no environment, quick retries."""
    config = load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 2,
        "model.retry_base_delay": 0.001, "model.retry_max_delay": 0.01,
        "sandbox.rootfs": "host",  # python3 is there; a default rootfs set on this machine may lack it
        **{f"agent.{k}": v for k, v in agent.items()}})
    return config


class Recorder:
    def __init__(self, react=None):
        self.events, self.react = [], react

    def on_event(self, event):
        self.events.append(event)
        if self.react:
            self.react(event)

    def of(self, kind):
        return [e for e in self.events if isinstance(e, kind)]


def run(script, tmp_path, task="add 1 and 2", default=None, listener=None, send_usage=True, **kw):
    agent_settings = {k: kw.pop(k) for k in list(kw) if k in (
        "max_steps", "max_no_action", "max_context_tokens", "wall_time", "mode", "prompts")}
    with FakeOpenAI(script, default=default, send_usage=send_usage) as server:
        result = run_task(task, config=config_for(server, **agent_settings),
                          output_dir=tmp_path / "out", listener=listener, **kw)
        requests = server.chat_requests
    trajectory = json.loads(result.trajectory_path.read_text())
    return result, requests, trajectory


def test_a_run_that_computes_writes_and_submits(tmp_path):
    def write_answer(request):
        total = request.tool_outputs[-1].strip()
        return reply(tool_calls=[call("str_replace_editor", {
            "command": "create", "path": "/testbed/output/answer.txt", "file_text": total})])

    result, requests, trajectory = run(
        [reply("computing", [bash("python3 -c 'print(1+2)'")]), write_answer, submit()], tmp_path)
    assert (result.answer, result.finish_reason, result.steps) == ("3", "submitted", 3)
    assert (result.output_dir / "answer.txt").read_text() == "3\n"
    assert (result.output_dir / "files" / "answer.txt").read_text() == "3"
    assert trajectory["finish_reason"] == "submitted" and trajectory["answer"] == "3"
    first = trajectory["steps"][0]["tool_calls"][0]
    assert (first["name"], first["output"], first["exit_code"]) == ("execute_bash", "3", 0)
    assert trajectory["totals"]["steps"] == 3 and trajectory["totals"]["tool_calls"] == 3
    assert trajectory["messages"] == requests[-1].messages + [trajectory["messages"][-2],
                                                              trajectory["messages"][-1]]


def test_the_request_carries_the_papers_tools_and_prompts(tmp_path):
    _, requests, trajectory = run([submit()], tmp_path, task="What is the capital of France?")
    body = requests[0].body
    assert sorted(requests[0].tool_names) == ["execute_bash", "str_replace_editor", "submit"]
    assert body["tools"] == TOOL_SCHEMAS
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    for path in ("/testbed", "/testbed/input", "/testbed/output"):
        assert path in system["content"] and path in user["content"]
    assert "<task>\nWhat is the capital of France?\n</task>" in user["content"]
    assert "/testbed/output/answer.txt" in user["content"]
    assert "api_key" not in trajectory["model"]
    assert trajectory["sandbox"]["rootfs"] and trajectory["sandbox"]["network"] == "off"


def test_broken_json_and_an_unknown_tool_are_explained_and_the_loop_goes_on(tmp_path):
    script = [reply(tool_calls=[call("execute_bash", '{"command": "ls"')]),
              reply(tool_calls=[call("browse_web", {"url": "x"})]), submit()]
    result, requests, trajectory = run(script, tmp_path)
    assert result.finish_reason == "submitted"
    assert "not valid JSON" in requests[1].tool_outputs[-1]
    assert "Unknown tool `browse_web`" in requests[2].tool_outputs[-1]
    assert [s["tool_calls"][0]["error"] for s in trajectory["steps"][:2]] == [True, True]


def test_several_tool_calls_run_in_order_each_answered(tmp_path):
    calls = [bash("echo one > /testbed/n.txt", id="a"), bash("echo two >> /testbed/n.txt", id="b"),
             call("str_replace_editor", {"command": "view", "path": "/testbed/n.txt"}, id="c")]
    result, requests, _ = run([reply(tool_calls=calls), submit()], tmp_path)
    tools = [m for m in requests[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["a", "b", "c"]
    assert "1\tone" in tools[2]["content"] and "2\ttwo" in tools[2]["content"]
    assert result.steps == 2


def test_calls_after_submit_are_not_run_but_answered(tmp_path):
    calls = [call("submit", {}, id="s"), bash("touch /testbed/output/late", id="late")]
    result, _, trajectory = run([reply(tool_calls=calls)], tmp_path)
    assert result.finish_reason == "submitted" and result.files == []
    assert trajectory["messages"][-1] == {"role": "tool", "tool_call_id": "late",
                                          "content": "Not run: `submit` ended the task."}
    assert result.answer == "" and "answer.txt" in result.answer_note


def test_a_reply_without_a_tool_call_is_nudged_then_the_run_stops(tmp_path):
    result, requests, trajectory = run([], tmp_path, default=reply("I think it is 3."),
                                       max_no_action=3)
    assert (result.finish_reason, result.steps, len(requests)) == ("no_action", 3, 3)
    assert result.exit_code == 3
    nudge = requests[1].messages[-1]
    assert nudge["role"] == "user" and "submit" in nudge["content"]
    assert [s["nudged"] for s in trajectory["steps"]] == [True, True, True]


def test_a_nudge_is_forgotten_once_a_tool_is_used(tmp_path):
    script = [reply("hmm"), reply("hmm"), reply(tool_calls=[bash("true")]), reply("hmm"), submit()]
    result, _, _ = run(script, tmp_path, max_no_action=3)
    assert (result.finish_reason, result.steps) == ("submitted", 5)


def test_429_then_success(tmp_path):
    recorder = Recorder()
    result, requests, _ = run([error(429, retry_after=0), submit()], tmp_path, listener=recorder)
    assert result.finish_reason == "submitted" and len(requests) == 2
    (retry,) = recorder.of(events.ModelRetry)
    assert "429" in retry.reason


def test_500_forever_stops_with_a_clear_error_and_keeps_the_trajectory(tmp_path):
    script = [reply(tool_calls=[bash("echo kept")])]
    result, requests, trajectory = run(script, tmp_path, default=error(500, "the GPU fell over"))
    assert (result.finish_reason, result.exit_code) == ("error", 1)
    assert "500" in result.message and "the GPU fell over" in result.message
    assert len(requests) == 1 + 3  # the step that worked, then a first try and two retries
    assert trajectory["finish_reason"] == "error"
    assert trajectory["steps"][0]["tool_calls"][0]["output"] == "kept"


def test_a_megabyte_of_output_is_bounded_in_the_next_request_and_the_trajectory(tmp_path):
    script = [reply(tool_calls=[bash("python3 -c \"print('x' * 1_000_000)\"")]), submit()]
    result, requests, trajectory = run(script, tmp_path)
    seen = requests[1].tool_outputs[-1]
    assert 1_000 < len(seen) < 30_000 and "cut" in seen
    assert trajectory["steps"][0]["tool_calls"][0]["truncated"] is True
    assert result.trajectory_path.stat().st_size < 200_000


def test_max_steps(tmp_path):
    result, requests, trajectory = run([], tmp_path, default=reply(tool_calls=[bash("true")]),
                                       max_steps=3)
    assert (result.finish_reason, result.steps, len(requests), result.exit_code) == (
        "max_steps", 3, 3, 3)
    assert "max-steps" in result.message and len(trajectory["steps"]) == 3


def test_max_context_stops_before_the_server_would_refuse(tmp_path):
    script = [reply(tool_calls=[bash("python3 -c \"print('y' * 12000)\"")])]
    result, requests, _ = run(script, tmp_path, default=submit(), max_context_tokens=3000)
    assert (result.finish_reason, len(requests)) == ("max_context", 1)
    assert "max_context_tokens" in result.message


def test_wall_time_interrupts_a_long_command(tmp_path):
    script = [reply(tool_calls=[bash("sleep 60")])]
    # Seconds, so that a loaded machine still reaches the command before the time is up.
    result, _, trajectory = run(script, tmp_path, default=submit(), wall_time=3)
    assert result.finish_reason == "wall_time" and result.exit_code == 3
    assert "Interrupted" in trajectory["steps"][0]["tool_calls"][0]["output"]


def test_cancel_from_another_thread_stops_after_the_current_command(tmp_path):
    def react(event):
        if isinstance(event, events.ToolStarted) and event.index == 0:
            threading.Thread(target=agent.cancel).start()

    recorder = Recorder(react)
    calls = [bash("sleep 60", id="long"), bash("touch /testbed/output/never", id="next")]
    with FakeOpenAI([reply(tool_calls=calls)], default=submit()) as server, \
            Sandbox() as sandbox, ModelClient(config_for(server).model) as client:
        toolbox = Toolbox(sandbox)
        agent = Agent(client, toolbox, listener=recorder)
        finished = agent.run("sleep")
        toolbox.close()
        assert sandbox.exec("ls /testbed/output").stdout == ""
    assert finished.reason == "cancelled" and finished is recorder.events[-1]
    (done,) = recorder.of(events.ToolFinished)
    assert "Interrupted" in done.record.output
    assert agent.messages[-1]["tool_call_id"] == "next"
    assert agent.messages[-1]["content"].startswith("Not run")


def test_approval_can_edit_skip_or_run_a_command(tmp_path):
    answers = iter([events.Edit("echo edited"), events.Skip("not on my machine"), events.Run()])

    def react(event):
        if isinstance(event, events.ApprovalNeeded):
            event.future.set_result(next(answers))

    script = [reply(tool_calls=[bash("echo original"), bash("rm -rf /testbed"), bash("echo ran")]),
              submit()]
    result, requests, trajectory = run(script, tmp_path, listener=Recorder(react),
                                       command_approval=True)
    edited, skipped, ran = requests[1].tool_outputs
    assert "it ran as:\necho edited]" in edited and edited.endswith("\nedited")
    assert "not on my machine" in skipped and ran == "ran"
    assert [t["approval"] for t in trajectory["steps"][0]["tool_calls"]] == [
        "edited", "skipped", "run"]


def test_approval_can_be_asked_for_some_commands_only(tmp_path):
    asked = []

    def react(event):
        if isinstance(event, events.ApprovalNeeded):
            asked.append(event.command)
            event.future.set_result(False)  # a plain "no" works too

    script = [reply(tool_calls=[bash("ls /testbed"), bash("rm -rf /testbed/input")]), submit()]
    _, requests, _ = run(script, tmp_path, listener=Recorder(react),
                         command_approval=lambda command: command.startswith("rm "))
    assert asked == ["rm -rf /testbed/input"]
    assert "not approved" in requests[1].tool_outputs[1]


def test_cancel_while_waiting_for_approval(tmp_path):
    def react(event):
        if isinstance(event, events.ApprovalNeeded):  # nobody answers; someone presses stop
            threading.Thread(target=agent.cancel).start()

    calls = [bash("touch /testbed/output/a", id="a"), bash("touch /testbed/output/b", id="b")]
    with FakeOpenAI([reply(tool_calls=calls)], default=submit()) as server, \
            Sandbox() as sandbox, ModelClient(config_for(server).model) as client:
        toolbox = Toolbox(sandbox)
        agent = Agent(client, toolbox, listener=Recorder(react), command_approval=True)
        finished = agent.run("touch")
        toolbox.close()
        assert sandbox.exec("ls /testbed/output").stdout == ""
    assert finished.reason == "cancelled"
    assert [m["tool_call_id"] for m in agent.messages if m["role"] == "tool"] == ["a", "b"]
    assert "stopped before anyone answered" in agent.messages[-2]["content"]


def test_events_arrive_in_order_and_the_trajectory_is_saved_each_step(tmp_path):
    saved = []

    def react(event):
        if isinstance(event, events.StepFinished):
            path = tmp_path / "out" / "trajectory.json"
            saved.append(len(json.loads(path.read_text())["steps"]))

    recorder = Recorder(react)
    run([reply(tool_calls=[bash("true")]), submit()], tmp_path, listener=recorder)
    kinds = [type(e).__name__ for e in recorder.events]
    assert kinds == ["RunStarted", "StepStarted", "ModelRequest", "ModelReply", "ToolStarted",
                     "ToolFinished", "StepFinished", "StepStarted", "ModelRequest", "ModelReply",
                     "ToolStarted", "ToolFinished", "StepFinished", "RunFinished"]
    assert saved == [1, 2]


def test_streaming_sends_deltas(tmp_path):
    recorder = Recorder()
    run([reply("let me see", [call("submit", {})], chunk_size=3)], tmp_path, listener=recorder,
        stream=True)
    text = "".join(e.text for e in recorder.of(events.ModelDelta) if e.kind == "text")
    assert text == "let me see"


def test_streaming_without_usage_counts_tokens_as_an_estimate(tmp_path):
    from lis_tui.app.widgets.status import Status, status_text  # what the app's status line shows

    result, _, trajectory = run([reply("looking", [bash("echo hi")]), submit()], tmp_path,
                                stream=True, send_usage=False)
    usage = result.usage
    assert usage.estimated and usage.prompt_tokens > 100 and usage.completion_tokens > 0
    assert trajectory["totals"]["estimated"] is True
    assert all(step["usage"]["estimated"] and step["usage"]["prompt_tokens"] for step in trajectory["steps"])
    line = status_text(Status(tokens_in=usage.prompt_tokens, tokens_out=usage.completion_tokens,
                              tokens_estimated=True), 0).plain
    assert f"tok ~{usage.prompt_tokens:,}↑" in line


def test_vanilla_mode_is_one_call_without_tools_or_sandbox(tmp_path):
    result, requests, trajectory = run([reply("The answer is 3.")], tmp_path, mode="llm")
    assert (result.answer, result.finish_reason, result.steps) == ("The answer is 3.", "submitted", 1)
    assert "tools" not in requests[0].body
    assert requests[0].messages[-1] == {"role": "user", "content": "add 1 and 2"}
    assert trajectory["sandbox"] is None and trajectory["mode"] == "llm"


def test_output_files_are_copied_without_following_links(tmp_path):
    command = ("mkdir -p /testbed/output/sub && echo data > /testbed/output/sub/d.txt && "
               "printf '#!/bin/sh\\n' > /testbed/output/run.sh && chmod +x /testbed/output/run.sh && "
               "ln -s /etc/passwd /testbed/output/passwd && ln -s .. /testbed/output/up")
    result, _, trajectory = run([reply(tool_calls=[bash(command)]), submit()], tmp_path)
    files = result.output_dir / "files"
    assert sorted(result.files) == ["run.sh", "sub/d.txt"]
    assert (files / "sub" / "d.txt").read_text() == "data\n"
    assert (files / "run.sh").stat().st_mode & 0o111
    assert not (files / "passwd").exists() and not (files / "up").is_symlink()
    assert sorted(trajectory["files_skipped"]) == ["passwd (symlink)", "up (symlink)"]


def test_prompts_can_be_replaced_from_a_toml_file(tmp_path):
    prompts = tmp_path / "prompts.toml"
    prompts.write_text("instance = '''Q: {task} -> \\boxed{} in {output_dir}'''\n")
    _, requests, _ = run([submit()], tmp_path, prompts=str(prompts))
    assert requests[0].messages[-1]["content"] == "Q: add 1 and 2 -> \\boxed{} in /testbed/output"
    prompts.write_text("instanse = 'typo'\n")
    with pytest.raises(ConfigError, match='unknown prompt "instanse"'):
        run([submit()], tmp_path / "again", prompts=str(prompts))


def test_an_output_dir_in_use_is_refused(tmp_path):
    run([submit()], tmp_path)
    with pytest.raises(ValueError, match="already holds a run"):
        run([submit()], tmp_path)


def test_the_agent_core_does_not_load_textual():
    code = ("import sys, lis_tui.agent.loop, lis_tui.api, lis_tui.agent.trajectory, lis_tui.agent.events, "
            "lis_tui.commands.run; sys.exit('textual' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_import_lis_tui_stays_light():
    code = "import sys, lis_tui; sys.exit('openai' in sys.modules or 'lis_tui.api' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_full_disk_is_told_to_the_model_which_makes_room_and_goes_on(tmp_path):
    # issue 24: the layers are a tmpfs of the disk limit; past it the kernel refuses, nothing is killed
    fill = bash("echo 42 > /testbed/output/answer.txt; "
                "for i in $(seq 400); do head -c 1M /dev/zero > /testbed/f$i || break; done; echo finished")
    room = bash("rm /testbed/f*; echo room > /testbed/output/notes.md; cat /testbed/output/notes.md", id="room")
    with FakeOpenAI([reply(tool_calls=[fill]), reply(tool_calls=[room])], default=submit()) as server:
        config = config_for(server)
        config.set("sandbox.disk", "20M", "the test")
        result = run_task("fill the disk", config=config, output_dir=tmp_path / "out")
    assert (result.finish_reason, result.exit_code) == ("submitted", 0), result.message
    steps = json.loads(result.trajectory_path.read_text())["steps"]
    told, after = steps[0]["tool_calls"][0]["output"], steps[1]["tool_calls"][0]["output"]
    assert "No space left on device" in told and "disk is full: its limit of 20 MiB is reached" in told
    assert "--disk SIZE" in told and "finished" in told  # the shell went on: only the writes failed
    assert "room" in after and "disk is full" not in after
    assert result.answer == "42" and (result.output_dir / "files" / "notes.md").read_text() == "room\n"


def test_a_sandbox_stopped_by_its_disk_cap_ends_the_run_and_says_how_to_raise_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_DISK_TMPFS", "0")  # the walk's cap (--disk-on disk): past it the sandbox is stopped
    fill = bash("echo 42 > /testbed/output/answer.txt; echo kept > /testbed/output/notes.md; "
                "for i in $(seq 400); do head -c 1M /dev/zero > /testbed/f$i; sleep 0.02; done; echo finished")
    with FakeOpenAI([reply(tool_calls=[fill, bash("echo next", id="next")])], default=submit()) as server:
        config = config_for(server)
        config.set("sandbox.disk", "20M", "the test")
        result = run_task("fill the disk", config=config, output_dir=tmp_path / "out")
        requests = server.chat_requests
    assert (result.finish_reason, result.exit_code, len(requests)) == ("sandbox_limit", 3, 1)
    assert "disk limit of 20 MiB was reached" in result.message and "--disk SIZE" in result.message
    trajectory = json.loads(result.trajectory_path.read_text())
    told = trajectory["steps"][0]["tool_calls"][0]["output"]
    assert "disk limit of 20 MiB was reached" in told and "finished" not in told
    unrun = [m for m in trajectory["messages"] if m.get("tool_call_id") == "next"]
    assert unrun[0]["content"].startswith("Not run: the sandbox was stopped: its disk limit"), unrun
    # what it wrote before the cap is kept: the answer, and the output files
    assert result.answer == "42" and (result.output_dir / "files" / "notes.md").read_text() == "kept\n"


def test_a_sparse_answer_file_is_read_a_megabyte_deep_and_kept_sparse_in_files(tmp_path):
    # issue 24: 1 GiB of holes costs the sandbox nothing; the answer used to be read whole into memory
    result, _, _ = run([reply(tool_calls=[bash("printf 42 > /testbed/output/answer.txt && "
                                               "truncate -s 1G /testbed/output/answer.txt")]), submit()], tmp_path)
    assert result.finish_reason == "submitted"
    assert result.answer.startswith("42") and len(result.answer) <= 1 << 20
    copied = (result.output_dir / "files" / "answer.txt").stat()
    assert copied.st_size == 1 << 30 and copied.st_blocks * 512 < 1 << 20
