"""What the agent tells the outside world while it runs, and how a person answers it.

The agent calls `listener.on_event(event)` in its own thread with one of the dataclasses below.
The TUI turns them into Textual messages (`post_message` is thread-safe), the CLI into log lines,
the trajectory writer into JSON. Nothing here imports a UI.

Approvals come back through a `concurrent.futures.Future` carried by `ApprovalNeeded`: the
listener (or whoever it hands the event to) calls `future.set_result(Run() | Edit(...) | Skip(...))`
from any thread; the agent waits for it.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from lis_tui.model.client import ToolCall, Usage

log = logging.getLogger(__name__)

FINISH_REASONS = ("submitted", "max_steps", "max_context", "wall_time", "no_action", "error",
                  "cancelled")
"""Why a run ended. `max_steps`, `max_context`, `wall_time` and `no_action` are limits."""
LIMIT_REASONS = frozenset({"max_steps", "max_context", "wall_time", "no_action", "sandbox_limit"})


# -- records: what one tool call and one step did -------------------------------------------------

@dataclass
class ToolRecord:
    """One tool call as it ran: what was asked, what came back, how long it took."""

    id: str
    name: str
    arguments: str
    """The raw JSON text the model sent (maybe broken), or the edited command's JSON."""
    output: str = ""
    """The text the model was shown, already bounded."""
    exit_code: int | None = None
    duration: float = 0.0
    """Seconds the tool took (approval wait excluded)."""
    error: bool = False
    truncated: bool = False
    timed_out: bool = False
    submitted: bool = False
    approval: str | None = None
    """None when no approval was asked; else "run", "edited" or "skipped"."""
    environment_tokens: int = 0
    """Estimated tokens of `output` (characters / 4)."""


@dataclass
class StepRecord:
    """One step: a model call and the tool calls it asked for."""

    step: int
    started: float
    """Wall-clock start, seconds since the epoch."""
    duration: float = 0.0
    model_duration: float = 0.0
    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: list[ToolRecord] = field(default_factory=list)
    nudged: bool = False
    """The reply had no tool call and the model was reminded to use one."""
    stopped: str = ""
    """The finish reason, when the run ended during this step (e.g. "error": no reply came)."""

    @property
    def environment_tokens(self) -> int:
        """Estimated tokens the tools added to the context this step."""
        return sum(t.environment_tokens for t in self.tool_calls)


@dataclass
class RunUsage:
    """Token totals of a run; environment tokens are estimated at four characters a token."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    environment_tokens: int = 0
    last_prompt_tokens: int = 0
    """The prompt size of the last call: how full the context was."""
    last_completion_tokens: int = 0
    """The last call's reply; with `last_prompt_tokens`, the whole trajectory once."""
    estimated: bool = False
    """Some counts were made locally (the server reported none): lis_tui/model/tokens.py."""

    def add(self, step: StepRecord) -> None:
        """Count one finished step."""
        if step.usage is not None:
            self.prompt_tokens += step.usage.prompt_tokens
            self.completion_tokens += step.usage.completion_tokens
            self.cached_tokens += step.usage.cached_tokens
            self.last_prompt_tokens = step.usage.prompt_tokens
            self.last_completion_tokens = step.usage.completion_tokens
            self.estimated = self.estimated or step.usage.estimated
        self.environment_tokens += step.environment_tokens


# -- approval answers -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """Run the command as the model wrote it."""


@dataclass(frozen=True)
class Edit:
    """Run this command instead; the model is told it was changed."""

    command: str


@dataclass(frozen=True)
class Skip:
    """Do not run it; the model is told so, and why."""

    reason: str = ""


Approval = Union[Run, Edit, Skip]


# -- events ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunStarted:
    task: str
    mode: str
    """"sandbox" or "llm"."""
    messages: list[dict]
    """The conversation so far (the live list: read it, do not change it)."""
    tools: list[str]
    tool_format: str = ""
    """How tool calls travel: native, hermes, json or bash (auto starts native)."""


@dataclass(frozen=True)
class ToolFormatChanged:
    """`agent.tool_format = "auto"` switched from native tool calls to a text format (once a run)."""
    step: int
    old: str
    new: str
    reason: str


