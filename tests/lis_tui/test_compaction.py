"""Context that compacts: at the context limit the older steps become a summary and the run goes
on; a server's "maximum context length" gets one compacted retry; the record keeps every message.
A real sandbox and the scripted server, spoken to by the real openai client."""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fakes.openai_server import FakeOpenAI, error, reply, submit
from lis_tui import run_task
from lis_tui.agent import events
from lis_tui.agent.compaction import END, START, compact, read_head
from lis_tui.agent.trajectory import context_of
from lis_tui.config.settings import ModelConfig
from lis_tui.model.client import ModelClient
from lis_tui.runs.replay import replay_events
from lis_tui.runs.resume import load_resumable
from test_agent import bash, config_for

TOO_LONG = ("This model's maximum context length is 4000 tokens. However, you requested 4410 tokens "
            "(4410 in the messages, 0 in the completion). Please reduce the length of the messages or completion.")


def rounds(count: int, answers=None):
    """The model: `count` rounds of a command printing about 700 tokens, then submit; `answers`
    replaces the answer to the request of that number (1, 2, ...)."""
    made = itertools.count(1)
    answers = answers or {}

    def answer(request):
        n = next(made)
        if n in answers:
            return answers[n]
        done = n - sum(1 for k in answers if k < n)
        if done > count:
            return submit()
        return reply(f"round {done}", [bash(f"python3 -c \"print('round {done} ' + 'x' * 2700)\"")])
    return answer


def run(tmp_path, model, server=None, **agent):
    with FakeOpenAI(default=model, **(server or {})) as fake:
        result = run_task("Print the rounds.", config=config_for(fake, **agent), output_dir=tmp_path / "out")
        requests = fake.chat_requests
        asked_models = [r for r in fake.requests if r.path.endswith("/models")]
    return result, requests, json.loads(result.trajectory_path.read_text()), asked_models


