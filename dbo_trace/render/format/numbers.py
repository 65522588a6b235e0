"""A figure as text: durations, shares, plain numbers and three-state figures; a name cut to a width."""

from __future__ import annotations


def ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} us"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def tri(state: bool | None, yes: str = "met", no: str = "missed") -> str:
    """A three-state figure: true, false, or unknown (null in the JSON: never shown as a negative)."""
    return "unknown" if state is None else yes if state else no


def cut(text: str, width: int | None) -> str:
    """A long name cut to width, its end marked ("..." where the name was cut on purpose)."""
    return text if width is None or len(text) <= width else text[: max(1, width - 3)] + "..."


# The one-line findings of a rank, in the order every text renderer prints them (None: nothing to say).
def _amount(x: int | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:,}{unit}"
