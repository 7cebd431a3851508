"""Text for a terminal and for pages: user strings shown with their control characters
escaped, and durations written for people."""

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


# (up to this many seconds, divide by, unit as `pgqueue stats` writes it, as the dashboard does)
_SPANS = (
    (1, 0.001, "ms", " ms"),
    (120, 1, "s", " s"),
    (7200, 60, "m", " min"),
    (172800, 3600, "h", " h"),
    (float("inf"), 86400, "d", " d"),
)


def seconds_text(value: float | None, *, compact: bool = False) -> str:
    """A duration for people: "350 ms", "4.2 s", "12 min", "3.5 h", "2.0 d" ("-" for
    None); `compact` drops the space and shortens minutes ("350ms", "12m"), for tables."""
    if value is None:
        return "-"
    for limit, per, short, long in _SPANS:
        if value < limit:
            amount = value / per
            figure = f"{amount:.0f}" if per in (0.001, 60) else f"{amount:.1f}"
            return figure + (short if compact else long)
    raise AssertionError("unreachable")


def run_ids_text(ids: list[int]) -> str:
    """Run ids in words, as `runs show` and the dashboard say what a run waits for:
    "runs #3, #4" (one: "run #3")."""
    return ("run " if len(ids) == 1 else "runs ") + ", ".join(f"#{i}" for i in ids)
