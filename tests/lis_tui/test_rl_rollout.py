"""`lis-tui rollout` end to end: real sandboxes, the real openai client, the scripted server
returning logprobs and token ids as vLLM does, scripted rewards per group."""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, delay, reply, submit, token_ids
from lis_tui.bench.episode import dumps
from lis_tui.bench.tasks import load_tasks
from lis_tui.config.settings import load_config
from lis_tui.rl import rollout
from lis_tui.rl.runner import advantages

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[2]
# How many of a group's samples answer right: all (zero variance), half, none (zero variance).
RIGHT = {"t0": 4, "t1": 2, "t2": 0}


def write_tasks(path, ids=("t0", "t1", "t2")):
    path.write_text("".join(json.dumps({
        "id": i, "problem_statement": f"Task {i}: what word is in the document?",
        "ground_truth": "heron", "documents": {"01-note.txt": "The word is heron."}}) + "\n"
        for i in ids))
    return path


def scripted_policy(right=RIGHT):
    """Reads the document, writes the right answer for the first `right[task]` samples of a
    task to start, a wrong one for the rest, then submits."""
    started, lock = {}, threading.Lock()

    def answer(request):
        task = next(m["content"] for m in request.messages if m["role"] == "user")
        task_id = task.split("Task ", 1)[1].split(":", 1)[0]
        outputs = request.tool_outputs
        if not outputs:
            with lock:
                k = started[task_id] = started.get(task_id, 0) + 1
            word = "heron" if k <= right.get(task_id, 0) else "crane"
            return reply("Reading.", [call("execute_bash", {
                "command": f"cat /testbed/documents/01-note.txt; echo {word} > /testbed/output/answer.txt"})])
        return submit()
    return answer


