"""The campaign page's chart, drawn on the server as SVG: messages delivered and failed so far, as a
share of the numbers sent, against the time since the send. Not public API.

No script and no library: two polylines, axes and labels. Colours are CSS classes (``delivered``,
``failed``, ``axis``, ``grid``) that the page styles for Airflow's light and dark modes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from airflow_provider_sms.campaigns.resources import TimelinePoint

WIDTH, HEIGHT = 720, 260
# Room for the axes' labels: left, right, top, bottom.
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 12, 36
# Ticks on the time axis, in seconds: the first step giving at most 8 ticks.
STEPS = (60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)


def elapsed(seconds: float) -> str:
    """``seconds`` since the send as the axis labels it: ``0``, ``5 min``, ``2 h``, ``3 d``."""
    if seconds < 3600:
        return f"{round(seconds / 60)} min" if seconds else "0"
    if seconds < 86400:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 86400:g} d"


def delivery_svg(points: Sequence[TimelinePoint], sent: int, sent_at: datetime, now: datetime) -> str:
    """The chart of a campaign that sent ``sent`` numbers at ``sent_at``, up to ``now``.

    :param points: delivered and failed so far, at the end of each minute (oldest first).
    """
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max((now - sent_at).total_seconds(), 60.0)
    if points:
        span = max(span, (points[-1].at - sent_at).total_seconds() + 60)

    def x(seconds: float) -> float:
        return LEFT + plot_w * min(max(seconds, 0.0), span) / span

    def y(count: int) -> float:
        return TOP + plot_h * (1 - (count / sent if sent else 0.0))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="Delivered and failed messages against the time since the send">'
    ]
    for share in (0, 25, 50, 75, 100):
        level = TOP + plot_h * (1 - share / 100)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{level:.1f}" y2="{level:.1f}"/>'
        )
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{level + 4:.1f}" text-anchor="end">{share}%</text>'
        )
    step = next((s for s in STEPS if span / s <= 8), STEPS[-1])
    tick = 0
    while tick <= span:
        parts.append(
            f'<text class="axis" x="{x(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{escape(elapsed(tick))}</text>"
        )
        tick += step
    parts.append(
        f'<text class="axis" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
        "time since the send</text>"
    )
    for name in ("delivered", "failed"):
        # Each line starts at 0 at the send and steps up at the end of each minute.
        coordinates = [f"{x(0):.1f},{y(0):.1f}"]
        for point in points:
            coordinates.append(
                f"{x((point.at - sent_at).total_seconds() + 60):.1f},{y(getattr(point, name)):.1f}"
            )
        last = getattr(points[-1], name) if points else 0
        coordinates.append(f"{x(span):.1f},{y(last):.1f}")
        parts.append(f'<polyline class="{name}" fill="none" points="{" ".join(coordinates)}"/>')
    parts.append("</svg>")
    return "".join(parts)
