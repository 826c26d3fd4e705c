"""Who may reach what: host rules, the three modes, the approval callback, and the refusal text."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from .addr import is_ip, shown_host
from .decision import Answer, CredentialUse, Decision, NetworkRequest, QuestionAnswered
from .refusal import AllowWords, Refusal, gone_text
from ..spec import NETWORK_MODES, SandboxError

log = logging.getLogger(__name__)

ANSWERS = ("allow_once", "allow_session", "allow_always", "deny")
ASK_TIMEOUT = 120.0
MAX_REFUSALS_SAID = 200
"""Refusals a sandbox announces (transcript, run log, trajectory); the rest are only answered."""
_NAME = re.compile(r"^(\*|\*\.[a-z0-9_-]+(\.[a-z0-9_-]+)*|[a-z0-9_-]+(\.[a-z0-9_-]+)*)$")


class NetworkError(SandboxError):
    """Network set-up failed, or a rule could not be read; the message says how to fix it."""


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, no IPv6 brackets: the form rules and records use."""
    return host.strip().strip("[]").rstrip(".").lower()


@dataclass(frozen=True)
class HostRule:
    """One allow or deny entry: `name`, `*.suffix`, `*`, or an IP, each with an optional `:port`."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostRule:
        host, port = split_host_port(text.strip(), None)
        host = normalize_host(host)
        if not (_NAME.match(host) or is_ip(host)):
            raise NetworkError(f"bad host rule {text!r}: write a name (pypi.org), a suffix (*.github.com), "
                               "`*`, or an IP, each optionally with :PORT")
        return cls(host, port)

    @property
    def exact(self) -> bool:
        """Names one host and one port: the only kind that may open a host-internal address."""
        return not self.host.startswith("*") and self.port is not None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def split_host_port(text: str, default_port: int | None) -> tuple[str, int | None]:
    """'h:1', '[::1]:1', 'h', '::1' -> (host, port); a bad port raises NetworkError."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            raise NetworkError(f"bad address {text!r}: expected [IPv6]:PORT")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise NetworkError(f"bad port in {text!r}: expected a number from 1 to 65535")
    return host, int(port_text)


Approver = Callable[[NetworkRequest], object]
"""Returns one of ANSWERS or an Answer (who gave it), or a Future or awaitable of one."""


