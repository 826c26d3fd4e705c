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
        self._wire = bytearray(READ)
        self._wire_view = memoryview(self._wire)
        self._plain_view = memoryview(bytearray(READ))
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
            # Records are decrypted into one buffer of ours: ssl.read(n) without a buffer would
            # allocate n bytes per record, and a large n costs an mmap and munmap each time.
            size, view = 0, self._plain_view[:limit]
            try:
                while size < len(view):
                    got = self.tls.read(len(view) - size, view[size:])
                    if not got:  # close_notify came (ssl returns 0 for it, or raises below)
                        return bytes(view[:size])
                    size += got
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                if not size:
                    return b""
            except ssl.SSLEOFError:
                if not size:
                    raise TlsClosed("the connection ended without a TLS close_notify") from None
            if size:
                return bytes(view[:size])
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
        got = await self._loop.sock_recv_into(self.sock, self._wire)
        if got:
            self._in.write(self._wire_view[:got])
        return bool(got)

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
