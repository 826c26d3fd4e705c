"""The egress proxy: one asyncio loop in a background thread serves every attached sandbox."""
from __future__ import annotations

import asyncio
import collections
import ipaddress
import resource
import socket
import ssl
import threading
import time
from typing import Callable, Iterable, Mapping

from .addr import is_internal
from .conn import Connection, Refused, RequestRecord
from .credentials import CredentialSet, Secret
from .http import response
from .policy import CredentialUse, NetworkPolicy

HEADER_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
MAX_CONNECTIONS = 256
LOG_SIZE = 10_000
NO_PROXY = "localhost,127.0.0.1,::1"
PROXY_PORT = 3128
BACKLOG = 1024

Resolver = Callable[[str, int], Iterable[str]]


class EgressProxy:
    """Serves the proxy port of every attached sandbox from one event loop thread."""

    def __init__(self, *, header_timeout: float = HEADER_TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS, resolve: Resolver | None = None,
                 log_size: int = LOG_SIZE) -> None:
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        """Most open connections per sandbox; past it, new ones get a 503."""
        self.max_total = _fd_budget()
        """Most open connections over all sandboxes (each holds two sockets and two pipes)."""
        self.log_size = log_size
        """Records each sandbox's log keeps; older ones go (counted in `ProxyHandle.dropped`)."""
        self.handles: set[ProxyHandle] = set()
        self.open_connections = 0
        self._resolve = resolve
        self._upstream_tls: ssl.SSLContext | None = None
        self._ca = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def upstream_tls(self) -> ssl.SSLContext:
        """How the proxy checks servers it speaks TLS to for a credential: the system trust store.
        Tests set this (an explicit option in our process, never something a sandbox could set)
        to a context that also trusts their loopback server's CA."""
        if self._upstream_tls is None:
            from .ca import upstream_context  # noqa: PLC0415

            self._upstream_tls = upstream_context()
        return self._upstream_tls

    @upstream_tls.setter
    def upstream_tls(self, context: ssl.SSLContext | None) -> None:
        self._upstream_tls = context

    @property
    def ca(self):
        """The sandbox CA (net/ca.py), made on first use; NetworkError without `cryptography`."""
        with self._lock:
            if self._ca is None:
                from .ca import SandboxCA  # noqa: PLC0415

                self._ca = SandboxCA()
            return self._ca

    @ca.setter
    def ca(self, ca) -> None:
        self._ca = ca

    def attach(self, sandbox, policy: NetworkPolicy, label: str = "",
               credentials: CredentialSet | None = None) -> ProxyHandle:
        """Open the proxy port inside `sandbox`'s network namespace (`sandbox.listen`: a socket
        made in there, used from here, so no process relays) and serve it. `credentials`: the
        headers this sandbox's requests get for their hosts."""
        loop = self._ensure_loop()
        sock = sandbox.listen(PROXY_PORT, BACKLOG)
        try:
            sock.setblocking(False)
            handle = ProxyHandle(self, policy, sock.getsockname()[1], label or f"pid {sandbox.pid}",
                                 credentials)
            asyncio.run_coroutine_threadsafe(handle._serve(sock), loop).result(30)
        except BaseException:
            sock.close()
            raise
        return handle

    def close(self) -> None:
        """Detach every sandbox and stop the loop thread."""
        for handle in list(self.handles):
            handle.detach()
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join(10)
                loop.close()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="lis-egress-proxy",
                                                daemon=True)
                self._thread.start()
            return self._loop

    def run(self, coro, timeout: float = 30.0):
        """Run `coro` on the proxy's loop and return its result; from the loop's own thread (an
        approval callback, say) it is only scheduled, since waiting there would wait forever."""
        loop = self._ensure_loop()
        if threading.current_thread() is self._thread:
            return loop.create_task(coro)
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    async def addresses_for(self, host: str, port: int, policy: NetworkPolicy) -> list[str]:
        """The addresses to connect to: resolved once here, host-internal ones dropped unless allowed.
        The connection goes to exactly these, so a name that re-resolves elsewhere changes nothing."""
        addresses = await self._lookup(host, port)
        if not addresses:
            raise OSError(f"no address for {host}")
        if policy.may_reach_internal(host, port):
            return addresses
        public = [a for a in addresses if not is_internal(a)]
        if not public:
            raise Refused(addresses[0])
        return public

    async def _lookup(self, host: str, port: int) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        if self._resolve is not None:
            found = await loop.run_in_executor(None, lambda: list(self._resolve(host, port)))
        else:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            found = [info[4][0] for info in infos]
        return list(dict.fromkeys(found))


