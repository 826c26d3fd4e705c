"""What a rule or a person judges, and what they decided: the request, the person's answer, the
decision, and the notes that a question was answered or a configured credential was added. Plain
values, shared by the policy, the proxy's connections and the refusal text."""
from __future__ import annotations

from dataclasses import dataclass

from .addr import shown_host


@dataclass(frozen=True)
class NetworkRequest:
    """What the approval callback is asked about."""

    host: str
    port: int
    method: str
    sandbox: str = ""
    """A label naming the sandbox that asks (the proxy handle's label)."""
    address: str = ""
    """Set for the second question: the host is allowed, and it resolves to this private or
    internal address; allowing it opens this host and port at this address, nothing more."""

    @property
    def question(self) -> str:
        """The question in words, for a dialog or an elicitation."""
        if self.address:
            return (f"{shown_host(self.host)}:{self.port} resolves to {self.address}, a private or internal "
                    "address (this machine or its network): allow this address for this host?")
        return f"The sandbox wants to reach {shown_host(self.host)}:{self.port} ({self.method}). Allow it?"


@dataclass(frozen=True)
class Answer:
    """What an approval callback may return instead of the answer alone: the answer and who gave
    it, which the record of the question keeps."""

    answer: str
    """One of ANSWERS (policy.py); anything else denies."""
    by: str = "approver"
    """Who: user (the person, with an answer key or a button), escape (the person's Esc, which
    denies), dismissed (the dialog closed unanswered), mcp-client; approver when the callback
    returned the answer alone."""


@dataclass(frozen=True)
class QuestionAnswered:
    """A question about a host was settled: the answer, who gave it, and for allow_always where
    the host was saved. The policy also settles those no one answered: `by` timeout, gone (its
    request or task ended; withdrawn), error (the callback failed), each a deny."""

    host: str
    port: int
    answer: str
    by: str
    address: str = ""
    """Set when the question was about this private or internal address of the host."""
    saved: str = ""
    """allow_always: the file the host was added to (its allow list)."""
    not_saved: str = ""
    """allow_always: why it could not be saved (the host is allowed until lis-tui quits)."""
    sandbox: str = ""


@dataclass(frozen=True)
class CredentialUse:
    """The proxy added a configured credential to a request: which host, and the header's name only."""

    host: str
    port: int
    method: str
    header: str
    sandbox: str = ""

    def __str__(self) -> str:
        return f"credential added for {self.host} ({self.header}, {self.method})"


@dataclass(frozen=True)
class Decision:
    """Allowed or not, and who said so: deny-list, allow-list, session, mode, user, headless,
    timeout, error, host-internal (the answer says whether the person was asked about the address)."""

    allowed: bool
    by: str
    answer: str = ""
