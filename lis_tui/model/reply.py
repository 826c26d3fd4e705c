"""What a model answered: text, reasoning, tool calls and usage, assembled from a reply or a stream."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for; `arguments` is its raw JSON text, maybe broken."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    """Token counts the server reported for one call, or counted locally when it reported none."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False
    """Counted here (lis_tui/model/tokens.py), not by the server."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens,
                     self.cached_tokens + other.cached_tokens, self.estimated or other.estimated)


@dataclass
class ModelReply:
    """What the model answered; the same whether it was streamed or not."""

    text: str
    reasoning: str
    tool_calls: list[ToolCall]
    usage: Usage | None
    finish_reason: str | None
    raw: Any
    """What the server sent: a ChatCompletion (`.to_dict()` when needed; done eagerly it cost 0.6 ms a call),
    or the assembled dict of a stream."""
    format_error: str = ""
    """Why tool calls written as text could not be read (`lis_tui.model.textcalls`); when set, the
    agent tells the model this instead of its usual nudge."""

    def to_message(self, include_reasoning: bool = False) -> dict:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": self.text or (None if self.tool_calls else "")}
        if include_reasoning and self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls]
        return message


def reply_from_completion(completion: dict) -> ModelReply:
    """A ModelReply from a non-streaming chat completion, as the JSON the server sent."""
    if not completion.get("choices"):
        raise ValueError("the reply has no choices")
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    calls = [ToolCall(tc.get("id") or f"call_{i}", _function(tc).get("name") or "",
                      _text(_function(tc).get("arguments")))
             for i, tc in enumerate(message.get("tool_calls") or [])]
    return ModelReply(message.get("content") or "", _reasoning(message), calls,
                      _usage(completion.get("usage")), choice.get("finish_reason"), completion)


class StreamAssembler:
    """Builds one ModelReply from streamed chunks (JSON objects), yielding the text and reasoning deltas."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.meta: dict[str, Any] = {}

    def add(self, chunk: dict) -> list[tuple[str, str]]:
        """Take one chunk; return its (kind, text) deltas."""
        self.meta = {key: chunk.get(key) for key in ("id", "model", "created")}
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        deltas = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta")
            if choice.get("index", 0) != 0 or not isinstance(delta, dict):
                continue
            reasoning, text = _reasoning(delta), delta.get("content")
            if reasoning:
                self.reasoning.append(reasoning)
                deltas.append(("reasoning", reasoning))
            if text:
                self.text.append(text)
                deltas.append(("text", text))
            for tc in delta.get("tool_calls") or []:
                self._add_call(tc)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return deltas

    def _add_call(self, tc: dict) -> None:
        index = tc["index"] if tc.get("index") is not None else len(self.calls)
        entry = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        entry["id"] = tc.get("id") or entry["id"]
        name = _function(tc).get("name")
        if name and name != entry["name"]:
            entry["name"] += name  # some servers stream the name in pieces, others repeat it
        if _function(tc).get("arguments"):
            entry["arguments"].append(_text(_function(tc)["arguments"]))

    def reply(self) -> ModelReply:
        """The assembled reply."""
        calls = [ToolCall(e["id"] or f"call_{i}", e["name"], "".join(e["arguments"]))
                 for i, e in sorted(self.calls.items())]
        reply = ModelReply("".join(self.text), "".join(self.reasoning), calls, self.usage,
                           self.finish_reason, {})
        reply.raw = {**self.meta, "object": "chat.completion", "choices": [
            {"index": 0, "message": reply.to_message(include_reasoning=True),
             "finish_reason": self.finish_reason}], "usage": _usage_dict(self.usage)}
        return reply


def _function(tool_call: dict) -> dict:
    return tool_call.get("function") or {}


def _reasoning(message: dict) -> str:
    """`reasoning_content` (vLLM, DeepSeek, SGLang) or `reasoning` (Ollama, OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _usage(usage: dict | None) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or usage.get("prompt_cache_hit_tokens")
    return Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0, cached or 0)


def _usage_dict(usage: Usage | None) -> dict | None:
    if usage is None:
        return None
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}
