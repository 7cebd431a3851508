"""Text for a terminal: user strings shown with their control characters escaped."""

from __future__ import annotations


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with control and other non-printing characters escaped (\\x1b, \\u202e):
    task names, queues, groups and error messages are anyone's input, and raw escape
    sequences would reach the terminal. `lines` keeps newlines (tracebacks)."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or (lines and ch == "\n") else ch.encode("unicode_escape").decode()
        for ch in text
    )
