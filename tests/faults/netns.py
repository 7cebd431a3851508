"""A network namespace joined to the host by one veth pair on a private /30, and nothing
else: a process in it reaches the host's end of the pair, and only that. Cutting the
link (the host end down) partitions it from the host; both ends go when the namespace
is deleted, which `partitioned` does even when the test fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.faults.machine import need_root

# 10.213.N.0/30, N from the test process's pid (two test runs at once rarely share it):
# the host end .1, the namespace end .2; no route anywhere else.
PREFIX = 30


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Link:
    namespace: str
    host_end: str
    subnet: str  # 10.213.N

    @property
    def host_address(self) -> str:
        return f"{self.subnet}.1"

    @property
    def inside_address(self) -> str:
        return f"{self.subnet}.2"

    @property
    def network(self) -> str:
        return f"{self.subnet}.0/{PREFIX}"

    def exec_prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace)

    def cut(self) -> None:
        ip("link", "set", self.host_end, "down")

    def restore(self) -> None:
        ip("link", "set", self.host_end, "up")


@contextlib.contextmanager
def partitioned() -> Iterator[Link]:
    need_root("a network namespace")
    if shutil.which("ip") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI needs ip: apt-get install iproute2 (see .ci/run)")
        pytest.skip("needs ip (iproute2)")
    tag = str(os.getpid() % 100000)
    link = Link(f"pgq-part-{tag}", f"pgqh{tag}", f"10.213.{os.getpid() % 256}")
    inside = f"pgqn{tag}"
    ip("netns", "add", link.namespace)
    try:
        ip("link", "add", link.host_end, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", link.namespace)
        ip("addr", "add", f"{link.host_address}/{PREFIX}", "dev", link.host_end)
        ip("link", "set", link.host_end, "up")
        ns = ("netns", "exec", link.namespace, "ip")
        ip(*ns, "addr", "add", f"{link.inside_address}/{PREFIX}", "dev", inside)
        ip(*ns, "link", "set", inside, "up")
        ip(*ns, "link", "set", "lo", "up")
        yield link
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", link.host_end)  # takes its peer along
        subprocess.run(["ip", "netns", "del", link.namespace], check=False, capture_output=True)