class ProxyHandle:
    """One sandbox's proxy port: its policy, its open connections, and its request log."""

    def __init__(self, proxy: EgressProxy, policy: NetworkPolicy, port: int, label: str,
                 credentials: CredentialSet | None = None) -> None:
        self.proxy = proxy
        self.policy = policy
        self.credentials = credentials or CredentialSet()
        self.port = port
        self.label = label
        self.url = f"http://127.0.0.1:{port}"
        self.log: collections.deque[RequestRecord] = collections.deque(maxlen=proxy.log_size)
        """Every request, oldest first (past `log_size` the oldest go)."""
        self.dropped = 0
        """Records that left the log to keep it at `log_size`."""
        self.connections: set[Connection] = set()
        self._listener: socket.socket | None = None

    @property
    def env(self) -> dict[str, str]:
        """The variables that point the sandbox's tools at this proxy."""
        return proxy_env(self.url)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with the proxy variables added (git's numbered config entries appended to any there)."""
        return {**base, **proxy_env(self.url, base)}

    def set_mode(self, mode: str) -> None:
        """Change the network mode now; `off` closes every open connection."""
        self.policy.set_mode(mode)

    def withdraw_questions(self) -> None:
        """Withdraw the questions this sandbox's requests wait on (the task that made them ended):
        each dialog closes, those requests are refused, and a later answer does nothing."""
        loop = self.proxy._loop
        if loop is not None and self in self.proxy.handles:
            loop.call_soon_threadsafe(self.policy.withdraw_questions)

    def detach(self) -> None:
        """Close the port and every connection through it; safe to call twice."""
        self.policy.remove_listener(self._mode_changed)
        if self in self.proxy.handles:
            self.proxy.handles.discard(self)
            self.proxy.run(self._stop())

    def records(self) -> list[dict]:
        """The log as plain dicts, for the trajectory."""
        return [record.to_dict() for record in list(self.log)]

    # ---- on the proxy's loop ---------------------------------------------------------------

    async def _serve(self, sock: socket.socket) -> None:
        self._listener = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._accept)
        self.proxy.handles.add(self)
        self.policy.add_listener(self._mode_changed)

    def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(64):  # then let other work run
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: stop accepting for a moment, the backlog waits
                loop.remove_reader(self._listener.fileno())
                loop.call_later(0.1, self._resume_accepting)
                return
            client.setblocking(False)
            if not self._admit():
                _refuse_crowd(client)
                continue
            connection = Connection(self, client)
            self.connections.add(connection)
            connection.task = loop.create_task(connection.run())

    def _resume_accepting(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)

    async def _stop(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        self._abort_all()

    def _mode_changed(self, mode: str) -> None:
        if mode == "off" and self.proxy._loop is not None:
            self.proxy._loop.call_soon_threadsafe(self._abort_all)

    def _abort_all(self) -> None:
        for connection in list(self.connections):
            connection.abort()

    def _admit(self) -> bool:
        if len(self.connections) >= self.proxy.max_connections or \
                self.proxy.open_connections >= self.proxy.max_total:
            return False
        self.proxy.open_connections += 1
        return True

    def release(self, connection: Connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self.proxy.open_connections -= 1

    def new_record(self, host: str, port: int, method: str) -> RequestRecord:
        record = RequestRecord(time.time(), host, port, method)
        if len(self.log) == self.log.maxlen:
            self.dropped += 1
        self.log.append(record)
        return record


    def credential_added(self, host: str, port: int, method: str, secret: Secret,
                         tunnel: RequestRecord | None = None) -> None:
        """Log and announce one request that got a credential; inside a TLS tunnel each request
        gets a record of its own beside the CONNECT's."""
        if tunnel is not None:
            record = self.new_record(host, port, method)
            record.decision, record.decided_by, record.answer = tunnel.decision, tunnel.decided_by, tunnel.answer
            record.address, record.credential = tunnel.address, secret.credential.header
        self.policy.credential_used(CredentialUse(host, port, method, secret.credential.header, self.label))


def proxy_env(url: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """HTTP(S)_PROXY and friends, npm's and git's settings; pip and apt read the plain variables."""
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                  "all_proxy", "npm_config_proxy", "npm_config_https_proxy")}
    env.update(NO_PROXY=NO_PROXY, no_proxy=NO_PROXY, npm_config_noproxy=NO_PROXY)
    count = (base or {}).get("GIT_CONFIG_COUNT", "0")
    index = int(count) if count.isdigit() else 0
    env.update({"GIT_CONFIG_COUNT": str(index + 1), f"GIT_CONFIG_KEY_{index}": "http.proxy",
                f"GIT_CONFIG_VALUE_{index}": url})
    return env


def _refuse_crowd(client: socket.socket) -> None:
    try:
        client.send(response(503, "Too many connections through lis-tui's proxy at once; retry in a moment.\n"))
    except OSError:
        pass
    client.close()


def _fd_budget() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, (soft - 64) // 6)


_default: EgressProxy | None = None
_default_lock = threading.Lock()


def default_proxy() -> EgressProxy:
    """The process's shared proxy, made on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EgressProxy()
        return _default