def config_for(server):
    return load_config(env={}, paths=[], overrides={
        "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0})


def test_groups_advantages_messages_and_loss_masks(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    with FakeOpenAI(default=scripted_policy()) as server:
        outcome = rollout(str(tasks), policy_url=server.base_url, model="m", n=4,
                          output=tmp_path / "out", config=config_for(server), progress=None)
        body = server.chat_requests[0].body
    assert body["logprobs"] is True and body["return_tokens_as_token_ids"] is True
    assert outcome.incomplete == [] and not outcome.interrupted
    lines = [json.loads(x) for x in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and sorted({(x["group_id"], x["sample"]) for x in lines}) == [
        (t, s) for t in ("t0", "t1", "t2") for s in range(4)]
    groups = {g["group_id"]: g for g in outcome.groups}
    assert groups["t0"]["zero_variance"] and groups["t2"]["zero_variance"]
    assert groups["t0"]["advantages"] == [0.0] * 4 and not groups["t1"]["zero_variance"]
    assert sorted(groups["t1"]["rewards"]) == [0.0, 0.0, 1.0, 1.0]
    train = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert len(train) == 12
    for episode in train:
        expected = 0.866 if episode["reward"] == 1.0 else -0.866
        if episode["group_id"] == "t1":
            assert episode["advantage"] == pytest.approx(expected, abs=1e-3)
        assert [m["role"] for m in episode["messages"]] == [
            "system", "user", "assistant", "tool", "assistant", "tool"]
        assert episode["messages"][2]["tool_calls"][0]["function"]["name"] == "execute_bash"
        assert "The word is heron." in episode["messages"][3]["content"]
        check_tokens(episode)


def check_tokens(episode):
    first, second = episode["turns"]
    assert first["environment_tokens"] == 0 and first["environment_token_ids"] == []
    assert first["loss_mask"] == [1] * len(first["completion_token_ids"])
    env = bytes(second["environment_token_ids"]).decode()
    assert env.startswith("<|tool|>The word is heron.") and env.endswith("<|assistant|>")
    assert second["environment_tokens"] == len(second["environment_token_ids"])
    assert second["loss_mask"] == [0] * len(env) + [1] * len(second["completion_token_ids"])
    assert bytes(second["completion_token_ids"]).decode() == '<call>submit{}</call><|end|>'
    assert all(lp < 0 for lp in second["completion_logprobs"])
    seq = episode["sequence"]
    model_text = bytes(i for i, m in zip(seq["response_token_ids"], seq["loss_mask"]) if m).decode()
    assert "<call>execute_bash" in model_text and "heron." not in model_text.split("<|end|>")[1]
    assert len(seq["logprobs"]) == len(seq["loss_mask"]) == len(seq["response_token_ids"])
    rendered_prompt = bytes(seq["prompt_token_ids"]).decode()
    assert rendered_prompt.startswith("<|system|>") and rendered_prompt.endswith("<|assistant|>")
    usage = episode["usage"]
    assert usage["environment_tokens"] == len(env) and usage["model_tokens"] == sum(
        len(t["completion_token_ids"]) for t in episode["turns"])
    assert token_ids("é") == [0xC3, 0xA9]  # the fake tokenizer is bytes: decoding above is exact


def test_lines_are_the_records_as_dumps_writes_them(tmp_path):
    """Lines are encoded in pieces and train.jsonl's are spliced, unparsed: each must still be
    exactly `dumps` of the record, in the field order it always had, with the trajectory's
    messages and, in train.jsonl, the group's advantage."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids=("t1", "t\u00e9 \"q\""))
    right = {"t1": 1, 't\u00e9 "q"': 1}
    with FakeOpenAI(default=scripted_policy(right)) as server:
        outcome = rollout(str(tasks), policy_url=server.base_url, model="m", n=2,
                          output=tmp_path / "out", config=config_for(server), progress=None)
    out = tmp_path / "out"
    lines = (out / "rollouts.jsonl").read_text(encoding="utf-8").splitlines()
    groups = {g["group_id"]: g for g in outcome.groups}
    train = (out / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(train) == 4 and outcome.count == 4
    by_key = {json.loads(line)["key"]: line for line in lines}
    for text in train:
        episode = json.loads(text)
        line = by_key[episode["key"]]
        record = json.loads(line)
        assert dumps(record) == line and record["advantage"] is None
        assert list(record)[-10:] == ["task_id", "group_id", "sample", "advantage", "zero_variance",
                                      "messages", "tools", "usage", "turns", "sequence"]
        trajectory = json.loads((out / record["trajectory"]).read_text(encoding="utf-8"))
        assert record["messages"] == trajectory["messages"] and record["tools"] == trajectory["tools"]
        group = groups[record["group_id"]]
        assert text == dumps({**record, "advantage": group["advantages"][record["sample"]],
                              "zero_variance": group["zero_variance"]})
        assert abs(episode["advantage"]) == pytest.approx(0.7071, abs=1e-3)  # one right of two
        check_tokens(episode)
    assert not (out / "warnings.txt").exists() and outcome.warnings == []


def test_progress_counts_the_running_episodes(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids=("t1",))
    progress = io.StringIO()
    with FakeOpenAI(default=lambda r: delay(0.2, scripted_policy()(r))) as server:
        rollout(str(tasks), policy_url=server.base_url, model="m", n=3, output=tmp_path / "out",
                config=config_for(server), progress=progress)
    shown = progress.getvalue().splitlines()
    # The first line shows at the first start; with three at once, later ones see them running.
    assert re.search(r"running [1-3] ", shown[0]), shown
    assert shown[-1].startswith("#" * 20) and "running 0 " in shown[-1]


def test_a_server_without_token_ids_is_named_once(tmp_path):
    """llama.cpp's server answers `logprobs` with text tokens and no ids: the run says once what
    that means for training and which servers send them, on stderr and in warnings.txt."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids=("t0", "t1"))
    progress = io.StringIO()
    with FakeOpenAI(default=scripted_policy(), token_ids=False) as server:
        outcome = rollout(str(tasks), policy_url=server.base_url, model="m", n=2,
                          output=tmp_path / "out", config=config_for(server), progress=progress)
        assert server.chat_requests[0].body["return_token_ids"] is True  # asked, not answered
    assert all(e["sequence"] is None and "token_ids" not in e["turns"][0] for e in outcome.episodes)
    said = progress.getvalue()
    assert said.count("returned no token ids") == 1, said
    warning = next(line for line in said.splitlines() if "returned no token ids" in line)
    for words in ("sequence: null", "re-tokenize `messages`", "vLLM", "llama.cpp", "--no-token-ids",
                  "return_token_ids: true"):
        assert words in warning
    assert outcome.warnings == [warning.removeprefix("lis-tui rollout: ")]
    assert (tmp_path / "out" / "warnings.txt").read_text() == outcome.warnings[0] + "\n"


def test_without_token_ids_the_usage_split_remains(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids=("t1",))
    with FakeOpenAI(default=scripted_policy()) as server:
        outcome = rollout(str(tasks), policy_url=server.base_url, model="m", n=2,
                          output=tmp_path / "out", config=config_for(server), progress=None,
                          token_ids=False)
        assert "logprobs" not in server.chat_requests[0].body
    episode = outcome.episodes[0]
    assert episode["sequence"] is None and "token_ids" not in episode["turns"][0]
    assert episode["turns"][1]["environment_tokens"] > 0 and episode["usage"]["model_tokens"] > 0


def test_advantage_formula():
    advs, mean, std, zero = advantages([1.0, 0.0, 0.0, 0.0])
    assert mean == 0.25 and std == pytest.approx(0.5) and not zero
    assert advs[0] == pytest.approx(1.5, abs=1e-4) and advs[1] == pytest.approx(-0.5, abs=1e-4)
    assert advantages([1.0])[3] and advantages([0.5, 0.5])[0] == [0.0, 0.0]


def rollout_cli(tasks, server, out, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "lis_tui.cli", "rollout", str(tasks), "--policy-url", server.base_url,
         "--model", "m", "-n", "4", "-j", "4", "--output", str(out), *extra],
        cwd=out.parent, env={**os.environ, "PYTHONPATH": str(ROOT),
                             "XDG_CONFIG_HOME": str(out.parent / "config"),
                             "LIS_SCRATCH": str(out.parent / "scratch")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_resume_after_kill_9_completes_every_group_once(tmp_path):
    ids = tuple(f"t{i}" for i in range(6))
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids)
    policy = scripted_policy({i: 2 for i in ids})
    out = tmp_path / "out"
    with FakeOpenAI(default=lambda r: delay(0.1, policy(r))) as server:
        proc = rollout_cli(tasks, server, out)
        lines = out / "rollouts.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not lines.exists() or
                                               len(lines.read_text().splitlines()) < 6):
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        before = len(lines.read_text().splitlines())
        assert 6 <= before < 24
        with lines.open("ab") as torn:  # a kill mid-write, every time: half a line, no newline
            torn.write(b'{"key": "t0|sandbox|3", "id": "t0", "answ')
        resumed = rollout_cli(tasks, server, out, "--resume")
        _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    records = [json.loads(x) for x in lines.read_text().splitlines() if x.strip()]
    keys = [r["key"] for r in records if not r["crashed"]]
    assert sorted(keys) == sorted(f"{t}|sandbox|{s}" for t in ids for s in range(4))  # each once
    groups = [json.loads(x) for x in (out / "groups.jsonl").read_text().splitlines()]
    assert sorted(g["group_id"] for g in groups) == sorted(ids)
    # The scripted policy answers right for a task's first two starts; a sample killed after it
    # started spent one of those, so a resumed group may hold fewer right answers: 4 rewards each.
    assert all(len(g["rewards"]) == 4 and set(g["rewards"]) <= {0.0, 1.0} for g in groups)
    train = (out / "train.jsonl").read_text().splitlines()
    assert len(train) == 24 and "6 groups complete" in err
    last = {r["key"]: r for r in records}  # lines from both runs, spliced alike
    by_group = {g["group_id"]: g for g in groups}
    for text in train:
        record = last[json.loads(text)["key"]]
        group = by_group[record["group_id"]]
        assert text == dumps({**record, "advantage": group["advantages"][record["sample"]],
                              "zero_variance": group["zero_variance"]})


def test_text_format_episodes_keep_what_the_model_wrote_and_read(tmp_path):
    """hermes: the records hold the model's text as it wrote it and the `<tool_response>` turn it
    read, so the token ids and loss mask mean what they do for native episodes."""
    def policy(request):
        if request.messages[-1]["role"] == "user" and "<tool_response>" in request.messages[-1]["content"]:
            return reply('<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>')
        return reply('Reading.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": '
                     '"cat /testbed/documents/01-note.txt; echo heron > /testbed/output/answer.txt"}}\n</tool_call>')
    tasks = write_tasks(tmp_path / "tasks.jsonl", ids=("t0",))
    with FakeOpenAI(default=policy) as server:
        config = config_for(server)
        config.agent.tool_format = "hermes"
        outcome = rollout(str(tasks), policy_url=server.base_url, model="m", n=1,
                          output=tmp_path / "out", config=config, progress=None)
        assert "tools" not in server.chat_requests[0].body
    episode = outcome.episodes[0]
    assert episode["reward"] == 1.0 and episode["tool_format"] == "hermes"
    assert [m["role"] for m in episode["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "tool_calls" not in episode["messages"][2] and episode["messages"][2]["content"].startswith("Reading.")
    first, second = episode["turns"]
    assert bytes(first["completion_token_ids"]).decode() == episode["messages"][2]["content"] + "<|end|>"
    env = bytes(second["environment_token_ids"]).decode()
    assert env.startswith("<|user|><tool_response>\nThe word is heron.") and env.endswith("<|assistant|>")
    assert second["loss_mask"] == [0] * len(env) + [1] * len(second["completion_token_ids"])
    seq = episode["sequence"]
    model_text = bytes(i for i, m in zip(seq["response_token_ids"], seq["loss_mask"]) if m).decode()
    assert model_text.count("<tool_call>") == 2 and "heron." not in model_text.split("<|end|>")[1]
