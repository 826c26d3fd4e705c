"""What a refusal says: why, and how the user can allow it, in one line the model, the logs, the
transcript and the trajectory all read."""
from __future__ import annotations

from dataclasses import dataclass

from .addr import shown_host
from .decision import Decision, NetworkRequest


@dataclass(frozen=True)
class Refusal:
    """A request the proxy refused (or a question it withdrew): why, and the fix, in one line."""

    host: str
    port: int
    by: str
    """The Decision's `by`, or `gone`: the request ended before the person answered."""
    text: str
    sandbox: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class AllowWords:
    """How the user allows what was refused, in the words of the program they use (`{host}` and
    `{port}` filled in): flags for `run`, a key in the app, the server's flags for MCP. The
    defaults name both flags and the app, for a caller that did not say which it is."""

    turn_on: str = ("the user can turn it on with `--network ask` or `--network on`, or with the network "
                    "key in the app")
    """The network is off."""
    allow_host: str = ("the user can allow it with `--allow-host {host}` or `--network on`, or with the "
                       "network key in the app")
    """The mode refused it, the person did, or no one was there to ask."""
    allow_service: str = "the user can allow exactly this service with `--allow-host {host}:{port}`"
    """It resolves to a private or internal address."""

    def fill(self, which: str, host: str, port: int) -> str:
        return getattr(self, which).replace("{host}", host).replace("{port}", str(port))


def refusal(host: str, port: int, decision: Decision, mode: str, address: str = "",
            sandbox: str = "", words: AllowWords = AllowWords()) -> Refusal:
    """What was refused, why, and how the user can allow it (in `words`), in one line: the
    proxy's 403 says it (status line and body, as pip shows one and curl the other), the logs,
    the app and the shell tool's result too."""
    shown = shown_host(host)
    start = f"Network access to {shown}:{port} was refused"
    if decision.by == "host-internal":
        start = (f"Network access to {shown}:{port} was refused: it resolves to {address}, a private or "
                 "internal address (this machine or its network)")
        if decision.answer in ("deny", "user"):
            text = f"{start}, and the user refused that address for it"
        elif decision.answer == "timeout":
            text = f"{start}, and the user did not answer in time"
        else:
            text = f"{start}; {words.fill('allow_service', shown, port)}"
    elif decision.by == "gone":
        text = f"{start}: the task it was asked for ended before the user answered"
    elif decision.by == "deny-list":
        text = (f"{start}: it is on the deny list; the user can remove it from `deny` in the `[network]` "
                "table of the lis-tui config")
    elif decision.by == "mode" and mode == "off":
        text = f"{start} because the sandbox's network is off; {words.fill('turn_on', shown, port)}"
    else:
        why = {"user": "by the user", "timeout": "because the user did not answer in time",
               "headless": "because no one is there to approve it (network mode `ask` without a person)"}
        text = f"{start} {why.get(decision.by, 'by lis-tui network policy')}; {words.fill('allow_host', shown, port)}"
    return Refusal(host, port, decision.by, text, sandbox)


def upstream_failure(host: str, port: int, why: str, sandbox: str = "") -> Refusal:
    """An allowed request that failed past the proxy (a name that does not resolve, a refused or
    timed-out connection), in one line: said as a refusal is, so the client's bare "response 502"
    is not all the model and the person learn."""
    return Refusal(host, port, "upstream", f"Network access to {shown_host(host)}:{port} was allowed, but {why}",
                   sandbox)


def gone_text(request: NetworkRequest) -> str:
    """The withdrawn question, as the transcript and the logs say it."""
    what = f"{shown_host(request.host)}:{request.port}" + (f" at {request.address}" if request.address else "")
    return f"the request to {what} ended before an answer; the question was withdrawn and nothing was saved"