@dataclass(frozen=True)
class StepStarted:
    step: int


COMPACTED_WHY = {"limit": "the next prompt would pass the context limit",
                 "server": "the model server said the prompt was too long", "asked": "as asked"}


@dataclass(frozen=True)
class Compacted:
    """The conversation was compacted before a model call: its older steps became a summary,
    the task, the instructions and the latest steps stay whole (lis_tui.agent.compaction)."""

    step: int
    reason: str
    """"limit" (the next prompt would pass it), "server" (it refused the prompt as too long), "asked"."""
    summarized: int
    """Messages taken out of what the model is sent (the record keeps them all)."""
    before: int
    after: int
    """Tokens of the prompt before and after, estimated."""
    limit: int
    messages: list[dict]
    """What the model is sent from now on (the new live list; empty in a replay)."""

    @property
    def text(self) -> str:
        """In words, for the transcript and the log."""
        if not self.summarized:
            return "nothing to compact yet: the conversation is the task and its latest steps"
        return (f"compacted the conversation ({COMPACTED_WHY.get(self.reason, self.reason)}, "
                f"{self.limit:,} tokens): {self.summarized} earlier messages became a summary, about "
                f"{self.before:,} -> {self.after:,} tokens; the record keeps every message")


@dataclass(frozen=True)
class ModelRequest:
    step: int
    messages: list[dict]
    """The conversation sent (the live list: read it, do not change it)."""


@dataclass(frozen=True)
class ModelDelta:
    """A piece of streamed reply; only sent when the agent streams."""

    step: int
    kind: str
    """"text", "reasoning", or "reset" (a retry starts the reply over)."""
    text: str


@dataclass(frozen=True)
class ModelRetry:
    step: int
    attempt: int
    delay: float
    reason: str


@dataclass(frozen=True)
class ModelReply:
    step: int
    text: str
    reasoning: str
    tool_calls: list[ToolCall]
    usage: Usage | None
    duration: float


@dataclass(frozen=True)
class ApprovalNeeded:
    """A person must decide on a command; resolve `future` with Run(), Edit(cmd) or Skip(why)."""

    step: int
    call_id: str
    command: str
    future: Future


@dataclass(frozen=True)
class ToolStarted:
    step: int
    index: int
    call: ToolCall
    arguments: dict | None
    """The decoded arguments, or None when they are not valid JSON."""


@dataclass(frozen=True)
class ToolOutput:
    """What a running command printed since the last one of these, cleaned as its result is;
    only sent where someone watches (the app's shell has an `on_output`)."""

    step: int
    index: int
    text: str
    seconds: float
    """How long the command has run so far."""
    skipped: int = 0
    """Lines it printed before `text` that are left out (a flood is reported by its end)."""


@dataclass(frozen=True)
class ToolFinished:
    step: int
    index: int
    record: ToolRecord


@dataclass(frozen=True)
class StepFinished:
    step: int
    record: StepRecord
    messages: list[dict]
    """The conversation after this step (the live list)."""


@dataclass(frozen=True)
class RunFinished:
    reason: str
    """One of FINISH_REASONS."""
    answer: str
    steps: int
    usage: RunUsage
    duration: float
    message: str = ""
    """Why it stopped, in words (the error for "error", the limit for a limit)."""
    answer_note: str = ""
    """Set when there is no answer file, e.g. "no /testbed/output/answer.txt was written"."""


@dataclass(frozen=True)
class CredentialAdded:
    """The network proxy added a configured credential to a request (sent from the proxy's thread)."""

    host: str
    port: int
    method: str
    header: str
    """The header's name; its value is never in an event."""

    @property
    def text(self) -> str:
        return f"credential added for {self.host} ({self.header}, {self.method})"


@dataclass(frozen=True)
class NetworkRefused:
    """The network proxy refused a host (said once per host, port and reason), or withdrew a
    question whose request ended (`by` "gone"); sent from the proxy's thread."""

    host: str
    port: int
    by: str
    """Who or what refused: deny-list, mode, user, headless, timeout, host-internal, gone, ..."""
    text: str
    """Why, and how the user can allow it: the line the model's 403 carried."""


