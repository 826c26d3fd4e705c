"""The agent's control flow: exceptions that carry what to tell the model, or why the run ends."""
from __future__ import annotations


class AgentException(Exception):
    """Control flow of the loop; the message says what happened."""


class NonTerminating(AgentException):
    """Ends the step; the message is appended for the model, and the loop goes on."""


class FormatError(NonTerminating):
    """The reply called no tool."""


class Terminating(AgentException):
    """Ends the run; `reason` is the finish reason."""

    reason = "error"


class Submitted(Terminating):
    reason = "submitted"


class Cancelled(Terminating):
    reason = "cancelled"


class Failed(Terminating):
    reason = "error"


class LimitReached(Terminating):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
