"""The step timeline as a PNG or SVG (matplotlib): CPU threads above GPU streams, kernels coloured by
microbatch and shaded by class, overlap and host-caused idle marked. Draws a StepView; computes nothing."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from dbo_trace.analysis.ranks_view import RanksView, ranks_step_view
from dbo_trace.analysis.view import StepView, chosen_step, step_view
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import cut
from dbo_trace.render.safe import plot_text

if TYPE_CHECKING:
    from dbo_trace.analysis.report import Report

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
# Sized for a GitHub comment, which shows a picture at most 880 px wide: drawn 8.8 in wide at 200 dpi
# (1760 px, twice that for a sharp picture on a high-density screen), its text is 9-10 pt, about 12-14
# px once the picture is scaled to 880 px.
WIDTH_IN, DPI = 8.8, 200
FONT, TITLE_FONT = 9, 10
LANE_IN = 0.34  # height per lane
LEGEND_COLUMNS = 4
TITLE_CHARS = 110  # a title (across the whole picture) wraps at its " · " separators past this many characters


def _title_lines(title: str, most: int = TITLE_CHARS) -> str:
    """The title on as few lines as keep each under `most` characters, broken between its parts."""
    import textwrap

    lines: list[str] = []
    for part in title.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= most:
            lines[-1] += " · " + part
        elif len(part) > most:  # a part too long for any line (a vLLM label) starts where the last ended
            lines = lines[:-1] + textwrap.wrap(" · ".join(lines[-1:] + [part]), most)
        else:
            lines.append(part)
    return "\n".join(lines)


# CPU ranges and what replayed kernels belong to: pale, so the launches and the bands stay readable.
GROUP_COLOURS = ("#8dd3c7", "#fdb462", "#bebada", "#80b1d3", "#b3de69", "#fccde5", "#ffed6f", "#bc80bd")
OTHER_GROUP = "#d9d9d9"
LEGEND_NAME = 48  # characters of a trace name in the legend


def group_colour(view: StepView, group: str | None) -> str:
    if group is None:
        return OTHER_GROUP
    return GROUP_COLOURS[view.groups.index(group)] if group in view.groups[: len(GROUP_COLOURS)] else OTHER_GROUP


PEER_WAIT_COLOUR = "#d62728"


class TimelineRenderer:
    """One step's picture: options.rank and options.step choose it (analysis/view.py chosen_step)."""

    binary = True

    def __init__(self, image_format: str):
        self.name, self.suffixes = image_format, (f".{image_format}",)

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> bytes:
        rank, position = chosen_step(report, options.rank, options.step)
        if options.all_ranks:
            return draw_ranks_timeline(ranks_step_view(report, position), self.name)
        return draw_timeline(step_view(rank, position), self.name)


