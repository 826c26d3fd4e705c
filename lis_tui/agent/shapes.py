"""The conversation's shape: what the loop sends and how, in one object (`Shape` in
lis_tui.agent.protocols), so that the loop asks it and never which one it is. Two, side by side:

- `PaperShape`: the paper's harness (llm-in-sandbox 0.2.0) as its episodes are (paper mode and the
  paper suites): `Steps Remaining` on the newest message before each call, observations in its
  frame, the assistant turn re-sent as litellm reads it, its nudge, its count of the prompt. At
  its limit the run stops: it never compacts.
- `LisShape`: lis-tui's own (the app, `run`, `resume`): the output bounded and the exit code said,
  the tool format's assistant turn and nudge, the server's count of the prompt. At its limit the
  run stops.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from lis_tui.agent.errors import LimitReached
from lis_tui.agent.observation import (PAPER_NUDGE, paper_assistant_message, paper_observation,
                                       paper_prompt_tokens, steps_remaining)
from lis_tui.config.settings import AgentConfig

def make_shape(config: AgentConfig, *, fill: Callable[[str], str], reserve: int,
               schemas: Callable[[], Any]) -> PaperShape | LisShape:
    """The shape `config.observation` names."""
    if config.observation == "paper":
        return PaperShape(config, fill, reserve)
    return LisShape(config, fill, reserve, schemas)


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
    """lis-tui's conversation."""

    def __init__(self, config: AgentConfig, fill: Callable[[str], str], reserve: int,
                 schemas: Callable[[], Any]) -> None:
        self.config, self.fill, self.reserve, self.schemas = config, fill, reserve, schemas
        self._counted = (0, 0)
        """Tokens of the conversation at the last reply (the server's count) and messages it had."""

    def begin(self, messages: list[dict]) -> None:
        pass

    def before_call(self, messages: list[dict], step: int) -> None:
        pass

    def fit(self, messages: list[dict], step: int) -> list[dict]:
        limit = self.config.max_context_tokens
        if not limit:
            return messages
        tokens, counted = self._counted
        if not counted:  # no usage yet: guess the schemas and the messages at 4 characters a token
            tokens = len(json.dumps(self.schemas() or [])) // 4
        tokens += sum(len(json.dumps(m, ensure_ascii=False)) for m in messages[counted:]) // 4
        over_limit(tokens, self.reserve, limit)
        return messages

    def refused(self, error: Any, messages: list[dict], step: int) -> list[dict] | None:
        return None

    def assistant_message(self, reply: Any, fmt: Any) -> dict:
        return fmt.assistant_message(reply)

    def counted(self, usage: Any, messages: list[dict]) -> None:
        if usage is not None:
            self._counted = (usage.prompt_tokens + usage.completion_tokens, len(messages))

    def observation(self, tool: str, result: Any, bound: int) -> str:
        text = bounded(result.output, bound) or "(no output)"
        if result.exit_code not in (None, 0):
            text += f"\n[exit code {result.exit_code}]"
        return text

    def nudge(self, fmt: Any) -> str:
        return self.fill(fmt.nudge)

    def compact_soon(self) -> bool:
        return False


def bounded(text: str, limit: int) -> str:
    """At most about `limit` characters: the head and the tail, with what was cut in between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut by lis-tui to keep the "
            f"context small ...]\n{text[-half:]}")
