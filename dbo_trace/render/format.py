"""Number formatting shared by the text renderers."""

from __future__ import annotations


def ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} us"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"
