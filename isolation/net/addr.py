"""Which addresses belong to this machine or its private networks, and so are not "the internet"."""
from __future__ import annotations

import ipaddress
import threading
import time

_CACHE_SECONDS = 5.0
_cache: tuple[float, frozenset] = (0.0, frozenset())
_lock = threading.Lock()


def is_internal(address: str) -> bool:
    """Loopback, link-local, private, multicast, reserved, unspecified, or one of the host's own."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if not ip.is_global or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return True
    return any(ip in net for net in host_addresses() if net.version == ip.version)


def host_addresses() -> frozenset:
    """The networks (mostly single addresses) this machine answers for as itself, re-read every few seconds."""
    global _cache
    with _lock:
        stamp, addresses = _cache
        if time.monotonic() - stamp > _CACHE_SECONDS:
            addresses = frozenset(_ipv4_local() | _ipv6_local())
            _cache = (time.monotonic(), addresses)
        return addresses


def _ipv4_local() -> set:
    # The kernel's LOCAL routes are exactly the addresses it answers for as this host.
    found, last = set(), None
    try:
        with open("/proc/net/fib_trie") as f:
            for line in f:
                words = line.split()
                if line.lstrip().startswith("|--") and len(words) == 2:
                    last = words[1]
                elif last and words[-2:] == ["host", "LOCAL"] and words[0].startswith("/"):
                    found.add(ipaddress.IPv4Network(f"{last}{words[0]}", strict=False))
    except (OSError, ValueError):
        pass
    return found


def _ipv6_local() -> set:
    found = set()
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                hexaddr = line.split()[0]
                found.add(ipaddress.IPv6Network(int(hexaddr, 16)))
    except (OSError, ValueError, IndexError):
        pass
    return found


def is_ip(host: str) -> bool:
    """Whether `host` is an IP address rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def shown_host(host: str) -> str:
    """An IPv6 address in brackets, as in a URL; a name as it is."""
    return f"[{host}]" if ":" in host else host
