"""How the dashboard writes values: the template filters, and JSON for the endpoints."""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from pgqueue.dashboard import charts
from pgqueue.runs.terminal import seconds_text


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON")


# -- template filters ------------------------------------------------------------------


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return duration(seconds)


def duration(seconds: float | None) -> str:
    return seconds_text(seconds)


def clock(at: datetime | None) -> str:
    if at is None:
        return "-"
    return f"{at.astimezone(charts.UTC):%Y-%m-%d %H:%M:%S}"


def pretty(value: Any) -> str:
    """JSON on one line when it is short, indented when it is not."""
    text = json.dumps(value, default=json_default, ensure_ascii=False)
    if len(text) <= 80:
        return text
    return json.dumps(value, indent=2, default=json_default, ensure_ascii=False)


def quote(value: Any) -> str:
    """A path segment or a query string: unlike Jinja's urlencode, "/" is escaped too."""
    if isinstance(value, dict):
        return urllib.parse.urlencode(value)
    return urllib.parse.quote(str(value), safe="")


def number(value: int | float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,}"
