"""The step timeline as a PNG or SVG (matplotlib): CPU threads above GPU streams, kernels coloured by
microbatch and shaded by class, overlap and host-caused idle marked. Draws a StepView; computes nothing."""

from __future__ import annotations

import io

from dbo_trace.analysis.view import StepView, chosen_step, step_view
from dbo_trace.render import RenderOptions
from dbo_trace.render.safe import plot_text

UBATCH_COLOURS = {0: "#1f77b4", 1: "#ff7f0e", -1: "#8c8c8c"}
KIND_STYLE = {  # alpha, hatch
    "compute": (0.95, None),
    "comm": (0.95, "////"),
    "copy": (0.45, None),
    "launch": (0.9, None),
    "yield": (0.25, None),
}
FORMATS = ("png", "svg")
HELD_COLOUR = "#9467bd"


class TimelineRenderer:
    """One step's picture: options.rank and options.step choose it (analysis/view.py chosen_step)."""

    binary = True

    def __init__(self, image_format: str):
        self.name, self.suffixes = image_format, (f".{image_format}",)

    def render(self, report, options: RenderOptions = RenderOptions()) -> bytes:
        rank, position = chosen_step(report, options.rank, options.step)
        return draw_timeline(step_view(rank, position), self.name)


def draw_timeline(view: StepView, image_format: str = "png", width_in: float = 12.0) -> bytes:
    """The picture as PNG or SVG bytes; writing it is the caller's."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes = view.lanes + ["overlap / host idle"]
    row = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(width_in, 1.1 + 0.42 * len(lanes)), dpi=130)
    scale = 1000.0  # us -> ms on the axis
    for bar in view.bars:
        alpha, hatch = KIND_STYLE[bar.kind]
        ax.broken_barh(
            [(bar.start / scale, max(bar.end - bar.start, 0.5) / scale)],
            (row[bar.lane] - 0.38, 0.76),
            facecolors=UBATCH_COLOURS.get(bar.ubatch, "#8c8c8c"),
            alpha=alpha,
            hatch=hatch,
            edgecolor="black" if bar.kind == "comm" else "none",
            linewidth=0.3,
        )
    y = row["overlap / host idle"]
    ax.broken_barh([(s / scale, (e - s) / scale) for s, e in view.overlap], (y - 0.05, 0.4), facecolors="#2ca02c")
    ax.broken_barh([(s / scale, (e - s) / scale) for s, e in view.host_idle], (y - 0.38, 0.33), facecolors="#d62728")
    for ready, start, lane, _cause in view.held_back:  # a thin bar under the comm's lane: ready, not running
        ax.broken_barh([(ready / scale, (start - ready) / scale)], (row[lane] - 0.46, 0.1), facecolors=HELD_COLOUR)
    if view.lead_in_us >= 0.05 * view.duration:  # worth a word: microbatch threads starting, Python before the GPU
        ax.annotate(
            f"lead-in {view.lead_in_us / scale:.2f} ms\nbefore the first kernel",
            xy=(view.lead_in_us / scale / 2, y + 0.25),
            ha="center",
            va="bottom",
            fontsize=7,
            color="#d62728",
        )
    ax.set_yticks(list(row.values()), [plot_text(lane) for lane in row], fontsize=8)  # lanes hold thread names
    ax.set_xlim(0, view.duration / scale)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel("ms from the step's start", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(plot_text(view.title), fontsize=9, loc="left")  # the title holds the step's label
    legend = [
        Patch(facecolor=UBATCH_COLOURS[0], label="microbatch 0"),
        Patch(facecolor=UBATCH_COLOURS[1], label="microbatch 1"),
        Patch(facecolor=UBATCH_COLOURS[-1], label="not attributed"),
        Patch(facecolor="white", edgecolor="black", hatch="////", label="communication"),
        Patch(facecolor="#2ca02c", label="comm under compute"),
        Patch(facecolor="#d62728", label="GPU idle, host-caused"),
    ]
    if view.held_back:
        legend.append(Patch(facecolor=HELD_COLOUR, label="comm held back (ready, not started)"))
    fig.legend(handles=legend, fontsize=7, ncol=len(legend), loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format=image_format)
    plt.close(fig)
    return buf.getvalue()
