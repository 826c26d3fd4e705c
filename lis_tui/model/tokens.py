"""Local token counts for servers that report no usage (llama.cpp's server when streaming, some proxies).

With tiktoken installed and its o200k_base encoding available offline or fetchable, its count;
otherwise about four characters a token, the usual rule of thumb for English text and code. Either
way the result is an estimate (`Usage.estimated`): the model's own tokenizer is on the server.
"""
from __future__ import annotations

import functools
import json
import threading
from typing import Any, Callable

from lis_tui.model.reply import ModelReply, Usage

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role and separators each message costs in a chat template
TIKTOKEN_WAIT = 5.0  # seconds; tiktoken downloads its encoding on first use, with no timeout of its own


def _rule_of_thumb(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


@functools.lru_cache(maxsize=1)
def _counter() -> Callable[[str], int]:
    found: list[Callable[[str], int]] = []

    def load() -> None:
        try:
            import tiktoken  # noqa: PLC0415 (optional)

            encoding = tiktoken.get_encoding("o200k_base")
            found.append(lambda text: len(encoding.encode(text, disallowed_special=())))
        except Exception:  # noqa: S110 (not installed, or no encoding file to be had: the rule of thumb)
            pass

    loader = threading.Thread(target=load, daemon=True, name="lis-tiktoken")
    loader.start()
    loader.join(TIKTOKEN_WAIT)  # a firewalled download must not hold up a run
    return found[0] if found else _rule_of_thumb


def count(text: str) -> int:
    """Tokens in `text`, estimated."""
    return _counter()(text) if text else 0


def estimate_usage(messages: list[dict], tools: list[dict] | None, reply: ModelReply) -> Usage:
    """What the call probably cost: the messages and tool schemas in, the reply out."""
    prompt = sum(count(_content(m)) + MESSAGE_OVERHEAD for m in messages)
    if tools:
        prompt += count(json.dumps(tools, ensure_ascii=False))
    produced = count(reply.text) + count(reply.reasoning) + sum(
        count(call.name) + count(call.arguments) for call in reply.tool_calls)
    return Usage(prompt, max(produced, 1), estimated=True)


def _content(message: dict) -> str:
    """The text of a message: its content (string or parts), tool calls and reasoning."""
    content: Any = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = content if isinstance(content, str) else ""
    if message.get("tool_calls"):
        text += json.dumps(message["tool_calls"], ensure_ascii=False)
    return text
