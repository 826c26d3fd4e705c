"""The conversation's shape: what the loop sends and how, in one object (`Shape` in
lis_tui.agent.protocols), so that the loop asks it and never which one it is. Two, side by side:

- `PaperShape`: the paper's harness (llm-in-sandbox 0.2.0) as its episodes are (paper mode and the
  paper suites): `Steps Remaining` on the newest message before each call, observations in its
  frame, the assistant turn re-sent as litellm reads it, its nudge, its count of the prompt. At
  its limit the run stops: it never compacts.
- `LisShape`: lis-tui's own (the app, `run`, `resume`): the output bounded and the exit code said,
  the tool format's assistant turn and nudge, the server's count of the prompt. At the context
  limit the older steps are compacted (lis_tui.agent.compaction) and the run goes on.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from lis_tui.agent import compaction
from lis_tui.agent.errors import LimitReached
from lis_tui.agent.events import Compacted
from lis_tui.agent.observation import (PAPER_NUDGE, paper_assistant_message, paper_observation,
                                       paper_prompt_tokens, steps_remaining)
from lis_tui.config.settings import AgentConfig

DEFAULT_CONTEXT = 128_000
"""The context assumed of a server that does not say its own (hosted APIs); one that is smaller
refuses a prompt as too long, which compacts and asks again with the limit it names."""
ASK_AFTER = 2_048
"""Tokens of prompt below which no server's context is asked for: no model's is that small."""
REQUEST = 32
"""Tokens a request adds besides its messages and tools (the model's name, the stream flags)."""
_TOO_LONG = re.compile(r"context.{0,24}(length|size|window)|too many tokens|prompt is too long|"
                       r"input is too long|exceeds? the (available )?context|reduce the length", re.I)
_CONTEXT = re.compile(r"(?:maximum|context)[^\d]*(\d+)\s*tokens", re.I)


def make_shape(config: AgentConfig, *, fill: Callable[[str], str], reserve: int,
               schemas: Callable[[], Any], server_limit: Callable[[], int | None] | None,
               emit: Callable[[Any], None]) -> PaperShape | LisShape:
    """The shape `config.observation` names."""
    if config.observation == "paper":
        return PaperShape(config, fill, reserve)
    return LisShape(config, fill, reserve, schemas, server_limit, emit)


def over_limit(tokens: int, reserve: int, limit: int) -> None:
    """Stop the run when the next prompt (and `reserve` for the reply) would pass `limit`."""
    if tokens + reserve > limit:
        room = f" plus {reserve} for the reply" if reserve else ""
        raise LimitReached("max_context", f"the next prompt would be about {tokens} tokens{room}, "
                           f"over agent.max_context_tokens = {limit}")


class PaperShape:
    """llm-in-sandbox 0.2.0's conversation, byte for byte (tests/lis_tui/test_paper_episodes.py)."""

    def __init__(self, config: AgentConfig, fill: Callable[[str], str], reserve: int) -> None:
        self.config, self.fill, self.reserve = config, fill, reserve

    def begin(self, messages: list[dict]) -> None:
        pass

    def before_call(self, messages: list[dict], step: int) -> None:
        if self.config.mode != "llm" and isinstance(messages[-1].get("content"), str):
            # the harness adds this to the newest message, before every call
            messages[-1]["content"] += "\n" + steps_remaining(self.config.max_steps - step + 1)

    def fit(self, messages: list[dict], step: int) -> list[dict]:
        if self.config.max_context_tokens:  # the package counts the messages it is about to send, and only them
            over_limit(paper_prompt_tokens(messages), self.reserve, self.config.max_context_tokens)
        return messages

    def refused(self, error: Any, messages: list[dict], step: int) -> list[dict] | None:
        return None

    def assistant_message(self, reply: Any, fmt: Any) -> dict:
        # native calls are re-sent as the package re-sends them (litellm's reading of the reply)
        return paper_assistant_message(reply) if fmt.name == "native" else fmt.assistant_message(reply)

    def counted(self, usage: Any, messages: list[dict]) -> None:
        pass

    def observation(self, tool: str, result: Any, bound: int) -> str:
        return paper_observation(tool, result, bound)

    def nudge(self, fmt: Any) -> str:
        return PAPER_NUDGE if fmt.name == "native" else self.fill(fmt.nudge)  # text formats show how

    def compact_soon(self) -> bool:
        return False


class LisShape:
    """lis-tui's conversation: it compacts at the context limit (`agent.compact`)."""

    def __init__(self, config: AgentConfig, fill: Callable[[str], str], reserve: int,
                 schemas: Callable[[], Any], server_limit: Callable[[], int | None] | None,
                 emit: Callable[[Any], None]) -> None:
        self.config, self.fill, self.reserve = config, fill, reserve
        self.schemas, self.server_limit, self.emit = schemas, server_limit, emit
        self._task: dict | None = None
        """The message of the task worked on now: compaction keeps it whole."""
        self._counted = (0, 0)
        """Tokens of the conversation at the last reply (the server's count) and messages it had."""
        self._server: int | None = None
        """The context the server reports (0: it says none); None until asked."""
        self._learned = 0
        """A smaller limit learned from the server's refusal of a prompt as too long."""
        self._asked = False
        self._refused_at = 0

    def begin(self, messages: list[dict]) -> None:
        self._task = messages[-1] if messages else None

    def before_call(self, messages: list[dict], step: int) -> None:
        pass

    def fit(self, messages: list[dict], step: int) -> list[dict]:
        if not self.config.max_context_tokens and self.config.compact == "off":
            return messages  # no limit: nothing to count
        tokens = self._count(messages)
        limit, reserve = self._limit(tokens)
        if tokens + reserve > limit:
            if self.config.compact == "off":
                over_limit(tokens, reserve, limit)
            return self._compact(messages, step, "limit", tokens, limit, reserve)
        if self._asked:
            return self._compact(messages, step, "asked", tokens, limit, reserve)
        return messages

    def refused(self, error: Any, messages: list[dict], step: int) -> list[dict] | None:
        """The server refused the prompt: when as too long, the conversation compacted to ask again."""
        said = getattr(error, "detail", "") or ""
        if self.config.compact == "off" or not _TOO_LONG.search(said):
            return None
        tokens = self._count(messages)
        if self._refused_at == step:
            raise LimitReached("max_context", f"the model server refused the prompt as too long even "
                               f"compacted to about {tokens:,} tokens ({said[:200]}). Fix: start it with a "
                               "longer context (vLLM --max-model-len, llama.cpp -c), or set "
                               "--max-context-tokens to what it takes")
        self._refused_at = step
        named = _CONTEXT.search(said)
        limit, _ = self._limit(tokens)
        self._learned = min(n for n in (int(named.group(1)) if named else 0, tokens, limit) if n)
        limit, reserve = self._limit(tokens)
        try:
            return self._compact(messages, step, "server", tokens, limit, reserve)
        except LimitReached:  # nothing earlier to take out: the server's words, not our estimate
            raise LimitReached("max_context", self._too_big(messages, tokens, limit, said[:200])) from None

    def assistant_message(self, reply: Any, fmt: Any) -> dict:
        return fmt.assistant_message(reply)

    def counted(self, usage: Any, messages: list[dict]) -> None:
        # The prompt as the server counted it; the reply as it is sent back (with its calls' ids
        # and JSON) is estimated with what follows it, a little more than its completion tokens.
        if usage is not None:
            self._counted = (usage.prompt_tokens, len(messages) - 1)

    def observation(self, tool: str, result: Any, bound: int) -> str:
        text = bounded(result.output, bound) or "(no output)"
        if result.exit_code not in (None, 0):
            text += f"\n[exit code {result.exit_code}]"
        return text

    def nudge(self, fmt: Any) -> str:
        return self.fill(fmt.nudge)

    def compact_soon(self) -> bool:
        """Compact before the next model call (a person asked); False when compaction is off."""
        self._asked = self.config.compact != "off"
        return self._asked

    # -- the limit and compaction -----------------------------------------------------------
    def _count(self, messages: list[dict]) -> int:
        """The next prompt's tokens: the server's count of the last prompt, and the reply and what
        came since at four characters a token (before any reply, or after a compaction: all of it so)."""
        tokens, counted = self._counted
        if not counted or counted > len(messages):
            tokens, counted = self._fixed(), 0
        return tokens + compaction.tokens(messages[counted:])

    def _fixed(self) -> int:
        """What the request adds to its messages: the tool schemas (native calls)."""
        return len(json.dumps(self.schemas() or [])) // 4 + REQUEST

    def _limit(self, tokens: int) -> tuple[int, int]:
        """The context limit, and the room kept in it for the reply."""
        given = self.config.max_context_tokens
        if given:  # a prompt limit, as before: the reply's room is model.max_tokens
            return min(given, self._learned or given), self.reserve
        if self._server is None and tokens > ASK_AFTER:
            self._server = (self.server_limit() if self.server_limit is not None else None) or 0
        window = self._learned or self._server or DEFAULT_CONTEXT
        return window, self.reserve or window // 8

    def _compact(self, messages: list[dict], step: int, reason: str, tokens: int, limit: int,
                 reserve: int) -> list[dict]:
        self._asked = False
        room, fixed = limit - reserve, self._fixed()
        # asked for, it compacts as if the context were as full as it is now
        done = compaction.compact(messages, self._task, min(room, tokens) if reason == "asked" else room, fixed)
        after = fixed + compaction.tokens(done.messages) if done is not None else tokens
        if reason == "asked" and (done is None or after >= tokens):  # nothing to gain yet: said
            self.emit(Compacted(step, reason, 0, tokens, tokens, limit, messages))
            return messages
        if done is None or after > room:
            raise LimitReached("max_context", self._too_big(messages, after, limit))
        if done.task_in_head:
            self._task = done.messages[1 if done.messages[0].get("role") == "system" else 0]
        self._counted = (0, 0)  # the server's count was of the old prompt
        self.emit(Compacted(step, reason, done.summarized, tokens, after, limit, done.messages))
        return done.messages

    def _too_big(self, messages: list[dict], tokens: int, limit: int, said: str = "") -> str:
        started = any(m.get("role") == "assistant" for m in messages)
        what = ("the task, the instructions and the latest step alone, the earlier steps compacted,"
                if started else "the task and the standing instructions alone (with the tools' descriptions)")
        if said:
            what = f"the model server refused the prompt as too long ({said}), and {what.removesuffix(',')}"
        if self.config.max_context_tokens and not self._learned:
            where, fix = "agent.max_context_tokens", "raise --max-context-tokens"
        elif self._learned or self._server:
            where, fix = "the model server's", "start the server with a longer context (vLLM --max-model-len, llama.cpp -c)"
        else:
            where, fix = "lis-tui's default for a server that does not say", "set --max-context-tokens to the model's"
        shorten = "" if started else ", or shorten the task or AGENTS.md"
        if said:
            return f"{what} are what is left. Fix: {fix}{shorten}"
        return f"{what} are about {tokens:,} tokens, over the context limit of {limit:,} ({where}). Fix: {fix}{shorten}"


def bounded(text: str, limit: int) -> str:
    """At most about `limit` characters: the head and the tail, with what was cut in between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut by lis-tui to keep the "
            f"context small ...]\n{text[-half:]}")
