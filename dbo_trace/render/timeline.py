"""The step timeline as a PNG or SVG (matplotlib): CPU threads above GPU streams, kernels coloured by
microbatch and shaded by class, overlap and host-caused idle marked. Draws a StepView; computes nothing."""

from __future__ import annotations

import io

from dbo_trace.analysis.ranks_view import RanksView, ranks_step_view
from dbo_trace.analysis.view import StepView, chosen_step, step_view
from dbo_trace.render import RenderOptions

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
PEER_WAIT_COLOUR = "#d62728"


class TimelineRenderer:
    """One step's picture: options.rank and options.step choose it (analysis/view.py chosen_step)."""

    binary = True

    def __init__(self, image_format: str):
        self.name, self.suffixes = image_format, (f".{image_format}",)

    def render(self, report, options: RenderOptions = RenderOptions()) -> bytes:
        rank, position = chosen_step(report, options.rank, options.step)
        if options.all_ranks:
            return draw_ranks_timeline(ranks_step_view(report, position), self.name)
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
    ax.set_yticks(list(row.values()), list(row.keys()), fontsize=8)
    ax.set_xlim(0, view.duration / scale)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel("ms from the step's start", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(view.title, fontsize=9, loc="left")
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


def draw_ranks_timeline(view: RanksView, image_format: str = "png", width_in: float = 12.0) -> bytes:
    """Every rank's step on one time axis: compute and comm lanes per rank, coloured by microbatch,
    and under each comm kernel a red bar for its wait for a peer rank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    row = {name: len(view.lanes) - 1 - i for i, name in enumerate(view.lanes)}
    fig, ax = plt.subplots(figsize=(width_in, 1.2 + 0.42 * len(view.lanes)), dpi=130)
    scale = 1000.0  # us -> ms on the axis
    for bar in view.bars:
        alpha, hatch = KIND_STYLE[bar.kind]
        ax.broken_barh(
            [(bar.start / scale, max(bar.end - bar.start, 0.5) / scale)],
            (row[bar.lane] - 0.3, 0.68),
            facecolors=UBATCH_COLOURS.get(bar.ubatch, "#8c8c8c"),
            alpha=alpha,
            hatch=hatch,
            edgecolor="black" if bar.kind == "comm" else "none",
            linewidth=0.3,
        )
    for start, end, lane, _peer in view.waits:  # a bar under the comm kernel: the part that waited
        ax.broken_barh([(start / scale, (end - start) / scale)], (row[lane] - 0.46, 0.14), facecolors=PEER_WAIT_COLOUR)
    ax.set_yticks(list(row.values()), list(row.keys()), fontsize=8)
    ax.set_xlim(0, max(view.duration, 1.0) / scale)
    ax.set_ylim(-0.6, len(view.lanes) - 0.4)
    ax.set_xlabel("ms from the earliest rank's step start (shared clock)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(view.title, fontsize=9, loc="left")
    legend = [
        Patch(facecolor=UBATCH_COLOURS[0], label="microbatch 0"),
        Patch(facecolor=UBATCH_COLOURS[1], label="microbatch 1"),
        Patch(facecolor=UBATCH_COLOURS[-1], label="not attributed"),
        Patch(facecolor="white", edgecolor="black", hatch="////", label="communication"),
        Patch(facecolor=PEER_WAIT_COLOUR, label="comm waiting for a peer rank"),
    ]
    fig.legend(handles=legend, fontsize=7, ncol=len(legend), loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format=image_format)
    plt.close(fig)
    return buf.getvalue()