@dataclass(frozen=True)
class NetworkAnswered:
    """A question about a host was answered, or settled with no one's answer (`by` timeout, gone,
    error: each a deny); sent from the proxy's thread."""

    host: str
    port: int
    answer: str
    """allow_once, allow_session, allow_always or deny."""
    by: str
    """Who: user (an answer key or a button in the app), escape (the dialog's Esc), mcp-client,
    approver (a callback that did not say); or no one: dismissed (the dialog closed unanswered),
    timeout, gone (withdrawn: its request or task ended), error."""
    address: str = ""
    """Set when the question was about this private or internal address of the host."""
    saved: str = ""
    """allow_always: the config file whose allow list the host was added to."""
    not_saved: str = ""
    """allow_always: why it could not be saved."""

    @property
    def text(self) -> str:
        """In words, for the transcript."""
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        what = f"{host}:{self.port}" + (f" at {self.address}" if self.address else "")
        if self.by in _UNANSWERED:
            return f"{what}: {_UNANSWERED[self.by]}; denied"
        who = _WHO.get(self.by, self.by)
        if self.answer == "allow_always":
            where = (f"; saved to the allow list in {self.saved}" if self.saved else
                     f"; not saved ({self.not_saved}), so allowed until lis-tui quits" if self.not_saved else "")
            return f"{who} allowed {host} always (any port){where}"
        done = {"allow_once": f"allowed {what} once", "allow_session": f"allowed {what} for this session"}
        return f"{who} {done.get(self.answer, f'denied {what}')}" + (" (Esc)" if self.by == "escape" else "")


_WHO = {"user": "you", "escape": "you", "mcp-client": "the MCP client", "approver": "the approver"}
_UNANSWERED = {"timeout": "no answer in time", "error": "the question failed",
               "dismissed": "the dialog closed without an answer",
               "gone": "the question was withdrawn (its request or task ended)"}


@dataclass
class InstructionsRead:
    """Which AGENTS.md files a run's system prompt holds (and which were found but not read), in
    one line; sent once, before the run starts."""

    text: str


@dataclass
class ResumeNote:
    """A resumed run's sandbox is ready: what was put back in it (or that a kept session has it
    all), in one line; sent once, before the follow-up's first step."""

    text: str


@dataclass
class WorkSaved:
    """A task in a workspace ended: `changes` paths of the project differ in the sandbox (not applied
    yet), kept in `run_dir`'s changes.patch (`lis-tui apply RUN`)."""

    changes: int
    run_dir: str


Event = Union[RunStarted, ToolFormatChanged, StepStarted, Compacted, ModelRequest, ModelDelta, ModelRetry, ModelReply,
              ApprovalNeeded, ToolStarted, ToolOutput, ToolFinished, StepFinished, RunFinished,
              CredentialAdded, NetworkRefused, NetworkAnswered, InstructionsRead, ResumeNote, WorkSaved]


def network_listener(listener: Any):
    """A NetworkPolicy `on_note` callback: hands each note to `listener` as CredentialAdded,
    NetworkAnswered or NetworkRefused."""
    def noted(note: Any) -> None:
        if listener is None:
            return
        if hasattr(note, "header"):
            listener.on_event(CredentialAdded(note.host, note.port, note.method, note.header))
        elif hasattr(note, "answer"):
            listener.on_event(NetworkAnswered(note.host, note.port, note.answer, note.by, note.address,
                                              note.saved, note.not_saved))
        else:
            listener.on_event(NetworkRefused(note.host, note.port, note.by, note.text))
    return noted


class Listener(Protocol):
    """Anything that wants the agent's events; called in the agent's thread, so be quick."""

    def on_event(self, event: Event) -> None: ...


class Listeners:
    """Hands each event to several listeners; one that fails is logged, never fatal."""

    def __init__(self, *listeners: Any) -> None:
        self.listeners = [x for x in listeners if x is not None]

    def on_event(self, event: Event) -> None:
        for listener in self.listeners:
            try:
                listener.on_event(event)
            except Exception:  # a UI or writer bug must not end the run
                log.exception("listener %r failed on %s", listener, type(event).__name__)
