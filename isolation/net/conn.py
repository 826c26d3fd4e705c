"""One client connection to the egress proxy: read the head, ask the policy, connect, relay.

A task per connection on raw non-blocking sockets; once connected, the bytes move in the kernel
(relay.Pump), so memory per connection is a head buffer and two pipes.
"""
from __future__ import annotations

import asyncio
import logging
import select
import socket
import ssl
import struct
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from . import intercept
from .http import MAX_HEAD, Destination, HttpError, destination, forward_head, parse_request_head, \
    response, rewrite_response_head
from .policy import Decision
from .refusal import refusal, upstream_failure
from .relay import Pump
from .tls import TlsStream

if TYPE_CHECKING:
    from .credentials import CredentialSet, Secret
    from .policy import NetworkPolicy

log = logging.getLogger(__name__)


class Proxy(Protocol):
    """What a connection reads of the proxy (proxy.EgressProxy): its timeouts, TLS and lookups."""

    header_timeout: float
    connect_timeout: float
    upstream_tls: ssl.SSLContext
    ca: Any  # ca.SandboxCA, made on first use: certificates for the hosts whose TLS ends here

    async def addresses_for(self, host: str, port: int, policy: NetworkPolicy) -> list[str]: ...


class Handle(Protocol):
    """What a connection uses of its sandbox's proxy port (proxy.ProxyHandle, which owns it)."""

    proxy: Proxy
    policy: NetworkPolicy
    credentials: CredentialSet
    label: str

    def new_record(self, host: str, port: int, method: str) -> RequestRecord: ...

    def credential_added(self, host: str, port: int, method: str, secret: Secret,
                         tunnel: RequestRecord | None = None) -> None: ...

    def release(self, connection: Connection) -> None: ...


LINGER = 2.0
SEND_TIMEOUT = 10.0
RESPONSE_TIMEOUT = 300.0

if sys.version_info >= (3, 11):
    async def _within(seconds: float, awaitable):
        """`awaitable`'s result, or TimeoutError after `seconds` (no extra task, unlike wait_for)."""
        async with asyncio.timeout(seconds):
            return await awaitable
else:
    async def _within(seconds: float, awaitable):
        return await asyncio.wait_for(awaitable, seconds)


@dataclass
class RequestRecord:
    """One line of the network log."""

    time: float
    host: str
    port: int
    method: str
    decision: str = "pending"
    """`allow` or `deny` (`pending` while the user is asked)."""
    decided_by: str = ""
    """deny-list, allow-list, session, mode, user, headless, timeout, error, host-internal, gone
    (the client left while the person was asked), or bad-request (malformed, too large, or too
    slow: no host was read)."""
    answer: str = ""
    """The user's answer when asked: allow_once, allow_session, allow_always or deny."""
    status: int = 0
    address: str = ""
    """The IP actually connected to (or refused)."""
    bytes_up: int = 0
    bytes_down: int = 0
    error: str = ""
    credential: str = ""
    """The name of the header the proxy added from `[network.credentials]` (never its value)."""

    def to_dict(self) -> dict:
        return asdict(self)


