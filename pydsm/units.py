"""Parsing and printing sizes ("256MiB") and numbers for tables."""
from __future__ import annotations

import math
import re
from typing import Any, Sequence, Union

_UNITS = {
    "": 1, "B": 1,
    "K": 1 << 10, "KIB": 1 << 10, "KB": 1000,
    "M": 1 << 20, "MIB": 1 << 20, "MB": 1000 ** 2,
    "G": 1 << 30, "GIB": 1 << 30, "GB": 1000 ** 3,
    "T": 1 << 40, "TIB": 1 << 40, "TB": 1000 ** 4,
}


def parse_size(value: Union[int, str]) -> int:
    """Bytes in ``value``: an int, or text like ``"256MiB"``, ``"1G"``, ``"4096"``.

    Raises ValueError for anything else (negative numbers included).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size must not be negative: {value}")
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (examples: 4096, 64KiB, 256MiB, 1GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(nbytes: int) -> str:
    """``268435456`` -> ``"256MiB"`` (binary units, no decimals when exact)."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= mult:
            v = nbytes / mult
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{nbytes}B"


def format_value(value: float) -> str:
    """A figure for a table: 4 significant digits, thousands separated."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return f"{v:.3g}"


def render_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """Plain-text table with aligned columns. ``align`` has one of ``l``/``r``
    per column (default: first column left, the others right)."""
    cols = len(headers)
    align = align or ("l" + "r" * (cols - 1))
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(cols)]

    def line(r: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(r):
            out.append(c.ljust(widths[i]) if align[i] == "l" else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])