class NetworkPolicy:
    """`off` refuses everything; otherwise the deny list, the allow list, this session's approvals,
    then the mode: `on` allows, `ask` asks the approval callback (no callback: refused)."""

    def __init__(self, mode: str = "off", allow: Iterable[str] = (), deny: Iterable[str] = (),
                 decide: Approver | None = None, on_allow_always: Callable[[str], object] | None = None,
                 host_services: Iterable[str] = (), ask_timeout: float = ASK_TIMEOUT,
                 on_note: Callable[[CredentialUse | Refusal | QuestionAnswered], object] | None = None,
                 words: AllowWords = AllowWords()) -> None:
        self._mode = _check_mode(mode)
        self.allow = [HostRule.parse(r) for r in allow]
        self.deny = [HostRule.parse(r) for r in deny]
        self.host_services = [HostRule.parse(r) for r in host_services]
        """Exact host:port services on this machine or its private network that may be reached
        (the mode still decides); the allow list's exact host:port entries count too."""
        self.session_approved: set[tuple[str, int]] = set()
        """(host, port) pairs the person allowed for this session: a port each, the one asked for
        (the scheme's default when the URL named none); a wider rule is the allow list's."""
        self.ask_timeout = ask_timeout
        self._ask = decide
        self._on_allow_always = on_allow_always
        self.addresses_approved: set[tuple[str, int, str]] = set()
        """(host, port, address): a private or internal address the person allowed for this
        session, for that host and port alone."""
        self.on_note = on_note
        """Told of each request the proxy added a credential to, of each refusal (once per host,
        port and reason) and of each question's answer, on the proxy's thread: be quick."""
        self._listeners: list[Callable[[str], None]] = []
        self._pending: dict[tuple, _Question] = {}
        self._noted: set[tuple] = set()
        self.words = words
        """How a refusal tells the user's fix: in the words of the program they use."""
        self._refusals_said = 0

    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> None:
        """Change the mode now; listeners (the proxy) close open tunnels when it becomes `off`."""
        self._mode = _check_mode(mode)
        for listener in list(self._listeners):
            listener(self._mode)

    def add_allow(self, rule: str) -> None:
        """Allow a host from now on (e.g. the TUI's "allow this host" key); same syntax as `allow`."""
        self.allow.append(HostRule.parse(rule))

    def add_deny(self, rule: str) -> None:
        """Refuse a host from now on; same syntax as `deny`."""
        self.deny.append(HostRule.parse(rule))

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def check(self, host: str, port: int) -> Decision | None:
        """The decision the rules and the mode make alone; None when the user must be asked."""
        host = normalize_host(host)
        if self._mode == "off":  # off means nothing leaves, allow list or not
            return Decision(False, "mode")
        if any(rule.matches(host, port) for rule in self.deny):
            return Decision(False, "deny-list")
        if any(rule.matches(host, port) for rule in self.allow):
            return Decision(True, "allow-list")
        if (host, port) in self.session_approved:
            return Decision(True, "session")
        if self._mode == "on":
            return Decision(True, "mode")
        return None if self._ask is not None else Decision(False, "headless")

    def credential_used(self, use: CredentialUse) -> None:
        log.info("%s in %s", use, use.sandbox)
        self._tell(use)

    def refused(self, refusal: Refusal, address: str = "") -> None:
        """Log and announce a refusal, once per host, port, reason and address: a client's
        retries are answered each time, but said once."""
        key = (refusal.host, refusal.port, refusal.by, address)
        if key in self._noted or self._refusals_said > MAX_REFUSALS_SAID:
            return
        if refusal.by != "gone":  # each withdrawn question is said
            self._noted.add(key)
        self._refusals_said += 1
        if self._refusals_said > MAX_REFUSALS_SAID:  # a model trying port after port: said, then quiet
            refusal = Refusal(refusal.host, refusal.port, refusal.by, f"more than {MAX_REFUSALS_SAID} "
                              "refusals; the next are answered but not listed (the proxy's log has each)",
                              refusal.sandbox)
        log.info("network: %s (%s)", refusal, refusal.sandbox)
        self._tell(refusal)

    def _tell(self, note: CredentialUse | Refusal | QuestionAnswered) -> None:
        if self.on_note is not None:
            try:
                self.on_note(note)
            except Exception:  # a display bug must not cost the request
                log.exception("the network listener failed")

    def may_reach_internal(self, host: str, port: int) -> bool:
        """Whether host:port is named exactly enough to be let through to a host-internal address."""
        host = normalize_host(host)
        return any(rule.exact and rule.matches(host, port) for rule in self.allow + self.host_services)

    async def decide(self, host: str, port: int, method: str = "CONNECT", sandbox: str = "") -> Decision:
        """The full decision, asking the approval callback in `ask` mode; runs on the proxy's loop."""
        decision = self.check(host, port)
        if decision is not None:
            return decision
        return await self._question(NetworkRequest(normalize_host(host), port, method, sandbox))

    async def decide_address(self, host: str, port: int, address: str, method: str = "CONNECT",
                             sandbox: str = "") -> Decision:
        """An allowed host resolves only to a private or internal address: in `ask` mode with a
        person, a second question (this host and port at this address); otherwise refused."""
        host = normalize_host(host)
        if (host, port, address) in self.addresses_approved:
            return Decision(True, "session")
        if self._mode != "ask" or self._ask is None:
            return Decision(False, "host-internal")
        decision = await self._question(NetworkRequest(host, port, method, sandbox, address))
        if decision.allowed or decision.by == "gone":
            return decision
        return Decision(False, "host-internal", decision.answer or decision.by)

    def withdraw_questions(self) -> None:
        """Withdraw every open question (the task it was asked for ended): each request waiting
        on one is refused, and an answer that comes later does nothing. On the proxy's loop."""
        for question in list(self._pending.values()):
            question.withdraw()

    async def _question(self, request: NetworkRequest) -> Decision:
        """Concurrent requests for one host and port (and address) share one question and its
        answer; when the last of them ends (its client left, its sandbox went) the question is
        withdrawn, and an answer that comes later does nothing."""
        key = (request.host, request.port, request.address)
        question = self._pending.get(key)
        if question is None:
            question = self._pending[key] = _Question()
            question.task = asyncio.ensure_future(self._ask_user(request, question))
            question.task.add_done_callback(lambda _t: self._pending.pop(key, None))
        question.waiting += 1
        try:
            return await asyncio.shield(question.task)
        except asyncio.CancelledError:
            if question.waiting == 1:
                question.withdraw()
            raise
        finally:
            question.waiting -= 1

    async def _ask_user(self, request: NetworkRequest, question: _Question) -> Decision:
        try:
            if question.withdrawn:
                raise asyncio.CancelledError
            question.asking = asyncio.ensure_future(_call_approver(self._ask, request))
            given = _answer(await asyncio.wait_for(question.asking, self.ask_timeout))
            if question.withdrawn:  # withdrawn as the answer came: it counts for nothing
                raise asyncio.CancelledError
        except asyncio.TimeoutError:
            self._answered(request, Answer("deny", "timeout"))
            return Decision(False, "timeout")
        except asyncio.CancelledError:
            if not question.withdrawn:
                raise
            self._answered(request, Answer("deny", "gone"))
            self.refused(Refusal(request.host, request.port, "gone", gone_text(request), request.sandbox),
                         request.address)
            return Decision(False, "gone")
        except Exception:  # a broken callback must not open the network
            log.exception("network approval callback failed for %s", request.host)
            self._answered(request, Answer("deny", "error"))
            return Decision(False, "error")
        answer = given.answer
        if answer not in ANSWERS or answer == "deny":
            self._answered(request, Answer("deny", given.by))
            return Decision(False, "user", answer)
        if request.address:  # this host and port at this address; "always" saves no address
            if answer != "allow_once":
                self.addresses_approved.add((request.host, request.port, request.address))
            self._answered(request, Answer("allow_once" if answer == "allow_once" else "allow_session", given.by))
            return Decision(True, "user", answer)
        if answer == "allow_session":
            self.session_approved.add((request.host, request.port))
        saved = not_saved = ""
        if answer == "allow_always":
            # The host on every port, as the saved rule says from the next start on: a host:port
            # rule would be exact, and an exact rule also opens a host-internal address the name
            # may resolve to later (a session approval never does)
            self.allow.append(HostRule(request.host))
            if self._on_allow_always is not None:
                saved, not_saved = await _save_always(self._on_allow_always, str(HostRule(request.host)))
        self._answered(request, given, saved, not_saved)
        return Decision(True, "user", answer)

    def _answered(self, request: NetworkRequest, given: Answer, saved: str = "", not_saved: str = "") -> None:
        """Log and announce how a question was settled (each one: an answer is given once)."""
        note = QuestionAnswered(request.host, request.port, given.answer, given.by, request.address,
                                saved, not_saved, request.sandbox)
        log.info("network: %s:%s%s answered %s by %s%s (%s)", request.host, request.port,
                 f" at {request.address}" if request.address else "", given.answer, given.by,
                 f", saved to {saved}" if saved else f", not saved: {not_saved}" if not_saved else "",
                 request.sandbox)
        self._tell(note)