def draw_timeline(view: StepView, image_format: str = "png", width_in: float = WIDTH_IN) -> bytes:
    """The picture as PNG or SVG bytes; writing it is the caller's."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    lanes = view.lanes + ["overlap / host idle"]
    row = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    # The legend lists only what the picture holds.
    plain = [b for b in view.bars if b.kind not in ("range", "op") and b.group is None]
    ubatches = {b.ubatch for b in plain}
    legend = [Patch(facecolor=UBATCH_COLOURS[u], label=f"microbatch {u}") for u in (0, 1) if u in ubatches]
    if ubatches - {0, 1}:
        legend.append(Patch(facecolor=UBATCH_COLOURS[-1], label="not attributed"))
    if any(b.kind == "comm" for b in view.bars):
        legend.append(Patch(facecolor="white", edgecolor="black", hatch="////", label="communication"))
    if view.overlap:
        legend.append(Patch(facecolor="#2ca02c", label="comm under compute"))
    if view.host_idle:
        legend.append(Patch(facecolor="#d62728", label="GPU idle, host-caused"))
    if view.held_back:
        legend.append(Patch(facecolor=HELD_COLOUR, label="comm held back (ready, not started)"))
    shown = {b.group for b in view.bars if b.group is not None}
    names = [g for g in view.groups[: len(GROUP_COLOURS)] if g in shown]
    legend += [Patch(facecolor=group_colour(view, g), label=plot_text(cut(g, LEGEND_NAME))) for g in names]  # trace names
    if shown - set(names):
        legend.append(Patch(facecolor=OTHER_GROUP, label="other CPU ranges"))
    title = _title_lines(plot_text(view.title))  # inert first: the line breaks are the layout's own
    legend_rows = max(1, -(-len(legend) // LEGEND_COLUMNS))
    heights = (LANE_IN * len(lanes), 0.22 * legend_rows)  # the lanes; the legend under the axis
    top = 0.2 + 0.2 * (title.count("\n") + 1)  # the title's lines
    axis = 0.55  # tick labels and the axis label
    fig, (ax, key) = plt.subplots(
        2,
        1,
        figsize=(width_in, top + heights[0] + axis + heights[1] + 0.1),
        dpi=DPI,
        gridspec_kw={"height_ratios": heights},
    )
    scale = 1000.0  # us -> ms on the axis
    for bar in view.bars:  # CPU ranges first, under the launches drawn over them
        if bar.kind in ("range", "op"):
            upper = bar.kind == "range"  # named ranges above, operators below, on their thread's lane
            ax.broken_barh(
                [(bar.start / scale, max(bar.end - bar.start, 0.5) / scale)],
                (row[bar.lane] + (0.02 if upper else -0.38), 0.36),
                facecolors=group_colour(view, bar.group),
                edgecolor="none",
            )
    for bar in view.bars:
        if bar.kind in ("range", "op"):
            continue
        alpha, hatch = KIND_STYLE[bar.kind]
        ax.broken_barh(
            [(bar.start / scale, max(bar.end - bar.start, 0.5) / scale)],
            (row[bar.lane] - 0.38, 0.76),
            facecolors=group_colour(view, bar.group) if bar.group is not None else UBATCH_COLOURS.get(bar.ubatch, "#8c8c8c"),
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
            fontsize=FONT - 1,
            color="#d62728",
        )
    ax.set_yticks(list(row.values()), [plot_text(lane) for lane in row], fontsize=FONT)  # lanes hold thread names
    ax.set_xlim(0, view.duration / scale)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel("ms from the step's start", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, x=0.01, ha="left", fontsize=TITLE_FONT)
    key.axis("off")  # the legend's own row, as tall as its entries: no blank band above or below it
    key.legend(
        handles=legend,
        fontsize=FONT,
        ncol=LEGEND_COLUMNS,
        loc="center",
        bbox_to_anchor=(0, 0, 1, 1),  # centred on the picture, not on the axis beside the lane labels
        bbox_transform=blended_transform_factory(fig.transFigure, key.transAxes),
        frameon=False,
        borderaxespad=0,
        columnspacing=1.2,
        handlelength=1.5,
    )
    fig.tight_layout(pad=0.4, h_pad=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format=image_format, dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def draw_ranks_timeline(view: RanksView, image_format: str = "png", width_in: float = 12.0) -> bytes:
    """Every rank's step on one time axis: compute and comm lanes per rank, coloured by microbatch,
    and under each comm kernel a red bar for its wait for a peer rank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    row = {name: len(view.lanes) - 1 - i for i, name in enumerate(view.lanes)}
    # The legend has its own row, as tall as its one line, under the axis (as in draw_timeline): kept
    # off the lanes' axis by a fixed margin, it sat under a band of blank picture a fifth as tall.
    heights = (0.42 * len(view.lanes), 0.16)  # the lanes; the legend
    top, axis = 0.3, 0.45  # the title; the tick labels and the axis label
    fig, (ax, key) = plt.subplots(
        2,
        1,
        figsize=(width_in, top + heights[0] + axis + heights[1] + 0.1),
        dpi=130,
        gridspec_kw={"height_ratios": heights},
    )
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
    ax.set_yticks(list(row.values()), [plot_text(lane) for lane in row], fontsize=8)  # lanes hold thread names
    ax.set_xlim(0, max(view.duration, 1.0) / scale)
    ax.set_ylim(-0.6, len(view.lanes) - 0.4)
    ax.set_xlabel("ms from the earliest rank's step start (shared clock)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(plot_text(view.title), fontsize=9, loc="left")  # the title holds step labels
    legend = [
        Patch(facecolor=UBATCH_COLOURS[0], label="microbatch 0"),
        Patch(facecolor=UBATCH_COLOURS[1], label="microbatch 1"),
        Patch(facecolor=UBATCH_COLOURS[-1], label="not attributed"),
        Patch(facecolor="white", edgecolor="black", hatch="////", label="communication"),
        Patch(facecolor=PEER_WAIT_COLOUR, label="comm waiting for a peer rank"),
    ]
    key.axis("off")
    key.legend(
        handles=legend,
        fontsize=7,
        ncol=len(legend),
        loc="center",
        bbox_to_anchor=(0, 0, 1, 1),  # centred on the picture, not on the axis beside the lane labels
        bbox_transform=blended_transform_factory(fig.transFigure, key.transAxes),
        frameon=False,
        borderaxespad=0,
    )
    fig.tight_layout(pad=0.4, h_pad=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format=image_format)
    plt.close(fig)
    return buf.getvalue()
