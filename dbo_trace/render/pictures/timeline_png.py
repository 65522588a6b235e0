"""The step timeline as a PNG or SVG (matplotlib): CPU threads above GPU streams, kernels coloured by
microbatch (by class where nothing is attributed), other steps' work in the window hatched, and a
bottom lane of what the GPU did: comm under compute, exposed comm, host-caused idle, queueing behind
other steps. Draws a StepView; computes nothing.

Fast: every lane's bars of one style are one PolyCollection, added without autoscaling (a step of a
real trace has thousands of kernels; one artist each took 15-20 s). Laid out by measurement: the title
wraps, and the legend takes fewer columns and then shorter labels, until the drawn text fits the
canvas (fit_text)."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from dbo_trace.render.pictures.ranks_view import RanksView, ranks_step_view
from dbo_trace.render.pictures.step_view import (
    FFN_GPU,
    FFN_SPAN,
    HIDDEN,
    LONG_LAUNCH_US,
    ROUND_TRIP,
    ROUND_TRIPS,
    Bar,
    StepView,
    afd_peer,
    chosen_step,
    parse_window,
    step_view,
    window_view,
)
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import cut
from dbo_trace.render.safe import plot_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from dbo_trace.analysis.model import Report

UBATCH_COLOURS = {0: "#1f77b4", 1: "#ff7f0e"}
# Kernels no microbatch launched, coloured by class so a step without microbatches is not all grey.
CLASS_COLOURS = {"compute": "#7f7f7f", "comm": "#8c6d31", "copy": "#c7c7c7", "launch": "#3b3b3b"}
CLASS_LABELS = {
    "compute": "compute, no microbatch",
    "comm": "comm, no microbatch",
    "copy": "memcpy / memset",
    "launch": "CUDA call, no microbatch",
}
KIND_ALPHA = {"compute": 0.95, "comm": 0.95, "copy": 0.6, "launch": 0.9, "yield": 0.25}
# An AFD pair: the FFN's GPU work in a colour of its own; a round trip's span pale in its microbatch's
# colour (grey with one microbatch), its part under the other microbatch's compute in a colour of its
# own (not the state lane's "comm under compute" green: kernel overlap is another figure).
FFN_COLOUR = "#bcbd22"
HIDDEN_TRIP_COLOUR = "#01665e"
# A long launch call whose GPU work began at once (it returned late behind a full queue): pale, dotted.
QUEUE_FULL_ALPHA, QUEUE_FULL_HATCH = 0.25, "...."
NOTE_CHARS = 125  # a picture's note wraps at this many characters a line
ROUND_TRIP_ALPHA = 0.35
ONE_MICROBATCH_TRIP = "#7f7f7f"
COMM_HATCH, OTHER_HATCH = "////", "xxx"  # a comm kernel; another step's work in this step's window
OTHER_ALPHA = 0.35
# What the GPU did (the bottom lane), each its own colour.
HIDDEN_COLOUR, EXPOSED_COLOUR, HOST_COLOUR, QUEUED_COLOUR = "#2ca02c", "#e7298a", "#d62728", "#9e9e9e"
# Held-back comm (analysis/overlap/held.py CAUSES), one colour per cause.
HELD_COLOURS = {"late_record": "#9467bd", "crowded": "#8c564b", "held": "#17becf"}
HELD_LABELS = {
    "late_record": "comm held back: late event record",
    "crowded": "comm held back: SMs crowded",
    "held": "comm held back: other",
}
# Sized for a GitHub comment, which shows a picture at most 880 px wide: drawn 8.8 in wide at 200 dpi
# (1760 px, twice that for a sharp picture on a high-density screen), its text is 9-10 pt, about 12-14
# px once the picture is scaled to 880 px.
WIDTH_IN, DPI = 8.8, 200
FONT, TITLE_FONT = 9, 10
LANE_IN = 0.34  # height per lane
LEGEND_COLUMNS = 4
TITLE_CHARS = 110  # a title wraps at its " · " separators past this many characters (fewer if it is still too wide)
LANE_NAME = 44  # characters of a lane's name (a thread's name comes from the trace)
MARGIN_PX = 4  # the drawn text keeps this far from the canvas's edges

# CPU ranges: pale, so the launches drawn over them stay readable. GPU kernels never take these colours.
GROUP_COLOURS = ("#8dd3c7", "#fdb462", "#bebada", "#80b1d3", "#b3de69", "#fccde5", "#ffed6f", "#bc80bd")
OTHER_GROUP = "#d9d9d9"
LEGEND_NAME = 48  # characters of a trace name in the legend, before measuring cuts it further
PEER_WAIT_COLOUR = "#d62728"
SCALE = 1000.0  # us -> ms on the axis
MIN_BAR_US = 0.5  # a bar is at least this wide, so a zero-length event is still drawn


def title_lines(title: str, most: int = TITLE_CHARS) -> str:
    """The title on as few lines as keep each under `most` characters, broken between its parts."""
    lines: list[str] = []
    for part in title.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= most:
            lines[-1] += " · " + part
        elif len(part) > most:  # a part too long for any line (a vLLM label) starts where the last ended
            lines = lines[:-1] + textwrap.wrap(" · ".join(lines[-1:] + [part]), most)
        else:
            lines.append(part)
    return "\n".join(lines)


def group_colour(view: StepView, group: str | None) -> str:
    if group is None:
        return OTHER_GROUP
    return GROUP_COLOURS[view.groups.index(group)] if group in view.groups[: len(GROUP_COLOURS)] else OTHER_GROUP


def queue_full(bar: Bar) -> bool:
    """A long launch call the GPU did not wait on: its work began at once, the call returned late."""
    return bar.kind == "launch" and not bar.waited and bar.end - bar.start >= LONG_LAUNCH_US


def pair_note(view: StepView) -> str | None:
    """What an AFD pair's picture needs said: why the lanes alternate, what the gaps are."""
    if not view.afd_pair:
        return None
    lines = []
    if any(lane.startswith(f"{ROUND_TRIPS}, microbatch") for lane in view.lanes):  # two microbatches' lanes
        lines.append(
            "Lanes: each microbatch's attention compute sits above the other microbatch's round trips (send start to "
            "receive end), so a round trip's hidden part lies under the compute that hid it."
        )
    if view.attention_idle_us:
        waiting = view.attention_wait_us or 0.0
        lines.append(
            f"White gaps in the attention lanes: the attention GPU idle {view.attention_idle_us / SCALE:.2f} ms in this "
            f"window, {waiting / SCALE:.2f} ms of it while a round trip was in flight (waiting for the FFN's answer)."
        )
    if view.ffn_spans:
        lines.append(f"FFN lane: its compute between two of its sends/receives drawn as one span ({view.ffn_spans} spans).")
    return "\n".join(textwrap.fill(line, NOTE_CHARS) for line in lines)


