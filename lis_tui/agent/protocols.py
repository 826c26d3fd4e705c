"""What the agent is duck-typed against: a model and a set of tools."""
from __future__ import annotations

from typing import Any, Callable, Protocol

from lis_tui.model.reply import ModelReply as Reply
from tools import ToolResult


class Model(Protocol):
    """What the agent needs of a model: `lis_tui.model.client.ModelClient` or anything shaped like it."""

    def complete(self, messages: list[dict], tools: list[dict] | None = None,
                 on_delta: Callable[[str, str], None] | None = None) -> Reply: ...

    def cancel(self) -> None: ...


class Tools(Protocol):
    """What the agent needs of its tools: `tools.Toolbox` or anything shaped like it."""

    sandbox: Any
    schemas: list[dict]

    def dispatch(self, name: str, arguments: str | dict | None) -> ToolResult: ...


class Shape(Protocol):
    """The conversation's shape: its first messages, the frame of an observation, the assistant
    turn as sent back, the nudge, the count of the prompt and what happens at the context limit.
    `lis_tui.agent.shapes` has the two: the paper harness's and lis-tui's."""

    def begin(self, messages: list[dict]) -> None:
        """The conversation's first messages, the task the last of them."""

    def before_call(self, messages: list[dict], step: int) -> None:
        """Change the messages in place before each model call."""

    def fit(self, messages: list[dict], step: int) -> list[dict]:
        """The messages to send: these, or compacted; LimitReached when they cannot fit."""

    def refused(self, error: Any, messages: list[dict], step: int) -> list[dict] | None:
        """The server refused the request (a ModelError): messages to ask again with, or None."""

    def assistant_message(self, reply: Reply, fmt: Any) -> dict:
        """The reply as it is sent back in the next request (`fmt`: the tool format)."""

    def counted(self, usage: Any, messages: list[dict]) -> None:
        """The server counted the conversation so far (the reply's usage, or None)."""

    def observation(self, tool: str, result: ToolResult, bound: int) -> str:
        """A tool's result as the model reads it, about `bound` characters at most."""

    def nudge(self, fmt: Any) -> str:
        """What the model is told after a reply that called no tool."""

    def compact_soon(self) -> bool:
        """Compact before the next model call; False when this shape does not."""
