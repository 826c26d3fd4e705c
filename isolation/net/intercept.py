"""CONNECT to a host with a credential: the proxy ends the sandbox's TLS with a certificate from the
sandbox CA, opens its own TLS to the real server (verified as any client would), and forwards the
HTTP/1.1 requests in between with the credential's header put in. Responses pass through unread.

Requests are read one at a time, each head then its body by its framing (Content-Length or
chunked), so every request on a kept-alive connection gets the header, and one whose framing is
unclear is refused rather than guessed at. The upstream connection only ever reaches the one host
whose certificate it checked, so whatever the sandbox writes, the secret goes nowhere else.
"""
from __future__ import annotations

import asyncio
import re
from typing import Callable

from .http import MAX_HEAD, HttpError, RequestHead, header_field, parse_request_head, response
from .credentials import Secret
from .tls import TlsStream

LINGER = 2.0
_CHUNK_LINE = re.compile(rb"^([0-9a-fA-F]{1,16})(;[^\r\n]*)?$")


class Reader:
    """Buffered reads from a TlsStream: a head, a line, or a run of body bytes."""

    def __init__(self, stream: TlsStream, counted: Callable[[int], None]) -> None:
        self.stream, self.buf, self.counted = stream, bytearray(), counted

    async def _more(self) -> bool:
        data = await self.stream.recv()
        self.buf += data
        return bool(data)

    async def head(self) -> bytes | None:
        """The next request head, or None when the client ended the connection between requests."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                raw = bytes(self.buf[:end + 4])
                del self.buf[:end + 4]
                return raw
            if len(self.buf) > MAX_HEAD:
                raise HttpError(431, f"The request head is larger than {MAX_HEAD >> 10} KiB.")
            if not await self._more():
                if self.buf.strip():
                    raise HttpError(400, "the connection ended inside a request head")
                return None

    async def line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if len(self.buf) > 4096 or not await self._more():
                raise HttpError(400, "malformed chunked body")
        raw = bytes(self.buf[:end + 2])
        del self.buf[:end + 2]
        return raw

    async def copy(self, size: int, out: TlsStream) -> None:
        """Pass exactly `size` body bytes to `out`."""
        while size:
            if not self.buf and not await self._more():
                raise HttpError(400, "the connection ended inside a request body")
            part = bytes(self.buf[:size])
            del self.buf[:len(part)]
            size -= len(part)
            self.counted(len(part))
            await out.send(part)


def framing(head: RequestHead) -> tuple[str, int]:
    """("length", N), ("chunked", 0) or ("none", 0); HttpError for anything a server might read otherwise."""
    lengths = [v for n, v in head.headers if n.lower() == b"content-length"]
    codings = [v for n, v in head.headers if n.lower() == b"transfer-encoding"]
    if codings:
        if lengths or len(codings) > 1 or codings[0].strip().lower() != b"chunked":
            raise HttpError(400, "only `Transfer-Encoding: chunked`, alone and without Content-Length, "
                                 "is forwarded to a host with a credential")
        return "chunked", 0
    if lengths:
        if len(set(lengths)) > 1 or not lengths[0].isdigit():
            raise HttpError(400, "a bad or repeated Content-Length")
        return "length", int(lengths[0])
    return "none", 0


def with_credential(head: RequestHead, host: str, secret: Secret) -> bytes:
    """The head as sent, any header of the credential's name replaced by the credential."""
    if head.method == "CONNECT" or not head.target.startswith("/"):
        raise HttpError(400, "inside a TLS tunnel, send origin-form requests (GET /path)")
    hosts = [v for n, v in head.headers if n.lower() == b"host"]
    if len(hosts) != 1 or _host_only(hosts[0]) != host.encode():
        raise HttpError(421, f"this connection reaches {host} only; its Host header must name it")
    name = secret.header.lower()
    lines = [f"{head.method} {head.target} {head.version}".encode()]
    lines += [n + b": " + v for n, v in head.headers if n.lower() != name]
    lines.append(secret.header + b": " + secret.value)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _host_only(value: bytes) -> bytes:
    value = value.strip().lower()
    if value.startswith(b"["):
        return value[1:value.find(b"]")] if b"]" in value else value
    return value.rsplit(b":", 1)[0] if value.count(b":") == 1 else value


async def forward_requests(client: Reader, upstream: TlsStream, host: str, secret: Secret,
                           noted: Callable[[str], None]) -> None:
    """Sandbox to server: each request's head with the credential, then its body, until the client ends."""
    while True:
        raw = await client.head()
        if raw is None:
            return
        head = parse_request_head(raw)
        kind, size = framing(head)
        data = with_credential(head, host, secret)
        client.counted(len(data))
        await upstream.send(data)
        noted(head.method)
        if kind == "length":
            await client.copy(size, upstream)
        elif kind == "chunked":
            await _copy_chunked(client, upstream)
        if any(n.lower() == b"upgrade" for n, _ in head.headers):  # after a 101, no more HTTP heads
            await _copy_rest(client, upstream)
            return


async def _copy_chunked(client: Reader, upstream: TlsStream) -> None:
    while True:
        line = await client.line()
        match = _CHUNK_LINE.match(line[:-2])
        if not match:
            raise HttpError(400, "malformed chunk size line")
        await upstream.send(line)
        size = int(match.group(1), 16)
        if size == 0:
            break
        await client.copy(size + 2, upstream)  # the chunk and its CRLF
    while (line := await client.line()) != b"\r\n":  # trailers, then the blank line
        header_field(line[:-2])  # a bare LF in one could end the message early upstream
        await upstream.send(line)
    await upstream.send(b"\r\n")


async def _copy_rest(client: Reader, upstream: TlsStream) -> None:
    if client.buf:
        await upstream.send(bytes(client.buf))
        client.buf.clear()
    while data := await client.stream.recv():
        client.counted(len(data))
        await upstream.send(data)


async def pass_responses(upstream: TlsStream, client: TlsStream, counted: Callable[[int], None]) -> None:
    """Server to sandbox, byte for byte; a clean end is passed on as a clean end."""
    while data := await upstream.recv():
        counted(len(data))
        await client.send(data)
    await client.close()


async def refuse(client: TlsStream, error: HttpError) -> None:
    """Answer a request the proxy will not forward, inside the tunnel, and end it."""
    try:
        await client.send(response(error.status, f"{error}\n"))
        await client.close()
    except OSError:
        pass


async def relay(client: TlsStream, upstream: TlsStream, host: str, secret: Secret,
                noted: Callable[[str], None], up: Callable[[int], None], down: Callable[[int], None]) -> None:
    """Run both directions until the server ends the connection, or a moment after the client does."""
    loop = asyncio.get_running_loop()
    up_task = loop.create_task(forward_requests(Reader(client, up), upstream, host, secret, noted))
    down_task = loop.create_task(pass_responses(upstream, client, down))
    try:
        await asyncio.wait([up_task, down_task], return_when=asyncio.FIRST_COMPLETED)
        if up_task.done() and not up_task.cancelled():
            error = up_task.exception()
            if isinstance(error, HttpError):
                down_task.cancel()
                await refuse(client, error)
            elif error is None:  # the client is done: the server may finish, then the end
                await upstream.close()
                await asyncio.wait([down_task], timeout=LINGER)
    finally:
        for task in (up_task, down_task):
            task.cancel()
        await asyncio.gather(up_task, down_task, return_exceptions=True)
