"""Tool calls from what a trainer's model wrote: an OpenAI-format assistant message, or raw text.

Trainers that generate themselves often hold only the completion text. Two formats are read:
- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per reply
  (a last block left open, as when `</tool_call>` was a stop string, counts too);
- JSON in a fenced block (```json ... ``` or a bare ```): one call object or a list of them.
`arguments` may be an object or a JSON string of one; `parameters` is taken as its other name.
Both `env serve` and the agent's text tool formats (`lis_tui.model.tool_formats`) read replies here.

A reply whose calls cannot be read runs none of them: its `format_error` says which block is
wrong and how a call is written, and the agent sends that to the model instead of running
half of what it meant.
"""
from __future__ import annotations

import json
import re
from typing import Any

from lis_tui.model.reply import ModelReply, ToolCall
from tools import loads_model_json

HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
FENCED = re.compile(r"```([A-Za-z0-9_-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)
EXAMPLE = ('<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls /testbed"}}\n'
           '</tool_call>')
HOW = (f"Write each tool call as\n{EXAMPLE}\n(one block per call; several blocks run in order), "
       "or as an OpenAI tool call. The tools are execute_bash, str_replace_editor and submit.")
MAX_BLOCK = 1 << 18
"""Characters in one block read as JSON: a reply of megabytes of JSON is refused, not decoded."""
MAX_CALLS = 32
"""Calls one reply may make; more is refused whole (a loop the model fell into, not a plan)."""
NO_CALL = ("Your reply called no tool, so nothing ran. Work on the task with `execute_bash` or "
           "`str_replace_editor`, and call `submit` once the answer is in /testbed/output/answer.txt. "
           + HOW)


class AssistantError(ValueError):
    """What the trainer sent is not an assistant message or text (a client mistake, not the model's)."""


def parse_assistant(assistant: Any, call_prefix: str = "call") -> ModelReply:
    """The reply the agent runs: OpenAI tool calls as given, else the calls found in the text."""
    if isinstance(assistant, str):
        return _from_text(assistant, call_prefix)
    if not isinstance(assistant, dict):
        raise AssistantError("`assistant` must be an OpenAI assistant message (an object with "
                             "`content` and optionally `tool_calls`) or the completion text")
    role = assistant.get("role", "assistant")
    if role != "assistant":
        raise AssistantError(f"`assistant` has role {str(role)[:40]!r}; it must be the model's "
                             "message, role \"assistant\"")
    content = assistant.get("content")
    text = content if isinstance(content, str) else _content_text(content)
    calls = assistant.get("tool_calls") or []
    if not calls:  # a server without a tool parser leaves the calls in the text
        return _from_text(text, call_prefix)
    if not isinstance(calls, list):
        raise AssistantError("`tool_calls` must be a list of {id, type, function: {name, arguments}}")
    return ModelReply(text, "", [_openai_call(c, n, call_prefix) for n, c in enumerate(calls)],
                      None, "tool_calls", None)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise AssistantError("`content` must be text, a list of content parts, or null")


def _openai_call(call: Any, n: int, prefix: str) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise AssistantError(f"tool_calls[{n}] must be {{id, type, function: {{name, arguments}}}}")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):  # some clients send the object itself
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return ToolCall(str(call.get("id") or f"{prefix}_{n}"), function["name"], arguments)


def _from_text(text: str, prefix: str) -> ModelReply:
    calls, error = text_tool_calls(text, prefix)
    if not calls and not error:
        error = NO_CALL
    return ModelReply(text, "", calls, None, "tool_calls" if calls else "stop", None,
                      format_error=error)


def text_tool_calls(text: str, prefix: str = "call") -> tuple[list[ToolCall], str]:
    """The calls written in `text`, and "" ; or no calls and what is wrong with them."""
    blocks = [m.group(1) for m in HERMES.finditer(text)]
    kind = "<tool_call> block"
    if not blocks:
        kind = "fenced JSON block"
        blocks = [body for lang, body in FENCED.findall(text) if lang.lower() in ("", "json")]
        if not any(_looks_like_call(b) for b in blocks):
            return [], ""  # code or prose in fences, not an attempt at a call
    found: list[dict] = []
    for n, block in enumerate(blocks, 1):
        try:
            found += _calls_in(block)
        except ValueError as exc:
            where = f"{kind} {n} of {len(blocks)}" if len(blocks) > 1 else f"the {kind}"
            return [], f"Nothing ran: {where} could not be read as a tool call: {exc}. {HOW}"
    if len(found) > MAX_CALLS:
        return [], (f"Nothing ran: the reply makes {len(found)} tool calls; at most {MAX_CALLS} "
                    f"run from one reply. Send fewer. {HOW}")
    return [ToolCall(f"{prefix}_{n}", c["name"], c["arguments"]) for n, c in enumerate(found)], ""


def _looks_like_call(block: str) -> bool:
    return bool(re.search(r'"name"\s*:', block))


def _calls_in(block: str) -> list[dict]:
    if len(block) > MAX_BLOCK:
        raise ValueError(f"it is {len(block):,} characters long, over the limit of {MAX_BLOCK:,}")
    try:
        value = loads_model_json(block.strip())
    except ValueError as exc:
        raise ValueError(f"it is not valid JSON ({exc})") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError("it is an empty list")
    return [_one_call(item) for item in items]


def _one_call(item: Any) -> dict:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise ValueError('it needs an object with a "name" (the tool) and "arguments"')
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        return {"name": item["name"], "arguments": arguments}  # the tool reports broken JSON
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" of {item["name"]!r} must be an object')
    return {"name": item["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
