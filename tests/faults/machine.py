"""Helpers of the fault tests that change the machine (mounts, network namespaces): they
need root, which CI has; elsewhere they skip, in CI (CI=true) they fail instead."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def need_root(what: str) -> None:
    if os.geteuid() == 0:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI runs as root: {what} needs root")
    pytest.skip(f"{what} needs root")


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 160m) on a fresh directory; unmounted on exit."""
    need_root("mounting a tmpfs")
    path = Path(tempfile.mkdtemp(prefix="pgq-tmpfs-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)
        with contextlib.suppress(OSError):
            path.rmdir()


def fill(path: Path) -> int:
    """Fill `path`'s filesystem to the last page with one file, `path`; its size."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12):
            block = b"\0" * chunk
            while True:
                try:
                    written += f.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written
