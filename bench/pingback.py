"""What bench.compare's task bodies send back: (kind, i, time.time()) over UDP to the
benchmark process, same host clock. Its own module so that the peers' task modules
(bench.peer_*) import it without importing bench.compare."""

from __future__ import annotations

import os
import socket
import time

DSN_ENV = "PGQUEUE_CMP_DSN"
UDP_ENV = "PGQUEUE_CMP_UDP"
QUEUE = "cmp"
CHAIN = 4  # tasks per chain, steps per workflow

_udp: socket.socket | None = None


def ping_back(i: int, kind: str = "p") -> None:
    """Report to the benchmark process: `kind` (p: ping, s: chain start, e: chain end)."""
    global _udp
    if _udp is None:
        _udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    message = f"{kind} {i} {time.time()}".encode()
    _udp.sendto(message, ("127.0.0.1", int(os.environ[UDP_ENV])))


def chain_link(i: int, step: int) -> bool:
    """Ping at a chain's first and last task; True if another task follows."""
    if step == 0:
        ping_back(i, "s")
    if step < CHAIN - 1:
        return True
    ping_back(i, "e")
    return False
