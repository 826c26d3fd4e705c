"""TLS over the proxy's non-blocking sockets, driven by its event loop (ssl.SSLObject over memory BIOs).

The proxy owns its sockets (the connection closes them, `abort` resets them), so TLS is layered on
them here rather than handed to an asyncio transport; bytes that arrived with the CONNECT head go
straight into the TLS reader.
"""
from __future__ import annotations

import asyncio
import socket
import ssl

READ = 256 << 10


class TlsClosed(Exception):
    """The peer ended the TCP connection without a TLS close_notify (a truncation, as TLS sees it)."""


class TlsStream:
    """One side of a TLS session over `sock`: `handshake`, `recv`, `send`, `close`."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, *, server_side: bool,
                 server_hostname: str | None = None, initial: bytes = b"") -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        if initial:
            self._in.write(initial)
        self.tls = context.wrap_bio(self._in, self._out, server_side=server_side,
                                    server_hostname=server_hostname)

    async def handshake(self) -> None:
        """Complete the handshake; ssl.SSLCertVerificationError when the peer's certificate fails."""
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError("the peer left during the TLS handshake")
        await self._flush()

    async def recv(self, limit: int = READ) -> bytes:
        """Up to `limit` plaintext bytes (all that is ready, at least one); b"" after close_notify;
        TlsClosed when the TCP connection ended without one."""
        while True:
            chunks, size = [], 0
            try:
                while size < limit:
                    data = self.tls.read(limit - size)
                    if not data:  # close_notify came (ssl returns b"" for it, or raises below)
                        return b"".join(chunks)
                    chunks.append(data)
                    size += len(data)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                if not chunks:
                    return b""
            except ssl.SSLEOFError:
                if not chunks:
                    raise TlsClosed("the connection ended without a TLS close_notify") from None
            if chunks:
                return b"".join(chunks)
            await self._flush()  # a key update or session ticket may want an answer
            if not await self._fill():
                self._in.write_eof()

    async def send(self, data: bytes) -> None:
        if data:
            self.tls.write(data)
            await self._flush()

    async def close(self) -> None:
        """Send close_notify and end our direction of the TCP connection (best effort)."""
        try:
            self.tls.unwrap()
        except (ssl.SSLError, ValueError):
            pass
        try:
            await self._flush()
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    async def _fill(self) -> bool:
        data = await self._loop.sock_recv(self.sock, READ)
        if data:
            self._in.write(data)
        return bool(data)

    async def _flush(self) -> None:
        data = self._out.read()
        if not data:
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            await self._loop.sock_sendall(self.sock, data[sent:])