@pytest.mark.sandbox
def test_a_40_round_run_at_6000_tokens_compacts_and_reaches_submit(tmp_path):
    result, requests, doc, _ = run(tmp_path, rounds(40), max_context_tokens=6000)
    assert (result.finish_reason, result.steps) == ("submitted", 41)
    assert max(r.size // 4 for r in requests) < 6000  # the scripted server's count: every request
    assert len(doc["compactions"]) >= 5 and {c["reason"] for c in doc["compactions"]} == {"limit"}
    task = requests[0].messages[1]["content"]
    for request in requests:  # the prompt and the task go whole in every request
        assert request.messages[0] == requests[0].messages[0]
        assert request.messages[1]["content"].startswith(task)
    assert START in requests[-1].messages[1]["content"] and "round 40" in requests[-1].last_content
    # the record keeps every message ever sent; what the model saw last is read back from it
    outputs = [m["content"] for m in doc["messages"] if m["role"] == "tool"]
    assert all(any(o.startswith(f"round {n} ") for o in outputs) for n in range(1, 41))
    assert context_of(doc) == requests[-1].messages + doc["messages"][-2:]
    assert load_resumable(str(tmp_path / "out")).messages == context_of(doc)  # resume goes on compacted
    shown = [e for e in replay_events(doc) if isinstance(e, events.Compacted)]
    assert [e.step for e in shown] == [c["step"] for c in doc["compactions"]] and "earlier messages" in shown[0].text


@pytest.mark.sandbox
def test_compact_off_stops_at_the_limit(tmp_path):
    result, requests, _, _ = run(tmp_path, rounds(40), max_context_tokens=6000, compact="off")
    assert result.finish_reason == "max_context" and len(requests) < 10
    assert "over agent.max_context_tokens = 6000" in result.message


@pytest.mark.sandbox
def test_the_servers_max_model_len_is_the_limit_when_none_is_given(tmp_path):
    result, requests, doc, asked = run(tmp_path, rounds(12), server={"max_model_len": 6000})
    assert result.finish_reason == "submitted" and doc["compactions"]
    assert doc["compactions"][0]["limit"] == 6000 and len(asked) == 1
    assert max(r.size // 4 for r in requests) <= 6000 - 6000 // 8  # room left for the reply


@pytest.mark.sandbox
def test_a_server_that_says_maximum_context_length_once_gets_a_compacted_retry(tmp_path):
    result, requests, doc, _ = run(tmp_path, rounds(12, {6: error(400, TOO_LONG)}))
    assert result.finish_reason == "submitted", result.message
    first = doc["compactions"][0]
    assert (first["reason"], first["step"], first["limit"]) == ("server", 6, 4000)
    refused, retried = requests[5], requests[6]
    assert retried.size // 4 < 4000 - 4000 // 8 < refused.size // 4 and START in retried.messages[1]["content"]
    assert max(r.size // 4 for r in requests[6:]) < 4000 - 4000 // 8  # the limit it named holds after


@pytest.mark.sandbox
def test_a_server_that_refuses_even_the_compacted_prompt_ends_in_one_line(tmp_path):
    result, requests, doc, _ = run(tmp_path, rounds(12, {6: error(400, TOO_LONG), 7: error(400, TOO_LONG)}))
    assert result.finish_reason == "max_context" and result.exit_code == 3 and len(requests) == 7
    assert "refused the prompt as too long even compacted" in result.message and "\n" not in result.message
    assert doc["finish_reason"] == "max_context" and len(doc["steps"]) == 6  # the record is kept
    assert sum(m["role"] == "tool" for m in doc["messages"]) == 5


@pytest.mark.sandbox
def test_a_limit_smaller_than_the_task_ends_in_one_line_before_any_request(tmp_path):
    result, requests, doc, _ = run(tmp_path, rounds(3), max_context_tokens=500)
    assert (result.finish_reason, requests) == ("max_context", [])
    assert result.message.startswith("the task and the standing instructions alone (with the tools' descriptions) "
                                     "are about")
    assert "Fix: raise --max-context-tokens" in result.message and "\n" not in result.message
    assert doc["finish_reason"] == "max_context" and doc["messages"][1]["role"] == "user"


def test_a_follow_up_among_the_summarized_steps_stays_whole_and_the_roles_alternate():
    def step(n, results=1):
        return [{"role": "assistant", "content": f"step {n}", "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "execute_bash", "arguments": "{}"}}]},
            *({"role": "tool", "tool_call_id": f"c{n}", "content": "y" * 4000} for _ in range(results))]
    follow_up = {"role": "user", "content": "Now the second part, please."}
    talk = [{"role": "system", "content": "rules"}, {"role": "user", "content": "the task"},
            *step(1), *step(2), follow_up, *step(3), *step(4), *step(5)]
    done = compact(talk, follow_up, room=4000)
    head = done.messages[1]["content"]
    task, lines, pinned = read_head(head)
    assert (task, pinned) == ("the task", "Now the second part, please.") and done.task_in_head
    assert lines[0] == "- you: step 1" and "- you: step 4" in lines and END in head
    assert done.messages[2:] == step(5)[:1] + done.messages[3:] and done.messages[2]["content"] == "step 5"
    roles = [m["role"] for m in done.messages if m["role"] != "tool"]
    assert roles == ["system", "user", "assistant"]
    again = compact([*done.messages, *step(6), *step(7)], done.messages[1], room=4000)  # the same task
    task, lines, pinned = read_head(again.messages[1]["content"])
    assert (task, pinned) == ("the task", "Now the second part, please.") and "- you: step 6" in lines
    assert compact(talk[:4], None, room=100) is None  # one step: nothing earlier to take out


def test_llama_cpps_context_is_what_its_props_say_it_was_started_with():
    routes = {"/v1/models": {"data": [{"id": "/models/gemma-3-1b.gguf", "meta": {"n_ctx_train": 32768}}]},
              "/props": {"default_generation_settings": {"n_ctx": 4096}}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(routes.get(self.path, {})).encode()
            self.send_response(200 if self.path in routes else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    try:  # one model served, so any name is its (llama.cpp lists its file)
        config = ModelConfig(model="gemma", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1")
        with ModelClient(config) as client:
            assert client.context_length() == 4096
            del routes["/props"]  # asked once: the answer is kept
            assert client.context_length() == 4096
    finally:
        httpd.shutdown()
        httpd.server_close()