def kernel_colour(bar: Bar) -> str:
    """A GPU bar's (or a launch's) colour: its microbatch's, else the FFN's, else its class's."""
    if bar.lane == FFN_GPU:
        return FFN_COLOUR
    return UBATCH_COLOURS.get(bar.ubatch) or CLASS_COLOURS.get(bar.kind, CLASS_COLOURS["compute"])


class TimelineRenderer:
    """One step's picture: options.rank and options.step choose it (render/pictures/step_view.py chosen_step)."""

    binary = True

    def __init__(self, image_format: str):
        self.name, self.suffixes = image_format, (f".{image_format}",)

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> bytes:
        rank, position = chosen_step(report, options.rank, options.step)
        peer = afd_peer(report, rank)  # an AFD attention rank's FFN, on one clock
        if options.all_ranks and peer is None:  # an AFD pair's picture already holds both roles
            return draw_ranks_timeline(ranks_step_view(report, position), self.name)
        if options.window is not None:
            return draw_timeline(window_view(rank, *parse_window(rank, options.window), peer), self.name)
        return draw_timeline(step_view(rank, position, peer), self.name)


@dataclass
class Boxes:
    """Bars of one style, drawn as one collection: x from and to (ms), y from and height (lane units)."""

    hatch: str | None = None
    edge: str = "none"  # the hatch's colour, and the bars' outline where outline
    zorder: float = 2.0
    outline: bool = False
    offset_us: float = 0.0  # added to every x: the axis's 0 before the view's start (StepView.origin_us)

    def __post_init__(self) -> None:
        self.x0: list[float] = []
        self.x1: list[float] = []
        self.y0: list[float] = []
        self.h: list[float] = []
        self.colour: list[tuple[str, float]] = []

    def add(self, start_us: float, end_us: float, y0: float, h: float, colour: str, alpha: float = 1.0) -> None:
        self.x0.append((start_us + self.offset_us) / SCALE)
        self.x1.append((max(end_us, start_us + MIN_BAR_US) + self.offset_us) / SCALE)
        self.y0.append(y0)
        self.h.append(h)
        self.colour.append((colour, alpha))

    def draw(self, ax: Any) -> None:
        """One compound path per colour (a few a picture), its bars its sub-paths: no artist and no
        Path object per bar (7,000 Paths took most of a picture's time), no autoscaling."""
        import numpy as np
        from matplotlib.patches import PathPatch
        from matplotlib.path import Path

        if not self.x0:
            return
        x0, x1, y0 = np.array(self.x0), np.array(self.x1), np.array(self.y0)
        y1 = y0 + np.array(self.h)
        corners = np.stack([np.c_[x0, y0], np.c_[x0, y1], np.c_[x1, y1], np.c_[x1, y0], np.c_[x0, y0]], axis=1)
        step = [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]

        def patch(sel: Any, **style: Any) -> None:
            path = Path(corners[sel].reshape(-1, 2), np.tile(step, int(np.count_nonzero(sel))))
            ax.add_artist(PathPatch(path, zorder=self.zorder, **style))  # add_artist: no data limits walked

        styles = np.array([f"{c}/{a}" for c, a in self.colour])
        edges = self.edge if self.outline else "none"
        for colour, alpha in sorted(set(self.colour)):
            patch(styles == f"{colour}/{alpha}", facecolor=colour, alpha=alpha, edgecolor=edges, linewidth=0.3)
        if self.hatch:  # hatched once over them all: Agg hatches each path anew (2 ms a bar)
            patch(np.ones(len(styles), bool), facecolor="none", edgecolor=self.edge, linewidth=0, hatch=self.hatch)


