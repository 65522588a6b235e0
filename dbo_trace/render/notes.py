"""The words of what analysis hands over as figures outside the verdict: the host-time line, the
cross-rank view's lines, a rank's and the run's typed notes and where a trace's role came from.
The verdict's own words are render/wording.py's; the document (render/document.py) calls both."""

from __future__ import annotations

from dbo_trace.analysis.host_time import (
    BETWEEN,
    CAUSE_TEXT,
    CPU_OP,
    LAUNCH,
    NAMED,
    OTHER_CALL,
    STARTUP,
    SYNC,
    UNTRACED,
    HostCauses,
)

LINE_NAMES = 3  # names per kind in the one-line summary
LINE_MIN_SHARE = 0.005  # items that round to 0% are left out of the line (launch calls never are)


def cause_items(causes: HostCauses, names: int = LINE_NAMES) -> list[tuple[str, float, int | None]]:
    """The line's items in a fixed order: (text, us, calls where counted). Named ranges and CPU
    operators by name (the largest few, the rest of each kind as one item), then the others."""
    items: list[tuple[str, float, int | None]] = [
        (CAUSE_TEXT[LAUNCH], causes.us(LAUNCH), causes.launch_calls),
        (CAUSE_TEXT[SYNC], causes.us(SYNC), causes.sync_calls),
        (CAUSE_TEXT[OTHER_CALL], causes.us(OTHER_CALL), None),
    ]
    for kind, listed, suffix in ((NAMED, causes.named, ""), (CPU_OP, causes.cpu_ops, " (CPU op)")):
        shown = listed[:names]
        items += [(f"{n}{suffix}", t, None) for n, t in shown]
        rest = causes.rest_us(kind, len(shown))
        if rest > 0:
            items.append((f"other {CAUSE_TEXT[kind]}" if shown else CAUSE_TEXT[kind], rest, None))
    items += [(CAUSE_TEXT[k], causes.us(k), None) for k in (STARTUP, BETWEEN, UNTRACED)]
    return items


def cause_line(causes: HostCauses, head: str) -> str:
    """`<head>: of 41.2 ms GPU idle, 2% launch calls (1,204 calls), 61% gpu_model_runner: preprocess, ...`"""
    parts = []
    for i, (text, us, calls) in enumerate(cause_items(causes)):
        share = causes.share_of(us) or 0.0
        if i > 0 and share < LINE_MIN_SHARE:
            continue
        counted = f" ({calls:,} call{'s' if calls != 1 else ''})" if calls else ""
        parts.append(f"{100 * share:.0f}% {text}{counted}")
    return f"{head}: of {causes.host_idle_us / 1000:.1f} ms GPU idle, " + ", ".join(parts)


def host_line(scope: str, bound: bool, fraction: float | None, causes: HostCauses) -> str:
    """The verdict's host line: `prefill host-bound 94%: of 41.2 ms GPU idle, ...`."""
    share = "n/a" if fraction is None else f"{100 * fraction:.0f}%"
    what = "host-bound" if bound else "GPU idle waiting for the host"
    return cause_line(causes, f"{scope} {what} {share}".strip())
