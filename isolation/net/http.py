"""HTTP/1.x heads as a forward proxy reads and rewrites them; bodies are never parsed."""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from .policy import NetworkError, normalize_host, split_host_port
from .addr import is_ip

MAX_HEAD = 64 << 10
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
# A field value and a request target hold no control characters (RFC 9110 5.5; obs-text allowed). A
# bare LF or CR would end the line, or the head, for a server that is lenient where we split on CRLF:
# the sandbox could then end the head before the header the proxy adds, and that header (a secret)
# would be read as the body of a request, or as the start of the next one.
_VALUE = re.compile(rb"^[\t\x20-\x7e\x80-\xff]*$")
_TARGET = re.compile(rb"^[\x21-\x7e]+$")
# Hop-by-hop headers (RFC 9110 7.6.1) and the proxy's own: never passed on.
_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate",
        b"te", b"trailer", b"upgrade"}


class HttpError(Exception):
    """A request the proxy answers itself with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class RequestHead:
    method: str
    target: str
    version: str
    headers: list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Destination:
    host: str
    port: int
    path: str = ""
    """Origin-form target for a plain request; empty for CONNECT."""


def parse_request_head(raw: bytes) -> RequestHead:
    """The request line and headers of `raw` (ending in a blank line); HttpError(400) if malformed."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ")
    # fullmatch, not `$`: `$` also matches before a final "\n", which must not pass
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not re.fullmatch(rb"HTTP/1\.[01]", parts[2]):
        raise HttpError(400, "malformed request line; this is lis-tui's HTTP proxy, use it as HTTP_PROXY")
    if not _TARGET.fullmatch(parts[1]):
        raise HttpError(400, "the request target holds a space or a control character")
    headers = [header_field(line) for line in lines[1:] if line]
    return RequestHead(parts[0].decode(), parts[1].decode("ascii"), parts[2].decode(), headers)


def header_field(line: bytes) -> tuple[bytes, bytes]:
    """(name, value) of one header (or trailer) line without its CRLF; HttpError(400) if malformed,
    a control character in the value (a bare CR or LF, NUL) included."""
    name, sep, value = line.partition(b":")
    if not sep or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
        raise HttpError(400, "malformed header line (a header's value may not hold a control "
                             "character, a bare CR or LF included)")
    return name, value.strip(b" \t")


def destination(head: RequestHead) -> Destination:
    """Where the request goes: CONNECT's authority, or an absolute http:// URL's."""
    if head.method == "CONNECT":
        return _authority(head.target, None, "")
    if head.target.startswith("/") or head.target == "*":
        raise HttpError(400, "this is lis-tui's egress proxy, not a web server: send requests through "
                             "it as HTTP_PROXY (absolute http:// URLs) or with CONNECT")
    url = urlsplit(head.target)
    if url.scheme.lower() != "http":
        raise HttpError(400, f"only http:// URLs can be forwarded; use CONNECT for {url.scheme or 'this'}")
    if "@" in url.netloc:
        raise HttpError(400, "user:password@ in a proxied URL is not supported")
    path = url.path or "/"
    return _authority(url.netloc, 80, path + (f"?{url.query}" if url.query else ""))


def _authority(text: str, default_port: int | None, path: str) -> Destination:
    try:
        host, port = split_host_port(text, default_port)
    except NetworkError as exc:
        raise HttpError(400, str(exc)) from None
    host = normalize_host(host)
    if not (_NAME.match(host) or is_ip(host)):
        raise HttpError(400, f"bad host in {text!r}")
    if port is None:
        raise HttpError(400, f"CONNECT needs HOST:PORT, got {text!r}")
    return Destination(host, port, path)


def forward_head(head: RequestHead, dest: Destination, credential=None) -> bytes:
    """The head to send upstream: origin-form target, hop-by-hop headers gone, one connection per request;
    `credential` (a net.credentials.Secret) replaces any header of its name."""
    named = {n.strip().lower() for name, value in head.headers if name.lower() == b"connection"
             for n in value.split(b",")}
    lines = [f"{head.method} {dest.path} {head.version}".encode()]
    dropped = _HOP | named | {b"host"} | ({credential.header.lower()} if credential is not None else set())
    lines += [name + b": " + value for name, value in head.headers if name.lower() not in dropped]
    if credential is not None:
        lines.append(credential.header + b": " + credential.value)
    host = f"[{dest.host}]" if ":" in dest.host else dest.host
    lines.insert(1, b"Host: " + (host if dest.port == 80 else f"{host}:{dest.port}").encode())
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def rewrite_response_head(raw: bytes) -> tuple[bytes, int]:
    """Upstream's response head with `Connection: close` (we do not reuse connections), and its status."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    kept = [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower()
            not in (b"connection", b"keep-alive", b"proxy-connection")]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n", status


REASONS = {200: "Connection Established", 400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
           421: "Misdirected Request",
           431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable",
           504: "Gateway Timeout"}


def response(status: int, body: str, reason: str = "") -> bytes:
    """A complete response with a text body; `reason` (ASCII, one line) replaces the usual phrase,
    because some clients (pip, urllib3) show only the status line of a refused CONNECT."""
    data = body.encode()
    reason = re.sub(r"[^\x20-\x7e]", "", reason) or REASONS.get(status, "Error")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\nX-Lis-Proxy: refused\r\n\r\n").encode() + data
