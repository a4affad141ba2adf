"""A line plot as an SVG file, with no plotting library: what the curve benches draw and
docs/performance.md shows (one series per tool, x on a log scale when it spans decades)."""

from __future__ import annotations

import math
from pathlib import Path

WIDTH, HEIGHT = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50
COLOURS = {"ours": "#1f77b4", "peer": "#d62728"}


def _ticks(low: float, high: float) -> list[float]:
    """About five round values from ``low`` to ``high``."""
    span = (high - low) or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= 6:
            step *= factor
            break
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 2)]


def _label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 or value == 0 else f"{value:.3g}"


def svg(
    path: Path,
    title: str,
    xs: list[float],
    series: dict[str, list[float | None]],
    xlabel: str,
    ylabel: str,
) -> None:
    """Write the plot of ``series`` (name -> one y per x, None where not measured)."""
    logx = min(xs) > 0 and max(xs) / min(xs) >= 100
    fx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    x0, x1 = fx(min(xs)), fx(max(xs))
    values = [y for ys in series.values() for y in ys if y is not None]
    ticks = _ticks(0.0, max(values) if values else 1.0)
    y1 = ticks[-1] if ticks[-1] >= max(values or [0]) else max(values)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (fx(x) - x0) / ((x1 - x0) or 1) * inner_w

    def py(y: float) -> float:
        return TOP + inner_h - y / (y1 or 1) * inner_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>',
        f'<text x="{LEFT + inner_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{xlabel}</text>',
        f'<text x="14" y="{TOP + inner_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + inner_h / 2})">{ylabel}</text>',
    ]
    for tick in ticks:
        if tick > y1:
            continue
        y = py(tick)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{_label(tick)}</text>')
    for x in xs:
        parts.append(
            f'<text x="{px(x)}" y="{TOP + inner_h + 16}" text-anchor="middle">{_label(x)}</text>'
        )
    for n, (name, ys) in enumerate(series.items()):
        colour = COLOURS.get(name, "#555")
        points = [(px(x), py(y)) for x, y in zip(xs, ys, strict=True) if y is not None]
        if len(points) > 1:
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            parts.append(
                f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
        legend_y = TOP + 14 * n
        parts.append(
            f'<text x="{WIDTH - RIGHT - 4}" y="{legend_y}" text-anchor="end" fill="{colour}">'
            f"{name}</text>"
        )
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