class Refused(Exception):
    """The policy allowed the host, but it resolves only to host-internal addresses."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address


class Answered(Exception):
    """The proxy answered the client itself; the connection ends."""


class Connection:
    """The life of one client connection, run as a task."""

    def __init__(self, handle: Handle, client: socket.socket) -> None:
        self.handle = handle
        self.client = client
        self.upstream: socket.socket | None = None
        self.record: RequestRecord | None = None
        self.task: asyncio.Task | None = None
        self._loop = asyncio.get_running_loop()
        self._pumps: list[Pump] = []

    async def run(self) -> None:
        try:
            await self._serve()
        except Answered:
            await self._linger()
        except (OSError, asyncio.TimeoutError):
            pass  # the client or the server went away; the record says how far it got
        except Exception:  # a bug here must cost one connection, not the proxy
            log.exception("egress proxy connection failed")
        finally:
            self._close()

    async def _serve(self) -> None:
        raw, rest = await self._read_head()
        try:
            head = parse_request_head(raw)
            dest = destination(head)
        except HttpError as exc:
            await self.answer(exc.status, f"{exc}\n")
        self.record = self.handle.new_record(dest.host, dest.port, head.method)
        decision, addresses = await self._decide(dest, head.method)
        plain = head.method != "CONNECT"
        credentials = self.handle.credentials
        secret = credentials.for_plain(dest.host, dest.port) if plain else credentials.for_tls(dest.host, dest.port)
        await self._connect(dest, decision, addresses)
        if plain:
            await self._send_all(self.upstream, forward_head(head, dest, secret) + rest)
            if secret is not None:
                self.record.credential = secret.credential.header
                self.handle.credential_added(dest.host, dest.port, head.method, secret)
        elif secret is not None:
            return await self._intercept(dest, secret, rest)
        else:
            await self._send_all(self.client, b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await self._send_all(self.upstream, rest)
        await self._relay(plain)

    # ---- the head ------------------------------------------------------------------------------

    async def _read_head(self) -> tuple[bytes, bytes]:
        try:
            return await _within(self.handle.proxy.header_timeout, self._read_until_blank_line())
        except asyncio.TimeoutError:
            await self.answer(408, "The request head did not arrive in time.\n")

    async def _read_until_blank_line(self) -> tuple[bytes, bytes]:
        buf = bytearray()
        while True:
            chunk = await self._loop.sock_recv(self.client, 65536)
            if not chunk:
                raise ConnectionResetError("the client left before finishing its request")
            start = max(0, len(buf) - 3)
            buf += chunk
            end = buf.find(b"\r\n\r\n", start)
            if end >= 0 and end + 4 <= MAX_HEAD:
                return bytes(buf[:end + 4]), bytes(buf[end + 4:])
            if len(buf) > MAX_HEAD:
                await self.answer(431, f"The request head is larger than {MAX_HEAD >> 10} KiB.\n")

    # ---- deciding and connecting -----------------------------------------------------------

    async def _decide(self, dest: Destination, method: str) -> tuple[Decision, list[str]]:
        """The decision and the addresses to try; a refusal is answered here (raising Answered)."""
        policy, proxy, label = self.handle.policy, self.handle.proxy, self.handle.label
        decision = policy.check(dest.host, dest.port)
        if decision is None:  # the person is asked
            decision = await self._while_here(policy.decide(dest.host, dest.port, method, label))
        if decision.allowed and policy.mode == "off":  # turned off while the user was asked
            decision = Decision(False, "mode")
        address = ""
        if decision.allowed:
            try:
                return decision, await proxy.addresses_for(dest.host, dest.port, policy)
            except Refused as exc:
                address = self.record.address = exc.address
            except OSError as exc:
                self._note(decision, 502, f"could not resolve {dest.host}: {exc}")
                await self._failed(dest, 502, f"the proxy could not resolve {dest.host} ({exc})")
            # Allowed, but only at a private or internal address: asked again, about that address
            decision = await self._while_here(policy.decide_address(dest.host, dest.port, address, method, label))
            if decision.allowed and policy.mode != "off":
                return decision, [address]
            if decision.allowed:
                decision = Decision(False, "mode")
        self._note(decision, 403)
        refused = refusal(dest.host, dest.port, decision, policy.mode, address, label, policy.words)
        if decision.by != "gone":  # a withdrawn question was said when it was withdrawn
            policy.refused(refused, address)
        await self.answer(403, f"lis-tui: {refused}\n", refused.text)

    async def _while_here(self, awaitable):
        """`awaitable`'s result, unless the client leaves first (it gave up or was stopped): then
        the wait ends, a question asked for it alone is withdrawn, and so ends the connection."""
        waiting = asyncio.ensure_future(awaitable)
        gone = self._loop.create_future()
        watch = select.epoll()  # EPOLLRDHUP: the client closed; data it sends stays unread
        try:
            watch.register(self.client.fileno(), select.EPOLLRDHUP)
            self._loop.add_reader(watch.fileno(), lambda: gone.done() or gone.set_result(None))
            await asyncio.wait([waiting, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._loop.remove_reader(watch.fileno())
            watch.close()
            if not waiting.done():
                waiting.cancel()
        if not waiting.done():
            self._note(Decision(False, "gone"), 0, "the client left before the decision")
            raise ConnectionResetError("the client left before the decision")
        return waiting.result()

    async def _connect(self, dest: Destination, decision: Decision, addresses: list[str]) -> None:
        error: BaseException | None = None
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await _within(self.handle.proxy.connect_timeout, self._loop.sock_connect(sock, (address, dest.port)))
            except (OSError, asyncio.TimeoutError) as exc:
                sock.close()
                error = exc
                continue
            for one in (sock, self.client):
                one.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.upstream, self.record.address = sock, address
            self._note(decision, 200 if dest.path == "" else 0)
            return
        timed_out = isinstance(error, asyncio.TimeoutError)
        text = "timed out" if timed_out else str(error)
        self._note(decision, 504 if timed_out else 502, f"connect failed: {text}")
        await self._failed(dest, 504 if timed_out else 502, f"the proxy could not connect to it ({text})")

    async def _failed(self, dest: Destination, status: int, why: str) -> NoReturn:
        """Answer an allowed request that failed upstream: why, in the status line (curl -v, pip)
        and the body, and said once to the person and the model as a refusal is."""
        failed = upstream_failure(dest.host, dest.port, why, self.handle.label)
        self.handle.policy.refused(failed)
        await self.answer(status, f"lis-tui: {failed}\n", failed.text)

    def _note(self, decision: Decision, status: int, error: str = "") -> None:
        record = self.record
        record.decision = "allow" if decision.allowed else "deny"
        record.decided_by, record.answer = decision.by, decision.answer
        record.status, record.error = status, error

    # ---- a host with a credential: TLS ends here (net/intercept.py) ------------------------------

    async def _intercept(self, dest: Destination, secret, rest: bytes) -> None:
        proxy, record = self.handle.proxy, self.record
        upstream = TlsStream(self.upstream, proxy.upstream_tls, server_side=False, server_hostname=dest.host)
        try:
            await _within(proxy.connect_timeout, upstream.handshake())
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            why = (f"certificate verify failed: {exc.verify_message}" if isinstance(exc, ssl.SSLCertVerificationError)
                   else getattr(exc, "reason", None) or str(exc) or "timed out")
            record.status, record.error = 502, f"TLS to {dest.host} failed: {why}"
            await self.answer(502, f"The proxy could not open a verified TLS connection to {dest.host} ({why}); "
                                   "it sends the credential only to the real server.\n",
                              f"TLS to {dest.host} failed: {why}")
        await self._send_all(self.client, b"HTTP/1.1 200 Connection Established\r\n\r\n")
        client = TlsStream(self.client, proxy.ca.server_context(dest.host), server_side=True, initial=rest)
        try:
            await _within(proxy.header_timeout, client.handshake())
        except (ssl.SSLError, asyncio.TimeoutError) as exc:
            record.error = f"the sandbox's client refused the proxy's certificate for {dest.host}: {exc}"
            return
        record.credential = secret.credential.header

        def noted(method: str) -> None:
            self.handle.credential_added(dest.host, dest.port, method, secret, record)

        await intercept.relay(client, upstream, dest.host, secret, noted, self._count_up, self._count_down)

    # ---- relaying ----------------------------------------------------------------------------

    async def _send_all(self, sock: socket.socket, data: bytes) -> None:
        """Send `data`; at once when the socket has room, as it nearly always has for a head."""
        try:
            sent = sock.send(data) if data else 0
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            await _within(SEND_TIMEOUT, self._loop.sock_sendall(sock, data[sent:]))
        if sock is self.upstream:
            self.record.bytes_up += len(data)

    async def _relay(self, plain: bool) -> None:
        """A tunnel runs until both directions ended; a plain request until its response ended.
        An error in either direction ends both."""
        up_done, down_done = self._loop.create_future(), self._loop.create_future()
        self._pumps.append(Pump(self.client, self.upstream, self._count_up, _settle(up_done)))
        if plain:
            await _within(RESPONSE_TIMEOUT, self._pass_response_head())
        self._pumps.append(Pump(self.upstream, self.client, self._count_down, _settle(down_done), big=True))
        if plain:
            if await down_done is None:  # the client reads the end and closes: give it a moment
                await asyncio.wait([up_done], timeout=LINGER)
            return
        for finished in asyncio.as_completed([up_done, down_done]):
            if await finished is not None:
                return

    def _count_up(self, n: int) -> None:
        self.record.bytes_up += n

    def _count_down(self, n: int) -> None:
        self.record.bytes_down += n

    async def _pass_response_head(self) -> None:
        """Pass the response head on with `Connection: close` (connections are not reused)."""
        buf = bytearray()
        while len(buf) <= MAX_HEAD:
            chunk = await self._loop.sock_recv(self.upstream, 65536)
            buf += chunk
            self.record.bytes_down += len(chunk)
            end = buf.find(b"\r\n\r\n")
            if not chunk or end >= 0:
                break
        if end >= 0:
            head, self.record.status = rewrite_response_head(bytes(buf[:end + 4]))
            buf[:end + 4] = head
        await self._send_all(self.client, bytes(buf))

    # ---- answering and closing ---------------------------------------------------------------

    async def answer(self, status: int, body: str, reason: str = "") -> NoReturn:
        """Answer the client ourselves; raises Answered, which ends the connection after a linger."""
        if self.record is None:  # not even a request we could read: logged all the same
            self.record = self.handle.new_record("", 0, "")
            self._note(Decision(False, "bad-request"), status, body.strip())
        await self._send_all(self.client, response(status, body, reason))
        raise Answered(status)

    async def _linger(self) -> None:
        # Read and drop what the client still sends, for a moment: closing with unread data
        # makes the kernel reset the connection, and the client may lose the answer.
        try:
            self.client.shutdown(socket.SHUT_WR)
            await _within(LINGER, self._drain())
        except (OSError, asyncio.TimeoutError):
            pass

    async def _drain(self) -> None:
        while await self._loop.sock_recv(self.client, 65536):
            pass

    def abort(self) -> None:
        """End now (the network was turned off, or the sandbox is going): the client gets a reset,
        so a cut-off download is an error rather than a short file."""
        try:
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        if self.task is not None:
            self.task.cancel()

    def _close(self) -> None:
        for pump in self._pumps:
            pump.close()
        for sock in (self.client, self.upstream):
            if sock is not None:
                sock.close()
        self.handle.release(self)


def _settle(future: asyncio.Future):
    """A Pump's `done`: the future's result is the error, or None for a clean end."""
    def done(error: BaseException | None) -> None:
        if not future.done():
            future.set_result(error)
    return done
