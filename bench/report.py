"""Turning runs into the printed tables: medians over repeats, operator/baseline ratios, growth
exponents against N, and the issue's targets met or missed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

SUPERLINEAR_EXPONENT = 1.15
"""A cost growing like N^k with k above this over the measured range is flagged super-linear
(allowing for noise: exactly linear growth measures between about 0.9 and 1.1 here)."""


def median(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The sorted values' element at index `fraction` x (n - 1), rounded (half to even)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def paired_ratio_median(pairs: Sequence[tuple[float | None, float | None]]) -> float | None:
    """Median of per-repeat ratios: the two runs of a pair ran minutes apart, so machine noise
    cancels better than in a ratio of medians over the whole run."""
    return median(ratio(a, b) for a, b in pairs)


def growth_exponent(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(cost) against log(N): 1 is linear, 2 quadratic."""
    points = [(n, cost) for n, cost in points if n > 0 and cost and cost > 0]
    if len({n for n, _ in points}) < 2:
        return None
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(cost) for _, cost in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
            / sum((x - mean_x) ** 2 for x in xs))


def growth_verdict(exponent: float | None) -> str:
    if exponent is None:
        return "n/a (one size)"
    return f"N^{exponent:.2f}" + ("  SUPER-LINEAR" if exponent > SUPERLINEAR_EXPONENT else "")


def fmt(value, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain right-aligned columns, first column left-aligned; Markdown-compatible with pipes."""
    lines = [list(header)] + [list(map(str, row)) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def render(line: list[str]) -> str:
        cells = [line[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        return "| " + " | ".join(cells) + " |"
    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([render(lines[0]), separator, *map(render, lines[1:])])


def target(name: str, met: bool | None, measured: str, goal: str) -> tuple[str, str, str, str]:
    verdict = "n/a" if met is None else ("met" if met else "MISSED")
    return name, goal, measured, verdict
