"""What the network refused while a command ran, said in that command's result, so that every
model learns why and what the user can do: an MCP client's model reads no system prompt of ours,
and curl shows an HTTPS refusal only as "CONNECT tunnel failed, response 403".

Two sources: the proxy's refusals (isolation.net.Refusal, their reason and fix already in the
caller's words: isolation.net.AllowWords), and, with the network off, where there is no proxy and
a command meets only "Could not resolve host", the command's own words. Each once per host.
"""
from __future__ import annotations

import re
import threading
from typing import Any

# What tools print when no name resolves or no route leaves: the host when they name one.
_NAMED = re.compile(r"Could not resolve host: ([\w.\-]+)|unable to resolve host address .([\w.\-]+).|"
                    r"Failed to resolve '([\w.\-]+)'|Temporary failure resolving '([\w.\-]+)'|"
                    r"host='([\w.\-]+)'.*(?:NameResolution|name resolution|Name or service)|"
                    r"(?m:^\S+: ([\w.\-]+): (?:Temporary failure in name resolution|Name or service not known))")
_UNNAMED = re.compile(r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
                      r"No address associated with hostname|getaddrinfo (?:ENOTFOUND|EAI_AGAIN|failed)")


class NetworkNotes:
    """Refusals waiting for the next command's result (`refused`, from the proxy's thread), and
    `take` to add them to a result, with the network-off note when the command's output shows it."""

    def __init__(self, words: Any) -> None:
        self.words = words
        """An isolation.net.AllowWords: how the user turns the network on, in the caller's words."""
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._said: set[str] = set()

    def refused(self, note: Any) -> None:
        """A NetworkPolicy `on_note` callback: keeps each refusal (not credential uses, not a
        question's answer, not a withdrawn question: the command that asked is gone) for the
        result of the command at work."""
        if getattr(note, "by", "gone") == "gone" or not getattr(note, "text", "") or hasattr(note, "answer"):
            return
        with self._lock:
            if note.text not in self._said:
                self._said.add(note.text)
                self._pending.append(note.text)

    def take(self, output: str, network_off: bool) -> str:
        """The lines to add to a command's result ("" for none): the refusals since the last
        command, or, with the network off, one line for hosts it could not resolve."""
        with self._lock:
            lines, self._pending = self._pending, []
            if network_off and not lines:
                lines = self._off_lines(output)
        return "\n".join(f"[lis-tui] {line}." if not line.endswith(".") else f"[lis-tui] {line}"
                         for line in lines)

    def _off_lines(self, output: str) -> list[str]:
        hosts = [next(g for g in m.groups() if g) for m in _NAMED.finditer(output)]
        if not hosts and _UNNAMED.search(output):
            hosts = [""]
        new = [h for h in dict.fromkeys(hosts) if f"off:{h}" not in self._said]
        self._said.update(f"off:{h}" for h in new)
        if not new:
            return []
        named = ", ".join(h for h in new if h)
        what = f"{named} cannot be reached" if named else "no host can be reached"
        return [f"The sandbox's network is off: {what} (no name resolves, nothing leaves this "
                f"computer); {self.words.fill('turn_on', new[0] or 'HOST', 0)}"]
