"""Plain-text tables for the CLI (`explain`, `pools`, `dev up`), aligned like kubectl's."""

from __future__ import annotations

from collections.abc import Sequence


def align_columns(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, no trailing blanks and no final newline; the first
    row is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows)