def fit_text(fig: Figure, title: Any, legend: Any, relegend: Any) -> Any:
    """Measure the drawn title and legend and make them fit the canvas: the title re-wrapped at fewer
    characters a line, the legend in fewer columns, then with its labels cut shorter (marked "...").
    relegend(ncol, label_chars) draws the legend anew and returns it. Returns the legend kept."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    room = fig.bbox.width - 2 * MARGIN_PX
    text, most = title.get_text(), TITLE_CHARS
    while title.get_window_extent(renderer).width > room and most > 20:
        most = int(most * 0.85)
        title.set_text("\n".join(title_lines(line, most) for line in text.split("\n")))
    ncol, chars = legend._ncols, LEGEND_NAME
    while legend.get_window_extent(renderer).width > room and (ncol > 1 or chars > 8):
        if ncol > 1:
            ncol -= 1
        else:
            chars = int(chars * 0.8)
        legend.remove()
        legend = relegend(ncol, chars)
    return legend


def inches(fig: Figure, artist: Any) -> float:
    """The drawn height of a text or legend, in inches."""
    return float(artist.get_window_extent(fig.canvas.get_renderer()).height) / fig.dpi  # type: ignore[attr-defined]


def _lane_labels(ax: Any, row: dict[str, int]) -> None:
    ax.set_yticks(list(row.values()), [plot_text(cut(lane, LANE_NAME)) for lane in row], fontsize=FONT)


def _legend(
    fig: Any, entries: Sequence[tuple[dict[str, Any], str]], ncol: int, chars: int, font: float, note: str | None = None
) -> Any:
    """The legend in its own row at the picture's foot, centred on the picture (not on the axis
    beside the lane labels); tight_layout keeps the axis above it (place_axis). note: lines over it
    (the legend's title), what the picture needs said."""
    from matplotlib.patches import Patch

    handles = [Patch(label=plot_text(cut(label, chars)), **style) for style, label in entries]
    return fig.legend(
        title=note,
        title_fontsize=font - 1,
        alignment="left",
        handles=handles,
        fontsize=font,
        ncol=ncol,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=fig.transFigure,
        frameon=False,
        borderaxespad=0,
        columnspacing=1.2,
        handlelength=1.5,
    )


def step_legend(view: StepView) -> list[tuple[dict[str, Any], str]]:
    """The legend's entries, only what the picture holds: (patch style, label)."""
    gpu = [b for b in view.bars if b.kind not in ("range", "op", "launch", "yield", ROUND_TRIP, HIDDEN, FFN_SPAN)]
    ubatches = {b.ubatch for b in gpu if b.ubatch in UBATCH_COLOURS}
    out: list[tuple[dict[str, Any], str]] = [({"facecolor": UBATCH_COLOURS[u]}, f"microbatch {u}") for u in sorted(ubatches)]
    classes = {b.kind for b in view.bars if b.kind in CLASS_COLOURS and b.ubatch not in UBATCH_COLOURS and b.lane != FFN_GPU}
    out += [({"facecolor": CLASS_COLOURS[k]}, CLASS_LABELS[k]) for k in CLASS_COLOURS if k in classes]
    if any(b.kind == "comm" for b in gpu):
        out.append(({"facecolor": "white", "edgecolor": "black", "hatch": COMM_HATCH}, "communication"))
    if any(not b.own for b in gpu):
        out.append(({"facecolor": "white", "edgecolor": "#555555", "hatch": OTHER_HATCH}, "other steps' kernels"))
    trips = {b.ubatch for b in view.bars if b.kind == ROUND_TRIP}
    if trips:
        colour = UBATCH_COLOURS[0] if trips & set(UBATCH_COLOURS) else ONE_MICROBATCH_TRIP
        out.append(({"facecolor": colour, "alpha": ROUND_TRIP_ALPHA}, "round trip: send start to receive end"))
    if any(b.kind == HIDDEN for b in view.bars):
        out.append(({"facecolor": HIDDEN_TRIP_COLOUR}, "round trip under the other microbatch's compute"))
    if any(b.kind == FFN_SPAN for b in view.bars):
        out.append(({"facecolor": FFN_COLOUR}, "FFN compute per round trip"))
    elif any(b.lane == FFN_GPU for b in view.bars):
        out.append(({"facecolor": FFN_COLOUR}, "FFN GPU (its sends and receives hatched)"))
    if any(queue_full(b) for b in view.bars):
        out.append(
            ({"facecolor": CLASS_COLOURS["launch"], "alpha": 0.4, "hatch": QUEUE_FULL_HATCH},
             "launch call, GPU work began at once")
        )  # fmt: skip
    if view.overlap:
        out.append(({"facecolor": HIDDEN_COLOUR}, "comm under compute"))
    if view.exposed:
        out.append(({"facecolor": EXPOSED_COLOUR}, "exposed comm"))
    if view.host_idle:
        out.append(({"facecolor": HOST_COLOUR}, "GPU idle, host-caused"))
    if view.queued:
        out.append(({"facecolor": QUEUED_COLOUR, "edgecolor": "#555555", "hatch": OTHER_HATCH}, "GPU behind: other steps' work"))
    causes = {cause for *_, cause in view.held_back}
    out += [({"facecolor": HELD_COLOURS[c]}, HELD_LABELS[c]) for c in HELD_COLOURS if c in causes]
    shown = {b.group for b in view.bars if b.kind in ("range", "op") and b.group is not None}
    names = [g for g in view.groups[: len(GROUP_COLOURS)] if g in shown]
    out += [({"facecolor": group_colour(view, g)}, g) for g in names]  # trace names: plot_text in _legend
    if shown - set(names):
        out.append(({"facecolor": OTHER_GROUP}, "other CPU ranges"))
    return out


STATE_LANE = "GPU: overlap / exposed / idle"
RIGHT_MARGIN = 0.015  # of the window, drawn past its end: the last kernel's end visible, not on the spine
MARK_LABELS = 40  # a window's step starts labelled (#3); past this many, lines alone


def draw_timeline(view: StepView, image_format: str = "png", width_in: float = WIDTH_IN) -> bytes:
    """The picture as PNG or SVG bytes; writing it is the caller's."""
    fig = timeline_figure(view, width_in)
    return _save(fig, image_format, DPI)


def timeline_figure(view: StepView, width_in: float = WIDTH_IN) -> Figure:
    """The step's picture, laid out (its title and legend measured to fit): what draw_timeline saves."""
    lanes = view.lanes + [STATE_LANE]
    row = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    entries = step_legend(view)
    note = pair_note(view)
    fig, ax = _figure(width_in, DPI)
    title = fig.suptitle(title_lines(plot_text(view.title + _dominant_note(view))), x=0.01, ha="left", fontsize=TITLE_FONT)
    legend = _legend(fig, entries, LEGEND_COLUMNS, LEGEND_NAME, FONT, note)
    legend = fit_text(fig, title, legend, lambda n, chars: _legend(fig, entries, n, chars, FONT, note))
    under = inches(fig, legend) + 0.06  # the legend's row, as measured
    fig.set_size_inches(width_in, inches(fig, title) + 0.2 + LANE_IN * len(lanes) + 0.55 + under)

    o = -view.origin_us  # the axis counts from vLLM's step start where that began before the window
    ranges, plain, comm = Boxes(zorder=1, offset_us=o), Boxes(offset_us=o), Boxes(COMM_HATCH, "black", outline=True, offset_us=o)
    other = Boxes(OTHER_HATCH, "#555555", offset_us=o)
    trips, hidden = Boxes(zorder=1, offset_us=o), Boxes(zorder=2, offset_us=o)
    full = Boxes(QUEUE_FULL_HATCH, "#3b3b3b", offset_us=o)
    ffn_comm = Boxes(COMM_HATCH, "#4d4d00", outline=True, offset_us=o)
    for bar in view.bars:
        y = row[bar.lane]
        if bar.kind in ("range", "op"):  # named ranges above, operators below, on their thread's lane
            ranges.add(bar.start, bar.end, y + (0.02 if bar.kind == "range" else -0.38), 0.36, group_colour(view, bar.group))
        elif bar.kind == ROUND_TRIP:  # a round trip's span, its hidden part drawn over it
            trips.add(bar.start, bar.end, y - 0.3, 0.6, UBATCH_COLOURS.get(bar.ubatch, ONE_MICROBATCH_TRIP), ROUND_TRIP_ALPHA)
        elif bar.kind == HIDDEN:
            hidden.add(bar.start, bar.end, y - 0.3, 0.6, HIDDEN_TRIP_COLOUR)
        elif bar.kind == FFN_SPAN:
            plain.add(bar.start, bar.end, y - 0.3, 0.6, FFN_COLOUR, 0.95)
        elif bar.lane == FFN_GPU and bar.kind == "comm":  # a send or receive, thinner than the compute
            ffn_comm.add(bar.start, bar.end, y - 0.38, 0.76, "#f2f2c2", 1.0)
        elif queue_full(bar):
            full.add(bar.start, bar.end, y - 0.38, 0.76, CLASS_COLOURS["launch"], QUEUE_FULL_ALPHA)
        elif not bar.own:
            other.add(bar.start, bar.end, y - 0.38, 0.76, kernel_colour(bar), OTHER_ALPHA)
        else:
            (comm if bar.kind == "comm" else plain).add(bar.start, bar.end, y - 0.38, 0.76, kernel_colour(bar), KIND_ALPHA[bar.kind])
    y = row[STATE_LANE]  # hidden comm above, exposed comm below; host idle and queueing below
    state, queued = Boxes(offset_us=o), Boxes(OTHER_HATCH, "#555555", offset_us=o)
    for s, e in view.overlap:
        state.add(s, e, y + 0.02, 0.36, HIDDEN_COLOUR)
    for s, e in view.exposed:
        state.add(s, e, y + 0.02, 0.36, EXPOSED_COLOUR)
    for s, e in view.host_idle:
        state.add(s, e, y - 0.38, 0.36, HOST_COLOUR)
    for s, e in view.queued:
        queued.add(s, e, y - 0.38, 0.36, QUEUED_COLOUR)
    held = Boxes(zorder=3, offset_us=o)
    for ready, start, lane, cause in view.held_back:  # a thin bar under the comm's lane: ready, not running
        held.add(ready, start, row[lane] - 0.46, 0.1, HELD_COLOURS.get(cause, HELD_COLOURS["held"]))
    for boxes in (ranges, trips, hidden, plain, comm, other, full, ffn_comm, state, queued, held):
        boxes.draw(ax)
    longest = max((b for b in view.bars if queue_full(b)), key=lambda b: b.end - b.start, default=None)
    if longest is not None and longest.gpu_began_us is not None:  # say it once, on the longest
        ax.annotate(
            f" {plot_text(cut(longest.name, 24))} {(longest.end - longest.start) / SCALE:.2f} ms: its GPU work began\n"
            f" {longest.gpu_began_us / SCALE:.2f} ms in (a full queue, not launch overhead)",
            xy=((longest.start + o) / SCALE, row[longest.lane]), ha="left", va="center", fontsize=FONT - 2,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0},
        )  # fmt: skip
    if view.marks:  # a window's step starts: one collection of lines, labelled inside the axis
        xs = [(x + o) / SCALE for x, _ in view.marks]
        ax.vlines(xs, -0.6, len(lanes) - 0.4, colors="black", linestyles="dashed", linewidth=0.6)
        for x, label in view.marks[:MARK_LABELS]:
            ax.text((x + o) / SCALE, len(lanes) - 0.45, " " + plot_text(label), fontsize=FONT - 1, va="top", ha="left",
                    clip_on=True)  # fmt: skip
    _lane_labels(ax, row)  # lanes hold thread names
    # A step's window ends where its last kernel ends: that kernel's end on the axis' right edge
    # read as cut off. A margin past the window's end, past the last tick, shows it whole.
    ax.set_xlim(o / SCALE, (max(view.duration, 1.0) * (1 + RIGHT_MARGIN) + o) / SCALE)  # a window of no time: 1 us wide
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel(view.axis_label, fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    place_axis(fig, under)
    if view.lead_in_idle:  # worth a word: microbatch threads starting, Python before the GPU
        _lead_in_label(fig, ax, view, y, o)
    return fig


def _dominant_note(view: StepView) -> str:
    """Where one step fills a window of several (a stall), the others are slivers: the title says
    so and names the window that draws them (`--window '#3:#4'`)."""
    if view.dominant is None:
        return ""
    number, us, first, last = view.dominant
    spans = [(a, b) for a, b in ((first, number - 1), (number + 1, last)) if a <= b]
    windows = " and ".join(f"--window '#{a}:#{b}'" for a, b in spans)
    return f" · #{number} ({us / SCALE:.2f} ms) fills {us / view.duration:.0%} of it: {windows} draws the others"


def _lead_in_label(fig: Figure, ax: Any, view: StepView, y: float, o: float = 0.0) -> None:
    """The lead-in's label over its red bar, kept inside the lead-in's span, where no GPU lane has a
    bar yet (it ran over the first kernels): the longest of its wordings that fits, else none (the
    legend names the red)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    room = ax.transData.transform(((view.lead_in_us + o) / SCALE, 0))[0] - ax.transData.transform((o / SCALE, 0))[0]
    ms = f"{view.lead_in_us / SCALE:.2f} ms"
    for text in (f"lead-in {ms}\nbefore the first kernel, host-caused", f"lead-in {ms},\nhost-caused", f"lead-in {ms}"):
        label = ax.text(o / SCALE, y + 0.25, text, ha="left", va="bottom", fontsize=FONT - 1, color=HOST_COLOUR)
        if label.get_window_extent(renderer).width <= room:
            return
        label.remove()


def place_axis(fig: Figure, under: float) -> None:
    """The axis with its labels fitted between the title and the legend's row (`under` inches)."""
    fig.tight_layout(pad=0.4, rect=(0.0, under / fig.get_size_inches()[1], 1.0, 1.0))


def import_in_background() -> None:
    """Start importing what the picture draws with (0.4-0.6 s of CPU, as long as drawing a step) on
    a thread, while the caller reads and analyses the trace; drawing then finds it imported (or
    waits on the import's own lock). Workers are spawned, never forked, so no child inherits the lock."""
    import importlib
    import threading

    threading.Thread(target=importlib.import_module, args=("matplotlib.backends.backend_agg",), daemon=True).start()


PICTURE_MARK = "dbo-trace timeline"


def _figure(width_in: float, dpi: float) -> tuple[Figure, Any]:
    """A figure on its own Agg canvas, one axis: no pyplot (its import alone took 0.4 s, as long as
    drawing a step), no global figure manager to close."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, 4.0), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _save(fig: Figure, image_format: str, dpi: float) -> bytes:
    buf = io.BytesIO()
    # PNG compressed at level 1: a third of level 6's time, the file (100-200 kB) about a fifth larger
    extra: dict[str, Any] = {"pil_kwargs": {"compress_level": 1}} if image_format == "png" else {}
    # Who drew it, where each format keeps that (PNG's Software text, SVG's dc:creator): a rerun
    # recognises its own picture and replaces it (commands/common.py written_by_dbo_trace).
    mark = {"Software": PICTURE_MARK} if image_format == "png" else {"Creator": PICTURE_MARK}
    fig.savefig(buf, format=image_format, dpi=dpi, metadata=mark, **extra)
    return buf.getvalue()


RANKS_WIDTH_IN, RANKS_DPI, RANKS_FONT = 12.0, 130, 8


def draw_ranks_timeline(view: RanksView, image_format: str = "png", width_in: float = RANKS_WIDTH_IN) -> bytes:
    """Every rank's step on one time axis: per rank its CPU launches, compute and comm lanes, coloured
    by microbatch, and under each comm kernel a red bar for its wait for a peer rank."""
    return _save(ranks_figure(view, width_in), image_format, RANKS_DPI)


def ranks_figure(view: RanksView, width_in: float = RANKS_WIDTH_IN) -> Figure:
    row = {name: len(view.lanes) - 1 - i for i, name in enumerate(view.lanes)}
    kinds = {b.kind for b in view.bars}
    ubatches = {b.ubatch for b in view.bars if b.ubatch in UBATCH_COLOURS}
    entries: list[tuple[dict[str, Any], str]] = [({"facecolor": UBATCH_COLOURS[u]}, f"microbatch {u}") for u in sorted(ubatches)]
    classes = {b.kind for b in view.bars if b.ubatch not in UBATCH_COLOURS and b.kind in CLASS_COLOURS}
    entries += [({"facecolor": CLASS_COLOURS[k]}, CLASS_LABELS[k]) for k in CLASS_COLOURS if k in classes]
    if "comm" in kinds:
        entries.append(({"facecolor": "white", "edgecolor": "black", "hatch": COMM_HATCH}, "communication"))
    if view.waits:
        entries.append(({"facecolor": PEER_WAIT_COLOUR}, "comm waiting for a peer rank"))
    # The legend has its own row under the axis (as in the one-rank picture), as tall as its lines.
    fig, ax = _figure(width_in, RANKS_DPI)
    title = fig.suptitle(title_lines(plot_text(view.title)), x=0.01, ha="left", fontsize=RANKS_FONT + 1)
    legend = _legend(fig, entries, max(1, len(entries)), LEGEND_NAME, RANKS_FONT - 1)
    legend = fit_text(fig, title, legend, lambda n, chars: _legend(fig, entries, n, chars, RANKS_FONT - 1))
    under = inches(fig, legend) + 0.06
    fig.set_size_inches(width_in, inches(fig, title) + 0.15 + 0.42 * len(view.lanes) + 0.45 + under)
    plain, comm, waits = Boxes(), Boxes(COMM_HATCH, "black", outline=True), Boxes(zorder=3)
    for bar in view.bars:
        boxes = comm if bar.kind == "comm" else plain
        boxes.add(bar.start, bar.end, row[bar.lane] - 0.3, 0.68, kernel_colour(bar), KIND_ALPHA.get(bar.kind, 0.9))
    for start, end, lane, _peer in view.waits:  # a bar under the comm kernel: the part that waited
        waits.add(start, end, row[lane] - 0.46, 0.14, PEER_WAIT_COLOUR)
    for boxes in (plain, comm, waits):
        boxes.draw(ax)
    ax.set_yticks(list(row.values()), [plot_text(cut(lane, LANE_NAME)) for lane in row], fontsize=RANKS_FONT)
    ax.set_xlim(0, max(view.duration, 1.0) / SCALE)
    ax.set_ylim(-0.6, len(view.lanes) - 0.4)
    ax.set_xlabel("ms from the earliest rank's step start (shared clock)", fontsize=RANKS_FONT)
    ax.tick_params(axis="x", labelsize=RANKS_FONT)
    ax.grid(axis="x", alpha=0.3)
    place_axis(fig, under)
    return fig
