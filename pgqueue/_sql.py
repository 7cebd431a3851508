"""The query loader: every statement lives in sql/NAME.sql and is read once."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import LiteralString, cast


@cache
def query(name: str) -> LiteralString:
    """The text of sql/<name>.sql. The files ship inside the wheel as pgqueue._sql."""
    text: str = resources.files("pgqueue.sql").joinpath(f"{name}.sql").read_text()
    return cast(LiteralString, text)  # type: ignore[redundant-cast]


def names() -> list[str]:
    return sorted(
        p.name.removesuffix(".sql")
        for p in resources.files("pgqueue.sql").iterdir()
        if p.name.endswith(".sql")
    )