def _answer(result: object) -> Answer:
    """The approver's result as an Answer: it may give the answer alone (who: "approver")."""
    return result if isinstance(result, Answer) else Answer(str(result), "approver")


async def _call_approver(ask: Approver, request: NetworkRequest) -> object:
    """Coroutine functions run on the loop; plain functions in a worker thread, so they may block."""
    if inspect.iscoroutinefunction(ask):
        result = await ask(request)
    else:
        call = asyncio.get_running_loop().run_in_executor(None, ask, request)
        try:
            result = await asyncio.shield(call)
        except asyncio.CancelledError:  # withdrawn while the callback ran: withdraw what it returns
            call.add_done_callback(_withdraw)
            raise
    if isinstance(result, concurrent.futures.Future):
        result = await asyncio.wrap_future(result)
    elif inspect.isawaitable(result):
        result = await result
    return result


def _withdraw(call: asyncio.Future) -> None:
    if not call.cancelled() and call.exception() is None and hasattr(call.result(), "cancel"):
        call.result().cancel()


async def _save_always(save: Callable[[str], object], rule: str) -> tuple[str, str]:
    """(where `save` wrote `rule`, "") or ("", why it could not)."""
    try:
        where = await asyncio.get_running_loop().run_in_executor(None, save, rule)
    except Exception as exc:  # the host stays allowed for this session even if the config can't be written
        log.exception("could not save %s to the network allow list", rule)
        return "", str(exc) or type(exc).__name__
    return ("" if where is None else str(where)), ""


def _check_mode(mode: str) -> str:
    if mode not in NETWORK_MODES:
        raise NetworkError(f"network mode must be one of {', '.join(NETWORK_MODES)}, not {mode!r}")
    return mode


class _Question:
    """One question to the person, and how many requests wait for its answer."""

    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.asking: asyncio.Future | None = None
        """The approval callback's call: cancelled when the question is withdrawn, which
        cancels the future it returned (a dialog closes on that)."""
        self.waiting = 0
        self.withdrawn = False

    def withdraw(self) -> None:
        if not self.withdrawn and not self.task.done():
            self.withdrawn = True
            if self.asking is not None:
                self.asking.cancel()
