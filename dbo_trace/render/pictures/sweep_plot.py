"""A load sweep as a picture (PNG or SVG, matplotlib): DBO's change in TPOT against requests in flight,
one line per DBO arm and its partner, Welch t 95% intervals as error bars, the profiled step period's
change beside it, a zero line, decode tokens per microbatch under each tick, and the span between two
measured loads where DBO turns. Draws a SweepDocument; computes nothing. Names from the sweep go
through plot_text (no math parsing, inert)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from dbo_trace.analysis.compare.load_sweep import FASTER, SLOWER
from dbo_trace.render.format import cut
from dbo_trace.render.safe import plot_text
from dbo_trace.render.sweep import SweepDocument

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH_IN, HEIGHT_IN, DPI, FONT = 8.8, 4.8, 200, 9  # as the step timeline: a GitHub comment shows 880 px
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
TURN_COLOUR = "#bdbdbd"
LABEL_CHARS = 48  # of an arm's name in the legend
PROFILED_SHIFT = 0.012  # the profiled point beside the timed one, as a share of the x range


def sweep_figure(d: SweepDocument) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ticks: dict[int, str] = {}
    for x in d.loads:
        ticks.setdefault(x.in_flight, f"{x.in_flight}\n{x.tokens_per_microbatch:g} tok/µbatch")
    span = (max(ticks) - min(ticks)) if ticks else 1
    shift = PROFILED_SHIFT * max(span, 1)
    drawn = False
    for k, s in enumerate(d.dbo):
        colour = COLOURS[k % len(COLOURS)]
        name = plot_text(cut(f"{s.on} vs {s.off}", LABEL_CHARS))
        timed = [p for p in s.points if p.change is not None]
        if timed:
            xs = [p.in_flight for p in timed]
            ys = [100 * (p.change or 0.0) for p in timed]
            low = [100 * ((p.change or 0.0) - p.change_low) if p.change_low is not None else 0.0 for p in timed]
            high = [100 * (p.change_high - (p.change or 0.0)) if p.change_high is not None else 0.0 for p in timed]
            # no line between the loads: a line crossing 0 would place a turn the loads do not measure
            ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=colour, capsize=4, linewidth=1.2)
            beyond = [(x, y) for x, y, p in zip(xs, ys, timed) if p.call in (SLOWER, FASTER)]
            within = [(x, y) for x, y, p in zip(xs, ys, timed) if p.call not in (SLOWER, FASTER)]
            if beyond:
                ax.plot(*zip(*beyond), "o", color=colour, label=f"{name}: TPOT (timed repeats, t 95%)")
            if within:
                ax.plot(*zip(*within), "o", markerfacecolor="white", color=colour,
                        label=f"{name}: within noise" if beyond else f"{name}: TPOT, within noise")  # fmt: skip
            drawn = True
        profiled = [p for p in s.points if p.profiled is not None and p.profiled.change is not None]
        if profiled:
            px = [p.in_flight + shift for p in profiled]
            py = [100 * (p.profiled.change or 0.0) for p in profiled if p.profiled]
            pl = [
                100 * ((q.change or 0.0) - (q.change_low if q.change_low is not None else q.change or 0.0))
                for p in profiled
                if (q := p.profiled)
            ]
            ph = [
                100 * ((q.change_high if q.change_high is not None else q.change or 0.0) - (q.change or 0.0))
                for p in profiled
                if (q := p.profiled)
            ]
            ax.errorbar(px, py, yerr=[pl, ph], fmt="D", markersize=4, color=colour, alpha=0.55, capsize=2, linewidth=0.8,
                        label=f"{name}: profiled step period (bootstrap 95%)")  # fmt: skip
            drawn = True
        for t in s.turns:
            ax.axvspan(t.before_in_flight, t.after_in_flight, color=TURN_COLOUR, alpha=0.25, linewidth=0)
            ax.text((t.before_in_flight + t.after_in_flight) / 2, 0.97, "turns", transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize=FONT - 1, color="#555555")  # fmt: skip
    ax.axhline(0.0, color="black", linewidth=0.8)
    if ticks:
        ax.set_xticks(list(ticks), list(ticks.values()), fontsize=FONT - 1)
        pad = max(span * 0.08, 1.0)
        ax.set_xlim(min(ticks) - pad, max(ticks) + pad)
    ax.tick_params(axis="y", labelsize=FONT - 1)
    ax.set_xlabel("requests in flight (under each: decode tokens per microbatch with DBO)", fontsize=FONT)
    ax.set_ylabel("DBO's change (%): above 0 DBO is slower", fontsize=FONT)
    ax.grid(axis="y", alpha=0.3)
    if drawn:
        ax.legend(fontsize=FONT - 2, loc="best")
    else:
        ax.text(0.5, 0.5, "no DBO arm with a DBO-off partner and timed repeats at any load", transform=ax.transAxes,
                ha="center", va="center", fontsize=FONT)  # fmt: skip
    ax.set_title("DBO's change in TPOT against its DBO-off partner, per load", fontsize=FONT + 1, loc="left")
    fig.tight_layout(pad=0.4)
    return fig


def draw_sweep(d: SweepDocument, image_format: str) -> bytes:
    """The picture as PNG or SVG bytes (SVG without a date: the same sweep draws the same file)."""
    buf = io.BytesIO()
    from dbo_trace.render.pictures.timeline_png import PICTURE_MARK

    # who drew it (PNG's Software text, SVG's dc:creator), as the timeline marks its own: a rerun
    # recognises the picture as dbo-trace's and replaces it (commands/common.py written_by_dbo_trace)
    extra: dict[str, Any] = (
        {"metadata": {"Date": None, "Creator": PICTURE_MARK}}
        if image_format == "svg"
        else {"metadata": {"Software": PICTURE_MARK}, "pil_kwargs": {"compress_level": 1}}
    )
    sweep_figure(d).savefig(buf, format=image_format, dpi=DPI, **extra)
    return buf.getvalue()
