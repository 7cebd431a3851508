"""Fixtures the dashboard's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def web(dsn: str) -> Iterator[Any]:
    """The dashboard's ASGI app on the test database, behind a TestClient (the upstream
    authenticates: no token needed)."""
    pytest.importorskip("starlette")
    from fastapi.testclient import TestClient

    from pgqueue.dashboard import asgi

    with TestClient(asgi(dsn, upstream_auth=True)) as c:
        yield c
