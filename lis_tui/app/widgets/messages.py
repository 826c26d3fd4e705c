"""Textual messages: what the agent's thread and the network proxy tell the UI.

The agent and the proxy run off the UI thread; they reach it only through `post_message`
(thread-safe). Questions carry a `concurrent.futures.Future` that the UI resolves.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class AgentEvent(Message):
    """One event from `lis_tui.agent.events`, as the agent sent it."""

    event: Any


@dataclass
class NetworkQuestion(Message):
    """The sandbox wants a host; resolve `future` with an isolation.net Answer."""

    request: Any
    future: Future


@dataclass
class RunCrashed(Message):
    """The run's worker failed outside the agent (a bug or a bad setting): say it, don't crash."""

    text: str


@dataclass
class RootfsProgress(Message):
    """The rootfs build printed a line, or ended (the job holds its state): redraw what shows it."""

    done: bool = False


@dataclass
class ServerChecked(Message):
    """The configured model server answered the welcome's check (`check`: a ServerCheck) about
    `model` (the ModelConfig that was asked)."""

    model: Any
    check: Any
