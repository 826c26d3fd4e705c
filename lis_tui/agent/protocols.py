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
