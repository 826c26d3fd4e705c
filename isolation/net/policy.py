"""Who may reach what: host rules, the three modes, the approval callback, and the refusal text."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from .addr import is_ip
from ..spec import NETWORK_MODES, SandboxError

log = logging.getLogger(__name__)

ANSWERS = ("allow_once", "allow_session", "allow_always", "deny")
ASK_TIMEOUT = 120.0
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


@dataclass(frozen=True)
class NetworkRequest:
    """What the approval callback is asked about."""

    host: str
    port: int
    method: str
    sandbox: str = ""
    """A label naming the sandbox that asks (the proxy handle's label)."""


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
    timeout, error, host-internal."""

    allowed: bool
    by: str
    answer: str = ""


Approver = Callable[[NetworkRequest], object]


class NetworkPolicy:
    """`off` refuses everything; otherwise the deny list, the allow list, this session's approvals,
    then the mode: `on` allows, `ask` asks the approval callback (no callback: refused)."""

    def __init__(self, mode: str = "off", allow: Iterable[str] = (), deny: Iterable[str] = (),
                 decide: Approver | None = None, on_allow_always: Callable[[str], object] | None = None,
                 host_services: Iterable[str] = (), ask_timeout: float = ASK_TIMEOUT,
                 on_credential: Callable[[CredentialUse], object] | None = None) -> None:
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
        self.on_credential = on_credential
        """Told of each request the proxy added a credential to, on the proxy's thread: be quick."""
        self._listeners: list[Callable[[str], None]] = []
        self._pending: dict[tuple[str, int], asyncio.Future] = {}

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
        if self.on_credential is not None:
            try:
                self.on_credential(use)
            except Exception:  # a display bug must not cost the request
                log.exception("the credential listener failed")

    def may_reach_internal(self, host: str, port: int) -> bool:
        """Whether host:port is named exactly enough to be let through to a host-internal address."""
        host = normalize_host(host)
        return any(rule.exact and rule.matches(host, port) for rule in self.allow + self.host_services)

    async def decide(self, host: str, port: int, method: str = "CONNECT", sandbox: str = "") -> Decision:
        """The full decision, asking the approval callback in `ask` mode; runs on the proxy's loop."""
        decision = self.check(host, port)
        if decision is not None:
            return decision
        host = normalize_host(host)
        # Concurrent requests for one host and port share one question (and its answer).
        key = (host, port)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._ask_user(NetworkRequest(host, port, method, sandbox)))
            self._pending[key] = pending
            pending.add_done_callback(lambda _f: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _ask_user(self, request: NetworkRequest) -> Decision:
        try:
            answer = await asyncio.wait_for(_call_approver(self._ask, request), self.ask_timeout)
        except asyncio.TimeoutError:
            return Decision(False, "timeout")
        except Exception:  # a broken callback must not open the network
            log.exception("network approval callback failed for %s", request.host)
            return Decision(False, "error")
        if answer not in ANSWERS or answer == "deny":
            return Decision(False, "user", str(answer))
        if answer == "allow_session":
            self.session_approved.add((request.host, request.port))
        if answer == "allow_always":
            # The host on every port, as the saved rule says from the next start on: a host:port
            # rule would be exact, and an exact rule also opens a host-internal address the name
            # may resolve to later (a session approval never does)
            self.allow.append(HostRule(request.host))
            if self._on_allow_always is not None:
                await _save_always(self._on_allow_always, str(HostRule(request.host)))
        return Decision(True, "user", answer)


async def _call_approver(ask: Approver, request: NetworkRequest) -> object:
    """Coroutine functions run on the loop; plain functions in a worker thread, so they may block."""
    if inspect.iscoroutinefunction(ask):
        result = await ask(request)
    else:
        result = await asyncio.get_running_loop().run_in_executor(None, ask, request)
    if isinstance(result, concurrent.futures.Future):
        result = await asyncio.wrap_future(result)
    elif inspect.isawaitable(result):
        result = await result
    return result


async def _save_always(save: Callable[[str], object], rule: str) -> None:
    try:
        await asyncio.get_running_loop().run_in_executor(None, save, rule)
    except Exception:  # the host stays allowed for this session even if the config can't be written
        log.exception("could not save %s to the network allow list", rule)


def _check_mode(mode: str) -> str:
    if mode not in NETWORK_MODES:
        raise NetworkError(f"network mode must be one of {', '.join(NETWORK_MODES)}, not {mode!r}")
    return mode


def refusal_text(host: str, port: int, decision: Decision, mode: str, address: str = "") -> str:
    """One sentence for the model: what was refused, by whom or why, and how the user can allow it."""
    shown = f"[{host}]" if ":" in host else host
    start = f"Network access to {shown} was refused"
    if decision.by == "host-internal":
        return (f"{start} by lis-tui's network policy because {shown}:{port} resolves to {address}, an "
                f"address on the user's machine or private network; the user can allow exactly this service "
                f"with `--allow-host {shown}:{port}`.\n")
    if decision.by == "deny-list":
        return (f"{start} by lis-tui's network policy because it is on the deny list; the user can remove it "
                "from `deny` in the `[network]` table of the lis-tui config.\n")
    if decision.by == "mode" and mode == "off":
        return (f"{start} because the sandbox's network is off; the user can turn it on with "
                "`lis-tui --network ask` or `--network on`, or with the network key in the TUI.\n")
    why = {"user": "by the user", "timeout": "because the user did not answer in time",
           "headless": "because no one is there to approve it (network mode `ask` without a person)"}
    return (f"{start} {why.get(decision.by, 'by lis-tui network policy')}; the user can allow it with "
            f"`--allow-host {shown}` or `lis-tui --network on`, or with the network key in the TUI.\n")
