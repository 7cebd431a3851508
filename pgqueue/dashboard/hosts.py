"""Which `Host` a request may name, and which `Origin` a browser's POST may come from.

A dashboard without a token trusts whoever can reach its socket, which on a loopback bind
means the machine's own users. DNS rebinding breaks that: a page of attacker.test whose
name later resolves to 127.0.0.1 reaches the socket from the victim's browser, as its own
origin. What gives it away is the `Host` header (attacker.test:8765), so every request's
Host must be on an allow-list: the address the connection arrived at, for a loopback
address also `127.0.0.1`, `localhost` and `[::1]`, each with that port, and the names
the operator adds (`--allowed-host`, `allowed_hosts=`). A POST's `Origin` must name an
allowed host as well; it is never compared with an origin built from the request's own
Host header.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from pgqueue.errors import ConfigError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
ANY_PORT = -1


class BadHost(ConfigError, ValueError):
    """An `allowed_hosts` entry that is not a host name, an address or host:port."""


def split(hostport: str) -> tuple[str, int | None] | None:
    """(host, port) of a Host header's value (host lower-cased, IPv6 in brackets), or
    None when it is not one."""
    text = hostport.strip().lower()
    if not text or any(c in text for c in "/\\@?# \t"):
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[: end + 1], text[end + 1 :]
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    else:
        host, colon, port_text = text.partition(":")
        rest = colon + port_text
        if ":" in port_text or not host:
            return None
    if not rest:
        return host, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    port = int(rest[1:])
    return (host, port) if 0 < port < 65536 else None


@dataclass(frozen=True)
class Hosts:
    """An allow-list of (host, port) pairs: a port of None is a Host without one (the
    scheme's default), ANY_PORT allows any port (a name the operator gave without one)."""

    entries: frozenset[tuple[str, int | None]]

    @classmethod
    def parse(cls, names: Iterable[str]) -> Hosts:
        entries = set()
        for name in names:
            pair = split(name)
            if pair is None:
                raise BadHost(
                    f"allowed host {name[:80]!r} is not a host name, an address or host:port "
                    "(write IPv6 addresses in brackets: [2001:db8::1]:8765)"
                )
            host, port = pair
            entries.add((host, ANY_PORT if port is None else port))
        return cls(frozenset(entries))

    def with_server(self, server: tuple[str, int | None] | None) -> Hosts:
        """These entries plus the address the connection arrived at (for a loopback
        address, every loopback name), with its port."""
        if not server:
            return self
        address, port = server[0], server[1]
        names = [f"[{address}]" if ":" in address else address.lower()]
        try:
            if ipaddress.ip_address(address).is_loopback:
                names += LOOPBACK_NAMES
        except ValueError:
            pass
        added = {(n, port) for n in names}
        if port in (80, 443):  # a browser leaves the default port out of Host
            added |= {(n, None) for n in names}
        return Hosts(self.entries | added)

    def allows(self, hostport: str) -> bool:
        pair = split(hostport)
        if pair is None:
            return False
        host, port = pair
        return (host, port) in self.entries or (host, ANY_PORT) in self.entries

    def allows_origin(self, origin: str) -> bool:
        """True if `origin` is http(s)://HOST[:PORT] of an allowed host."""
        parts = urllib.parse.urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.path or parts.query:
            return False
        if "@" in parts.netloc:
            return False
        return self.allows(parts.netloc)
