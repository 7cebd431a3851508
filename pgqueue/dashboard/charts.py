"""Server-rendered SVG charts: nothing to load in the browser, readable without script.
Colours and text come from presentation attributes and CSS classes (the pages' CSP
allows no inline style)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from markupsafe import Markup

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#475569")
WIDTH, HEIGHT = 420, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 22
MINUTES = 60

__all__ = ["UTC", "overview", "timeline"]


def overview(rows: Sequence[dict[str, Any]], now: datetime) -> dict[str, Markup]:
    """Three charts of the last hour, per minute: finished runs per queue, failed runs,
    and the mean pickup latency."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=MINUTES - 1)

    def slot(at: datetime) -> int:
        return int((at - start).total_seconds() // 60)

    per_queue: dict[str, list[float | None]] = {}
    failed = [0.0] * MINUTES
    pickup_sum = [0.0] * MINUTES
    pickup_n = [0] * MINUTES
    for r in rows:
        i = slot(r["minute"])
        if not 0 <= i < MINUTES:
            continue
        done = r["succeeded"] + r["failed"] + r["canceled"]
        counts = per_queue.setdefault(r["queue"], [0.0] * MINUTES)
        counts[i] = (counts[i] or 0.0) + done
        failed[i] += r["failed"]
        if r["pickup_seconds"] is not None:
            pickup_sum[i] += r["pickup_seconds"] * done
            pickup_n[i] += done
    # a minute in which nothing finished has no latency: a gap, not a zero
    pickup = [pickup_sum[i] / pickup_n[i] if pickup_n[i] else None for i in range(MINUTES)]
    busiest = sorted(per_queue, key=lambda q: -sum(v or 0 for v in per_queue[q]))
    busiest = busiest[: len(PALETTE)]
    return {
        "throughput": lines(
            [(q, per_queue[q]) for q in sorted(busiest)], "runs finished per minute", start
        ),
        "failures": bars(failed, "failed runs per minute", start),
        "pickup": lines([("pickup", pickup)], "mean pickup latency (s)", start, legend=False),
    }


def _frame(title: str, top: float, start: datetime) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'class="chart" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    for k in range(3):
        y = TOP + plot_h * k / 2
        value = top * (2 - k) / 2
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        out.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">'
            f"{_tick(value)}</text>"
        )
    for minutes_ago in (60, 45, 30, 15, 0):
        x = LEFT + plot_w * (MINUTES - 1 - min(minutes_ago, MINUTES - 1)) / (MINUTES - 1)
        label = "now" if minutes_ago == 0 else f"-{minutes_ago}m"
        anchor = "end" if minutes_ago == 0 else "start" if minutes_ago == 60 else "middle"
        out.append(
            f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}" class="axis">{label}</text>'
        )
    return out


def _tick(value: float) -> str:
    if value >= 10000:
        return f"{value / 1000:.0f}k"
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2g}"


def _top(values: Sequence[float]) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is >= every value."""
    peak = max(values, default=0.0)
    if peak <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(peak))
    return next(scale * m for m in (1, 2, 2.5, 5, 10) if scale * m >= peak)


def lines(
    series: Sequence[tuple[str, Sequence[float | None]]],
    title: str,
    start: datetime,
    legend: bool = True,
) -> Markup:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = _top([v for _, values in series for v in values if v is not None])
    out = _frame(title, top, start)
    for n, (name, values) in enumerate(series):
        colour = PALETTE[n % len(PALETTE)]
        runs: list[list[str]] = [[]]
        for i, v in enumerate(values):
            if v is None:
                runs.append([])
                continue
            x, y = LEFT + plot_w * i / (MINUTES - 1), TOP + plot_h * (1 - v / top)
            runs[-1].append(f"{x:.1f},{y:.1f}")
        for points in runs:
            if len(points) == 1:
                cx, cy = points[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{colour}"/>')
            elif points:
                out.append(
                    f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" '
                    f'stroke-width="1.8"><title>{escape(name)}</title></polyline>'
                )
    out.append("</svg>")
    svg = "".join(out)
    if legend and series:
        keys = "".join(
            f'<span class="key"><svg width="10" height="10" aria-hidden="true">'
            f'<rect width="10" height="10" fill="{PALETTE[n % len(PALETTE)]}"/></svg>'
            f"{escape(name)}</span>"
            for n, (name, _) in enumerate(series)
        )
        svg += f'<div class="legend">{keys}</div>'
    return Markup(svg)


def bars(values: Sequence[float], title: str, start: datetime) -> Markup:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = _top(values)
    out = _frame(title, top, start)
    width = plot_w / MINUTES
    for i, v in enumerate(values):
        if v <= 0:
            continue
        h = plot_h * v / top
        x = LEFT + width * i
        out.append(
            f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{max(width - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="#dc2626"><title>{v:.0f}</title></rect>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def timeline(steps: Sequence[dict[str, Any]]) -> Markup | None:
    """A workflow's steps as bars on one time axis, from the first step's start."""
    timed = sorted((s for s in steps if s["started_at"] is not None), key=lambda s: s["started_at"])
    if not timed:
        return None
    t0 = min(s["started_at"] for s in timed)
    t1 = max((s["finished_at"] or s["started_at"]) for s in timed)
    span = max((t1 - t0).total_seconds(), 0.001)
    row, label_w, width = 22, 160, 760
    plot_w = width - label_w - 90
    height = row * len(timed) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'class="timeline" role="img" aria-label="steps over time">'
    ]
    colours = {"succeeded": "#16a34a", "failed": "#dc2626", "waiting": "#d97706"}
    for n, s in enumerate(timed):
        y = 4 + n * row
        x0 = label_w + plot_w * (s["started_at"] - t0).total_seconds() / span
        end = s["finished_at"] or s["started_at"]
        w = max(plot_w * (end - s["started_at"]).total_seconds() / span, 2)
        seconds = s["seconds"]
        took = "-" if seconds is None else _seconds(seconds)
        name = s["name"] if len(s["name"]) <= 24 else s["name"][:23] + "…"
        out.append(
            f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" class="label">'
            f"{escape(name)}</text>"
            f'<rect x="{x0:.1f}" y="{y + 3}" width="{w:.1f}" height="14" rx="2" '
            f'fill="{colours.get(s["state"], "#64748b")}"><title>{escape(s["name"])}: '
            f"{escape(s['state'])}, {took}</title></rect>"
            f'<text x="{x0 + w + 6:.1f}" y="{y + 14}" class="label">{took}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"
