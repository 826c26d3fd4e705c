"""Tool calls read from what a trainer's model wrote: OpenAI messages and raw completion text."""
from __future__ import annotations

import json

import pytest

from lis_tui.model.textcalls import NO_CALL, AssistantError, parse_assistant


def calls(reply):
    return [(c.name, json.loads(c.arguments)) for c in reply.tool_calls]


def test_hermes_blocks_several_per_message_in_order():
    text = ("Let me look.\n<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": \"ls\"}}\n"
            "</tool_call>\n<tool_call>{\"name\": \"str_replace_editor\", \"arguments\": "
            "{\"command\": \"view\", \"path\": \"/testbed\"}}</tool_call>\n"
            "<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>")
    reply = parse_assistant(text, "call_3")
    assert calls(reply) == [("execute_bash", {"command": "ls"}),
                            ("str_replace_editor", {"command": "view", "path": "/testbed"}),
                            ("submit", {})]
    assert [c.id for c in reply.tool_calls] == ["call_3_0", "call_3_1", "call_3_2"]
    assert reply.format_error == "" and reply.text == text


def test_hermes_last_block_left_open_and_string_arguments():
    # `</tool_call>` used as a stop string never reaches the text; arguments as a JSON string
    text = '<tool_call>{"name": "execute_bash", "arguments": "{\\"command\\": \\"pwd\\"}"}'
    assert calls(parse_assistant(text)) == [("execute_bash", {"command": "pwd"})]


def test_fenced_json_block_one_call_or_a_list_and_parameters_alias():
    one = 'I will run it:\n```json\n{"name": "execute_bash", "parameters": {"command": "true"}}\n```'
    assert calls(parse_assistant(one)) == [("execute_bash", {"command": "true"})]
    many = '```\n[{"name": "execute_bash", "arguments": {"command": "a"}}, {"name": "submit"}]\n```'
    assert calls(parse_assistant(many)) == [("execute_bash", {"command": "a"}), ("submit", {})]


def test_code_in_fences_is_not_a_call_and_no_call_says_how():
    reply = parse_assistant("Here is a script:\n```python\nprint(1)\n```\n```json\n{\"a\": 1}\n```")
    assert reply.tool_calls == [] and reply.format_error == NO_CALL
    assert "<tool_call>" in NO_CALL and "submit" in NO_CALL


@pytest.mark.parametrize("text, says", [
    ('<tool_call>{"name": "execute_bash", "arguments": {"command": </tool_call>', "not valid JSON"),
    ('<tool_call>{"arguments": {"command": "ls"}}</tool_call>', '"name"'),
    ('<tool_call>{"name": "execute_bash", "arguments": [1]}</tool_call>', "must be an object"),
    ('```json\n{"name": "execute_bash", "arguments": {"command": "ls"\n```', "not valid JSON"),
])
def test_broken_calls_run_nothing_and_say_what_is_wrong(text, says):
    reply = parse_assistant(text)
    assert reply.tool_calls == []
    assert says in reply.format_error and "Nothing ran" in reply.format_error


def test_one_broken_block_of_several_is_named():
    text = ('<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>'
            '<tool_call>{"name": oops}</tool_call>')
    reply = parse_assistant(text)
    assert reply.tool_calls == [] and "<tool_call> block 2 of 2" in reply.format_error


def test_openai_message_with_tool_calls_as_given_and_object_arguments():
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abc", "type": "function", "function": {"name": "execute_bash",
                                                        "arguments": '{"command": "ls"}'}},
        {"type": "function", "function": {"name": "submit", "arguments": {}}}]}
    reply = parse_assistant(message, "call_1")
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("abc", "execute_bash", '{"command": "ls"}'), ("call_1_1", "submit", "{}")]


def test_openai_message_without_tool_calls_is_read_as_text():
    message = {"role": "assistant", "content": [{"type": "text", "text":
               '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'}]}
    assert calls(parse_assistant(message)) == [("submit", {})]


@pytest.mark.parametrize("bad", [42, ["x"], {"role": "user", "content": "hi"},
                                 {"content": "x", "tool_calls": [{"function": "ls"}]},
                                 {"content": 5}])
def test_what_is_no_assistant_message_is_a_client_error(bad):
    with pytest.raises(AssistantError):
        parse_assistant(bad)


def test_a_nesting_bomb_in_a_block_is_a_format_error_not_a_crash():
    reply = parse_assistant('<tool_call>{"name": "execute_bash", "arguments": ' + "[" * 100_000 + "</tool_call>")
    assert reply.tool_calls == [] and "nested too deeply" in reply.format_error
    fenced = parse_assistant('```json\n{"name": "execute_bash", "arguments": ' + "{\"a\": " * 40_000 + "\n```")  # under MAX_BLOCK
    assert fenced.tool_calls == [] and "not valid JSON" in fenced.format_error
