"""A step laid out for a picture: lanes (CPU threads, GPU streams) and bars, plus the overlap and
host-idle bands and a title. Pure: a RankReport in, a StepView out; renderers draw it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv
from dbo_trace.analysis.accounting import B_COMM, B_HOST
from dbo_trace.analysis.steps.attribution import PHASE_COMM, PHASE_COMPUTE, PHASE_NONE
from dbo_trace.analysis.overlap.held import CAUSES, HeldBack
from dbo_trace.analysis.host.host_time import as_call_threads, outermost_runs, range_kinds
from dbo_trace.analysis.metrics import LONG_GRAPH_LAUNCH_US
from dbo_trace.analysis.model import RankReport, Report, StepReport, StepReports
from dbo_trace.analysis.afd.roles import FFN, wall_offset_us
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips

_YIELD_RANGE = re.compile(r"^dbo:ub(\d+):yield$")
CPU_MAIN = "CPU main thread"
GRAPH_LANE = "GPU graph replay"
# A disaggregated (AFD) attention rank's lanes: its GPU work by microbatch, each microbatch's round
# trips (send start to receive end) under the other microbatch's compute lane, the FFN's GPU.
ATTENTION_GPU = "attention GPU"
ROUND_TRIPS = "round trips"
FFN_GPU = "FFN GPU (same clock)"
ROUND_TRIP, HIDDEN = "round trip", "hidden"  # Bar kinds: a round trip's span, its part under the other's compute
LONG_LAUNCH_US = LONG_GRAPH_LAUNCH_US  # a launch call bar this long is drawn apart where the GPU did not wait on it
FFN_SPAN = "ffn compute"  # Bar kind: the FFN's compute between two of its sends/receives, one span (its kernels merged)
VLLM_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)$", re.S)  # vLLM's step annotation


@dataclass
class Bar:
    start: float  # us, relative to the view's start
    end: float
    lane: str
    name: str
    ubatch: int  # -1: not attributed
    kind: str  # compute | comm | copy | launch | yield | range (a named range) | op (a CPU operator)
    # | round trip (an AFD send's start to its receive's end) | hidden (its part under the other microbatch's compute)
    group: str | None = None  # what it belongs to, for its colour: a range's name; a replayed kernel's launching range
    own: bool = True  # False: GPU work of another step running in this one's window (the GPU behind)
    # a launch call's: when its GPU work began, from the call's start (None: none known or not a launch);
    # a long call whose work began at once returned late behind a full queue: not launch overhead
    gpu_began_us: float | None = None
    waited: bool = True  # the GPU waited on the call (analysis/metrics.py gpu_waited_on_call)


@dataclass
class StepView:
    rank: int
    step: StepReport
    start: float  # trace clock, us
    end: float
    lanes: list[str]  # top to bottom
    bars: list[Bar] = field(default_factory=list)
    overlap: list[tuple[float, float]] = field(default_factory=list)  # comm under compute
    host_idle: list[tuple[float, float]] = field(default_factory=list)  # GPU idle, nothing queued
    # comm held back (analysis/overlap/held.py): (ready, start, lane, cause) per kernel, ready to its start
    held_back: list[tuple[float, float, str, str]] = field(default_factory=list)
    lead_in_us: float = 0.0  # from the step's start to its first kernel: threads starting, Python
    lead_in_idle: bool = False  # the lead-in is worth a word (5% of the step) and mostly host-caused idle
    exposed: list[tuple[float, float]] = field(default_factory=list)  # comm with no compute beside it
    # the GPU running other steps' work and none of this step's (the GPU behind the host: queueing)
    queued: list[tuple[float, float]] = field(default_factory=list)
    title: str = ""
    marks: list[tuple[float, str]] = field(default_factory=list)  # a window's step starts: (x, "#3")
    axis_label: str = "ms from the step's start"
    groups: list[str] = field(default_factory=list)  # the coloured names, most time first; the rest "other"
    # a window of several steps that one of them fills (DOMINANT_SHARE of it, a stall): its number,
    # its time in the window (us), and the numbers of the window's first and last steps
    dominant: tuple[int, float, int, int] | None = None
    # where the axis's 0 is, from the view's start (us; negative: before it): vLLM's step start (its
    # execute_* annotation) where that began before the step's own window (a DBO graph replay's)
    origin_us: float = 0.0
    afd_pair: bool = False  # an AFD attention rank's lanes (its round trips, the FFN's GPU)
    attention_idle_us: float | None = None  # the attention GPU idle in the window, first to last kernel
    attention_wait_us: float | None = None  # ... of it while a round trip was in flight: waiting for the FFN
    ffn_spans: int = 0  # the FFN's compute spans drawn (its kernels merged between its sends/receives)

    @property
    def duration(self) -> float:
        return self.end - self.start


def median_step(rank: RankReport) -> int:
    """Position in rank.steps of the step with the median wall time (the default picture)."""
    walls = np.array([s.wall_us for s in rank.steps])
    return int(np.argsort(walls, kind="stable")[(len(walls) - 1) // 2])


SLOWEST, MEDIAN = "slowest", "median"


def step_number(rank: RankReport, position: int) -> int:
    """A step's number: its row in the rank's per-step table, from 1 (what find_step takes)."""
    return position + 1


def step_name(rank: RankReport, position: int) -> str:
    """`#3 (step 17)`: the number find_step takes and the step's own label."""
    return f"#{step_number(rank, position)} ({rank.steps[position].label})"


class ChoiceNotFound(ValueError):
    """A picture's choice of rank or step names nothing in the report. Plain data (what was asked,
    what there is); the command line says it in its own words (commands/report.py drawn_step)."""


class RankNotFound(ChoiceNotFound):
    def __init__(self, asked: int, ranks: tuple[int, ...]):
        super().__init__(f"rank {asked}: the report has ranks {list(ranks)}")
        self.asked, self.ranks = asked, ranks


class NoStepToDraw(ChoiceNotFound):
    def __init__(self, rank: int):
        super().__init__(f"rank {rank} has no step with GPU activity to draw")
        self.rank = rank


class StepNotFound(ChoiceNotFound):
    """asked: the step as given (stripped); numbered: asked by number (out of range), else by label,
    which no step has or several have (matches: their numbers)."""

    def __init__(self, asked: str, rank: int, steps: int, numbered: bool, matches: tuple[int, ...] = ()):
        what = "out of range" if numbered else f"{len(matches)} steps have this label" if matches else "no such label"
        super().__init__(f"step {asked!r} of rank {rank} ({steps} steps): {what}")
        self.asked, self.rank, self.steps, self.numbered, self.matches = asked, rank, steps, numbered, matches


def find_step(rank: RankReport, step: int | str | None) -> int:
    """The position in rank.steps of the step named: its number (`3` or `#3`, the per-step table's
    row), `median` (the default), `slowest`, or its label (`step 17`, vLLM's `execute_...`).
    StepNotFound where none (or several) is."""
    n = len(rank.steps)
    text = MEDIAN if step is None else str(step).strip()
    if text == MEDIAN:
        return median_step(rank)
    if text == SLOWEST:
        return int(np.argmax([s.wall_us for s in rank.steps]))
    digits = text[1:] if text.startswith("#") else text
    if digits.isdigit():
        number = int(digits)
        if not 1 <= number <= n:
            raise StepNotFound(text, rank.rank, n, numbered=True)
        return number - 1
    matches = [i for i, s in enumerate(rank.steps) if s.label == text]
    if len(matches) == 1:
        return matches[0]
    raise StepNotFound(text, rank.rank, n, numbered=False, matches=tuple(step_number(rank, i) for i in matches))


def chosen_step(report: Report, rank_number: int | None, step: int | str | None) -> tuple[RankReport, int]:
    """The rank and the position of the step a picture draws: rank_number (default the first rank
    with round trips, an AFD pair's attention side, else the first with steps) and step (find_step:
    a number, a label, median or slowest; default the median step). A ChoiceNotFound where the
    report has no such rank or step."""
    ranks = {r.rank: r for r in report.ranks}
    if rank_number is not None and rank_number not in ranks:
        raise RankNotFound(rank_number, tuple(sorted(ranks)))
    first = next((r for r in report.ranks if r.afd is not None and r.steps), None) or next((r for r in report.ranks if r.steps), None)
    rank = ranks[rank_number] if rank_number is not None else first or report.ranks[0]
    if not rank.steps:
        raise NoStepToDraw(rank.rank)
    return rank, find_step(rank, step)


class WindowNotFound(ChoiceNotFound):
    """--window's text does not read as START:END, or names steps the rank does not have, or an empty span."""

    def __init__(self, asked: str, rank: int, steps: int, why: str):
        super().__init__(f"window {asked!r} of rank {rank} ({steps} steps): {why}")
        self.asked, self.rank, self.steps, self.why = asked, rank, steps, why


def parse_window(rank: RankReport, text: str) -> tuple[float, float]:
    """START:END as --window gives it, on the trace's clock (us): each side milliseconds from the
    rank's first step's start (`0:50`, `12.5:30`), or a step's number (`#2:#4`: from #2's start to
    #4's end). WindowNotFound where it reads as neither, names no step, or is empty."""
    parts = text.strip().split(":")
    n = len(rank.steps)

    def side(part: str, end: bool) -> float:
        part = part.strip()
        if part.startswith("#") and part[1:].isdigit():
            k = int(part[1:])
            if not 1 <= k <= n:
                raise WindowNotFound(text, rank.rank, n, f"{part} is out of range (#1 to #{n})")
            return rank.steps[k - 1].end_us if end else rank.steps[k - 1].start_us
        try:
            ms = float(part)
        except ValueError:
            raise WindowNotFound(text, rank.rank, n, "each side is milliseconds (12.5) or a step's number (#3)") from None
        if not np.isfinite(ms):
            raise WindowNotFound(text, rank.rank, n, "each side is milliseconds (12.5) or a step's number (#3)")
        return rank.steps[0].start_us + ms * 1000.0

    if len(parts) != 2 or not n:
        raise WindowNotFound(text, rank.rank, n, "give START:END")
    lo, hi = side(parts[0], False), side(parts[1], True)
    if hi <= lo:
        raise WindowNotFound(text, rank.rank, n, "the end is not after the start")
    return lo, hi


def steps_around_median(rank: RankReport, n: int) -> range:
    """Positions of n consecutive steps centred on the median step (fewer if the rank has fewer)."""
    first = max(0, min(median_step(rank) - n // 2, len(rank.steps) - n))
    return range(first, min(len(rank.steps), first + n))


def window_steps(rank: RankReport, positions: range) -> str:
    """Consecutive steps by number, with their labels where those tell them apart: `steps #2 to #4
    (step 16 to step 18)`, `step #3 (step 17)`; vLLM's labels repeat, so they are left out there."""
    first, last = positions[0], positions[-1]
    if first == last:
        return f"step {step_name(rank, first)}"
    a, b = rank.steps[first].label, rank.steps[last].label
    labels = f" ({a} to {b})" if a != b else ""
    return f"steps #{step_number(rank, first)} to #{step_number(rank, last)}{labels}"


def _step_kind(step: StepReport) -> str:
    """What kind of step: its DBO path where the log knows it, else its vLLM phase, else unknown."""
    parts = [p for p in (step.path, step.phase) if p]
    if step.phase and step.context_tokens is not None:
        parts[-1] += f", {step.context_tokens} prefill + {step.generation_tokens} decode tokens"
    return "; ".join(parts) or "path unknown"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def step_title(rank: RankReport, step: StepReport, position: int | None = None) -> str:
    m = step.metrics
    number = "" if position is None else f"#{step_number(rank, position)} "
    # an AFD attention rank's overlap is its round trips' (its sends and receives run on the compute
    # stream, so kernel overlap reads 0% whatever the lanes show)
    shares = rank.steps.afd_shares if isinstance(rank.steps, StepReports) else None
    afd = shares[position] if shares is not None and position is not None else None
    hidden = (
        f"round trips overlapped {_pct(afd.share)}" if afd is not None and afd.share is not None
        else f"comm hidden {_pct(m.comm_hidden_fraction)}"
    )  # fmt: skip
    role = f" ({rank.role})" if rank.role else ""
    return (
        f"rank {rank.rank}{role} · {number}{step.label} ({_step_kind(step)}) · {step.step_us / 1000:.2f} ms "
        f"(window drawn {step.wall_us / 1000:.2f} ms) · "
        f"{step.verdict.label.value} · {hidden} · host idle {_pct(m.host_idle_fraction)}"
        f" · graph-replayed kernels {_pct(m.replayed_kernel_fraction)}"
    )


def _pack(kernels: list[int], start: np.ndarray, end: np.ndarray) -> dict[int, int]:
    """Kernel -> lane number, greedily: each kernel takes the first lane free at its start."""
    lane_end: list[float] = []
    out = {}
    for i in sorted(kernels, key=lambda k: start[k]):
        n = next((n for n, e in enumerate(lane_end) if e <= start[i]), len(lane_end))
        if n == len(lane_end):
            lane_end.append(0.0)
        lane_end[n] = float(end[i])
        out[i] = n
    return out


def afd_peer(report: Report, rank: RankReport) -> RankReport | None:
    """The FFN rank whose GPU a picture of this AFD attention rank draws beside it (one clock)."""
    if rank.afd is None:
        return None
    return next((r for r in report.ranks if r.role == FFN and r.detail is not None), None)


def step_view(rank: RankReport, position: int, peer: RankReport | None = None) -> StepView:
    """peer: an AFD attention rank's FFN rank (afd_peer), drawn on the attention's clock."""
    step = rank.steps[position]
    att = rank.detailed().attribution
    bands = step_bands(rank, step)
    view = StepView(rank.rank, step, step.start_us, step.end_us, [], title=step_title(rank, step, position))
    began = vllm_step_start(rank, step.start_us)
    if began is not None and began < step.start_us:
        view.origin_us = began - step.start_us
        before = (step.start_us - began) / 1000
        view.axis_label = f"ms from vLLM's step start (its execute_* annotation, {before:.2f} ms before the window drawn)"
    return _fill(view, rank, att.gpu_step == step.index, np.flatnonzero(att.call_step == step.index), bands, peer)


DOMINANT_SHARE = 0.8  # a window step taking this share of the window leaves the others a fifth of it


def _period_end(rank: RankReport, i: int) -> float:
    """Where step i's period ends: the next step's start (its own end for the last step)."""
    return rank.steps[i + 1].start_us if i + 1 < len(rank.steps) else rank.steps[i].end_us


def vllm_step_start(rank: RankReport, at_us: float) -> float | None:
    """The start of vLLM's step annotation (execute_*) running at at_us on the rank's trace clock (the
    latest to begin by then), or None: a DBO step's own window (its graph replay) begins inside it."""
    tl = rank.detailed().timeline
    ann = np.flatnonzero(tl.cpu_is_annotation & (tl.cpu.start <= at_us) & (tl.cpu.end > at_us))
    starts = [float(tl.cpu.start[i]) for i in ann if VLLM_STEP.match(tl.names[tl.cpu.name[i]])]
    return max(starts) if starts else None


def window_view(rank: RankReport, lo: float, hi: float, peer: RankReport | None = None) -> StepView:
    """Any span of the rank's trace (trace clock, us): every GPU activity and CUDA call in it, of
    whichever step, drawn as a step's own; the step starts in it marked."""
    d = rank.detailed()
    tl = d.timeline
    firsts = [i for i, s in enumerate(rank.steps) if s.end_us > lo and s.start_us < hi]
    if not firsts:
        raise NoStepToDraw(rank.rank)
    step = rank.steps[firsts[0]]
    inside = (tl.gpu.end > lo) & (tl.gpu.start < hi)
    kind = d.kernel_kind
    comm = (np.maximum(tl.gpu.start[inside & (kind == c.COMM)], lo), np.minimum(tl.gpu.end[inside & (kind == c.COMM)], hi))
    compute = (tl.gpu.start[inside & (kind == c.COMPUTE)], tl.gpu.end[inside & (kind == c.COMPUTE)])
    bands = StepBands(iv.intersection(comm, compute), iv.difference(comm, compute), d.partition.spans(B_HOST, lo, hi))
    first, last = firsts[0], firsts[-1]
    steps = f"#{step_number(rank, first)}" + (f" to #{step_number(rank, last)}" if last > first else "")
    title = f"rank {rank.rank} · {(hi - lo) / 1000:.2f} ms from {(lo - rank.steps[0].start_us) / 1000:.2f} ms · steps {steps}"
    view = StepView(rank.rank, step, lo, hi, [], title=title, axis_label="ms from the window's start")
    view.marks = [(s.start_us - lo, f"#{step_number(rank, i)}") for i, s in enumerate(rank.steps) if lo <= s.start_us < hi]
    if last > first:  # one step's share of the window (its period clipped to it): the others may be slivers
        shares = [(min(hi, _period_end(rank, i)) - max(lo, rank.steps[i].start_us), i) for i in firsts]
        longest, at = max(shares)
        if longest >= DOMINANT_SHARE * (hi - lo):
            view.dominant = (step_number(rank, at), longest, step_number(rank, first), step_number(rank, last))
    calls = np.flatnonzero((tl.calls.start >= lo) & (tl.calls.start < hi))
    return _fill(view, rank, inside, calls, bands, peer)


def _fill(
    view: StepView, rank: RankReport, own_step: np.ndarray, csel: np.ndarray, bands: StepBands, peer: RankReport | None = None
) -> StepView:
    """The view's lanes, bars and bands: own_step marks the GPU activities that are the view's own
    (n_gpu,) bool; csel the CUDA calls drawn; bands the hidden comm and host idle it marks; peer the
    FFN rank of an AFD attention rank."""
    d = rank.detailed()
    tl, att = d.timeline, d.attribution
    t0, t1 = view.start, view.end

    # GPU: what ran in the window, its own activities and other steps' still (or already) running
    # there; one lane per stream, named by what runs there. A replayed graph forks onto many
    # internal streams whose identity means nothing; their kernels are packed into as few lanes as
    # overlap allows.
    gsel = np.flatnonzero(own_step | ((tl.gpu.end > t0) & (tl.gpu.start < t1)))
    graph_streams: set[int] = set()
    gpu_lanes: list[str] = []
    lane_of_kernel: dict[int, str] = {}
    for sid in sorted({int(tl.gpu.lane[i]) for i in gsel}):
        on = gsel[tl.gpu.lane[gsel] == sid]
        if (d.launch_kind[on] == c.CALL_GRAPH_LAUNCH).mean() > 0.5:
            graph_streams.add(sid)
            continue
        what = "+".join(c.KIND_NAMES[k] for k in sorted(set(d.kernel_kind[on].tolist())))
        gpu_lanes.append(f"GPU stream {sid} ({what})")
        lane_of_kernel.update((int(i), gpu_lanes[-1]) for i in on)
    packed = _pack([int(i) for i in gsel if int(tl.gpu.lane[i]) in graph_streams], tl.gpu.start, tl.gpu.end)
    # Lanes of one replay, named so that two lanes do not read as two launches.
    n_lanes = max(packed.values(), default=-1) + 1
    graph_lanes = [f"{GRAPH_LANE}, lane {n + 1} of {n_lanes}" for n in range(n_lanes)]
    lane_of_kernel.update((i, graph_lanes[n]) for i, n in packed.items())
    for i in gsel:
        view.bars.append(
            Bar(
                float(tl.gpu.start[i]) - t0,
                float(tl.gpu.end[i]) - t0,
                lane_of_kernel[int(i)],
                tl.names[tl.gpu.name[i]],
                int(att.gpu_ubatch[i]),
                c.KIND_NAMES[int(d.kernel_kind[i])],
                own=bool(own_step[i]),
            )
        )

    # CPU: CUDA API calls grouped by the microbatch thread that made them; yields from the hook ranges.
    made: set[str] = set()  # the CPU lanes, as made here (a lane is known by where it was made, not by its name)

    def cpu_lane(u: int) -> str:
        lane = CPU_MAIN if u < 0 else f"CPU microbatch {u}"
        made.add(lane)
        return lane

    first_gpu = np.full(len(tl.calls), np.nan)
    launched = att.gpu_launch_index >= 0
    np.fmin.at(first_gpu, att.gpu_launch_index[launched], tl.gpu.start[launched])
    for i in csel:
        u = int(att.call_ubatch[i])
        began = float(first_gpu[i] - tl.calls.start[i])
        view.bars.append(
            Bar(
                float(tl.calls.start[i]) - t0, float(tl.calls.end[i]) - t0, cpu_lane(u), tl.names[tl.calls.name[i]], u, "launch",
                gpu_began_us=None if np.isnan(began) else began, waited=bool(d.call_gpu_waited[i]),
            )
        )  # fmt: skip
    ann = np.flatnonzero(tl.cpu_is_annotation & (tl.cpu.end > t0) & (tl.cpu.start < t1))
    for i in ann:
        match = _YIELD_RANGE.match(tl.names[tl.cpu.name[i]])
        if match:
            u = int(match.group(1))
            view.bars.append(
                Bar(
                    max(float(tl.cpu.start[i]), t0) - t0,
                    min(float(tl.cpu.end[i]), t1) - t0,
                    cpu_lane(u),
                    "yield",
                    u,
                    "yield",
                )
            )
    _add_ranges(view, rank, gsel, csel, cpu_lane)
    cpu_lanes = sorted({b.lane for b in view.bars} & made, key=lambda n: (n != CPU_MAIN, n))
    afd = rank.afd
    if afd is not None and afd.kernel_ubatch is not None:
        view.lanes = cpu_lanes + _afd_lanes(view, rank, afd, gsel, peer)
        lane_of_kernel = {int(i): bar.lane for bar, i in zip(view.bars[: len(gsel)], gsel.tolist())}
    else:
        view.lanes = cpu_lanes + gpu_lanes + graph_lanes

    first_kernel = min((b.start for b in view.bars if b.own and b.kind in ("compute", "comm", "copy")), default=0.0)
    view.lead_in_us = max(0.0, first_kernel)
    view.overlap = [(s - t0, e - t0) for s, e in zip(*bands.hidden_comm)]
    view.host_idle = [(s - t0, e - t0) for s, e in zip(*bands.host_idle)]
    view.exposed = [(s - t0, e - t0) for s, e in zip(*d.partition.spans(B_COMM, t0, t1))]
    theirs, mine = gsel[~own_step[gsel]], gsel[own_step[gsel]]
    clip = (np.maximum(tl.gpu.start[theirs], t0), np.minimum(tl.gpu.end[theirs], t1))
    queued = iv.difference(iv.union(*clip), iv.union(tl.gpu.start[mine], tl.gpu.end[mine]))
    view.queued = [(float(s) - t0, float(e) - t0) for s, e in zip(*queued)]
    idle_in_lead = iv.length(*iv.intersection(bands.host_idle, (np.array([t0]), np.array([t0 + view.lead_in_us]))))
    view.lead_in_idle = view.lead_in_us >= 0.05 * view.duration and idle_in_lead >= 0.5 * view.lead_in_us
    if d.held is not None:
        for k, ready, cause in held_in_step(d.held, set(np.flatnonzero(own_step).tolist())):
            view.held_back.append((ready - t0, float(tl.gpu.start[k]) - t0, lane_of_kernel[k], cause))
    return view


def _afd_lanes(view: StepView, rank: RankReport, afd: AfdRoundTrips, gsel: np.ndarray, peer: RankReport | None) -> list[str]:
    """An AFD attention rank's GPU lanes, on the view's first len(gsel) bars (its kernels, in order):
    its kernels by the microbatch the round trips told them (its data kernels on their compute
    lanes), each microbatch's round trips from send start to receive end, each under the other
    microbatch's compute lane, with their parts under that compute marked; the FFN's GPU on the
    attention's clock where its trace is there. Returns the lanes, top to bottom."""
    d = rank.detailed()
    tl, t0, t1 = d.timeline, view.start, view.end
    told = afd.kernel_ubatch
    assert told is not None
    ubs = sorted({int(u) for u in told[gsel] if u >= 0})
    two = len(ubs) == 2

    def gpu_lane(u: int) -> str:
        return f"{ATTENTION_GPU}, microbatch {u}" if two and u >= 0 else f"{ATTENTION_GPU}, no microbatch" if two else ATTENTION_GPU

    for bar, i in zip(view.bars[: len(gsel)], gsel.tolist()):
        u = int(told[i])
        bar.lane = gpu_lane(u)
        if u >= 0:
            bar.ubatch = u
    rows = afd.rows
    inside = (rows.send_start < t1) & (rows.recv_end > t0)
    compute = d.kernel_kind == c.COMPUTE
    near = (tl.gpu.end > t0) & (tl.gpu.start < t1)

    def trips_lane(u: int) -> str:
        return f"{ROUND_TRIPS}, microbatch {u}" if two else ROUND_TRIPS

    for u in ubs if two else [-1]:
        mine = np.flatnonzero(inside & ((rows.ubatch == u) if two else np.ones(len(rows), bool)))
        s0, r1 = rows.send_start[mine], rows.recv_end[mine]
        for a, b in zip(s0.tolist(), r1.tolist()):
            view.bars.append(Bar(max(a, t0) - t0, min(b, t1) - t0, trips_lane(u), ROUND_TRIP, u, ROUND_TRIP))
        if two:  # the other microbatch's compute during them (the hidden share's time)
            other = near & compute & (told >= 0) & (told != u)
            hidden = iv.intersection((s0, r1), (tl.gpu.start[other], tl.gpu.end[other]))
            for a, b in zip(*hidden):
                view.bars.append(Bar(max(float(a), t0) - t0, min(float(b), t1) - t0, trips_lane(u), HIDDEN, u, HIDDEN))
    lanes = [lane for u in ubs for lane in (gpu_lane(u), trips_lane(1 - u))] if two else [ATTENTION_GPU, ROUND_TRIPS]
    if two and any(b.lane == gpu_lane(-1) for b in view.bars[: len(gsel)]):
        lanes.append(gpu_lane(-1))
    # the attention GPU's idle from its first kernel to its last, and the part of it while a round
    # trip was in flight: the attention waiting for the FFN's answer
    view.afd_pair = True
    idle, waiting = afd_waiting_spans(rank, t0, t1)
    view.attention_idle_us, view.attention_wait_us = iv.length(*idle), iv.length(*waiting)
    offset = wall_offset_us(peer.detailed().timeline, tl) if peer is not None else None
    if peer is not None and offset is not None:  # the FFN's work while this view's window ran
        fd = peer.detailed()
        ftl = fd.timeline
        at = np.flatnonzero((ftl.gpu.end + offset > t0) & (ftl.gpu.start + offset < t1))
        for a, b, n, kind in ffn_spans(ftl.gpu.start[at] + offset, ftl.gpu.end[at] + offset, fd.kernel_kind[at]):
            label = f"FFN compute ({n} kernels)" if kind == FFN_SPAN else ftl.names[ftl.gpu.name[at[n]]]
            view.bars.append(Bar(max(a, t0) - t0, min(b, t1) - t0, FFN_GPU, label, -1, kind))
        view.ffn_spans = sum(1 for b in view.bars if b.kind == FFN_SPAN)
        lanes.append(FFN_GPU)
    return lanes


def ffn_spans(start: np.ndarray, end: np.ndarray, kind: np.ndarray) -> list[tuple[float, float, int, str]]:
    """The FFN's GPU work for a picture at the pair's scale: each comm kernel (a send or a receive)
    as it is, and the compute between two of them as one span (its first start to its last end),
    the round trip's FFN side. (start, end, n, kind): n the kernels merged in a span (kind FFN_SPAN),
    else the activity's position in the arrays given (kind its class's name)."""
    order = np.argsort(start, kind="stable")
    out: list[tuple[float, float, int, str]] = []
    run: list[int] = []

    def close() -> None:
        if run:
            out.append((float(start[run].min()), float(end[run].max()), len(run), FFN_SPAN))
            run.clear()

    for i in order.tolist():
        if kind[i] == c.COMM:
            close()
            out.append((float(start[i]), float(end[i]), i, c.KIND_NAMES[int(kind[i])]))
        elif kind[i] == c.COMPUTE:
            run.append(i)
    close()
    return out


def afd_phase(kind: np.ndarray) -> np.ndarray:
    """(n_gpu,) an AFD rank's activities' phases by their class: its sends and receives are its comm
    (on the compute stream, so the microbatch threads' phase marks cannot tell them apart)."""
    out: np.ndarray = np.where(kind == c.COMPUTE, PHASE_COMPUTE, np.where(kind == c.COMM, PHASE_COMM, PHASE_NONE)).astype(np.int8)
    return out


Spans = tuple[np.ndarray, np.ndarray]  # (starts, ends)


def afd_waiting_spans(rank: RankReport, lo: float, hi: float) -> tuple[Spans, Spans]:
    """An AFD attention rank's GPU idle within [lo, hi) (trace clock), between its first and its last
    kernel there, and the part of it while a round trip was in flight (the attention waiting for the
    FFN's answer): ((idle starts, ends), (waiting starts, ends))."""
    empty = (np.empty(0), np.empty(0))
    d, afd = rank.detailed(), rank.afd
    if afd is None:
        return empty, empty
    tl, rows = d.timeline, afd.rows
    own = np.flatnonzero((d.kernel_kind != c.COPY) & (tl.gpu.end > lo) & (tl.gpu.start < hi))
    if not len(own):
        return empty, empty
    busy = iv.union(np.maximum(tl.gpu.start[own], lo), np.minimum(tl.gpu.end[own], hi))
    idle = iv.difference((busy[0][:1], busy[1][-1:]), busy)
    inside = (rows.send_start < hi) & (rows.recv_end > lo)
    trips = iv.union(np.maximum(rows.send_start[inside], lo), np.minimum(rows.recv_end[inside], hi))
    return idle, iv.intersection(idle, trips)


def afd_round_trip_spans(rank: RankReport, lo: float, hi: float) -> dict[str, tuple[np.ndarray, np.ndarray, list[str]]]:
    """An AFD attention rank's round trips overlapping [lo, hi) (trace clock) as tracks for an export:
    per microbatch its round trips (send start to receive end), and their parts under the other
    microbatch's compute; by track name, (starts, ends, names)."""
    afd = rank.afd
    if afd is None or afd.kernel_ubatch is None:
        return {}
    d = rank.detailed()
    tl, rows, told = d.timeline, afd.rows, afd.kernel_ubatch
    inside = (rows.send_start < hi) & (rows.recv_end > lo)
    compute = (d.kernel_kind == c.COMPUTE) & (told >= 0)
    out: dict[str, tuple[np.ndarray, np.ndarray, list[str]]] = {}
    for u in sorted(set(rows.ubatch[inside].tolist())):
        mine = np.flatnonzero(inside & (rows.ubatch == u))
        s0, r1 = rows.send_start[mine], rows.recv_end[mine]
        who = f"microbatch {u}" if u >= 0 else "one microbatch"
        names = [f"round trip ({(b - a) / 1000:.2f} ms)" for a, b in zip(s0.tolist(), r1.tolist())]
        out[f"{ROUND_TRIPS}, {who} (send start to receive end)"] = (s0, r1, names)
        if u >= 0:
            other = compute & (told != u)
            hs, he = iv.intersection((s0, r1), (tl.gpu.start[other], tl.gpu.end[other]))
            out[f"{ROUND_TRIPS}, {who}: under the other microbatch's compute"] = (hs, he, ["hidden"] * len(hs))
    return out


RANGE_GROUPS = 8  # names coloured in a picture; the others share one colour


def _add_ranges(view: StepView, rank: RankReport, gsel: np.ndarray, csel: np.ndarray, cpu_lane: Callable[[int], str]) -> None:
    """The named ranges and top-level CPU operators of each thread that launched in the step, on that
    thread's CPU lane (outermost only: docs "Host time"), and the group of each activity on a
    graph-replay lane: the range around its launching call (the later-starting where two hold it),
    else the replay it came from. The names with most
    time in the step get colours. The view's first len(gsel) bars are gsel's kernels, in order."""
    d = rank.detailed()
    tl, att, t0, t1 = d.timeline, d.attribution, view.start, view.end
    named, ops = range_kinds(tl.names, tl.cpu.name, tl.cpu_is_annotation)
    inside = (tl.cpu.end > t0) & (tl.cpu.start < t1)
    lanes = as_call_threads(tl.cpu.lane, tl.cpu.start, tl.cpu.end, ops, tl.calls.lane, tl.calls.start)
    ranges: list[tuple[float, float, str, int, str]] = []  # start, end, name, ubatch, kind
    for tid in np.unique(tl.calls.lane[csel]).tolist():
        mine = csel[tl.calls.lane[csel] == tid]
        ubs, counts = np.unique(att.call_ubatch[mine], return_counts=True)
        u = int(ubs[counts.argmax()])  # the lane its calls are drawn on
        on = inside & (lanes == tid)
        for kind, sel in (("range", on & named), ("op", on & ops)):
            r_lo, r_hi, r_name = outermost_runs(tl.cpu.start[sel], tl.cpu.end[sel], tl.cpu.name[sel])
            ranges += [(float(a), float(b), tl.names[int(n)], u, kind) for a, b, n in zip(r_lo, r_hi, r_name)]
    # A replayed kernel belongs to the range that launched its graph, else to its replay.
    starts = sorted(((a, b, name) for a, b, name, _u, _k in ranges), key=lambda r: r[0])
    lo_of = np.array([r[0] for r in starts])
    replays: dict[int, str] = {}
    replayed: list[tuple[Bar, str]] = []
    for bar, i in zip(view.bars[: len(gsel)], gsel.tolist()):
        at = float(att.gpu_launch_start[i])
        if not bar.lane.startswith(GRAPH_LANE) or np.isnan(at):
            continue
        j = int(np.searchsorted(lo_of, at, side="right")) - 1 if len(lo_of) else -1
        while j >= 0 and starts[j][1] <= at:  # runs of two kinds may nest: walk back to one that holds it
            j -= 1
        if j >= 0:
            group = starts[j][2]
        elif d.launch_kind[i] != c.CALL_GRAPH_LAUNCH:
            continue  # a copy on the replay's stream, launched outside any range
        else:
            call = int(att.gpu_launch_index[i])
            group = replays.setdefault(call, f"graph replay at {(at - t0) / 1000:.2f} ms")
        bar.group = group
        replayed.append((bar, group))
    time_of: dict[str, float] = {}
    for a, b, name, _u, _k in ranges:
        time_of[name] = time_of.get(name, 0.0) + min(b, t1) - max(a, t0)
    # The CPU's names with most time are coloured (a replayed kernel keeps its group as data; a
    # picture colours kernels by microbatch or class, never in a CPU range's colour).
    view.groups = [n for n, _ in sorted(time_of.items(), key=lambda x: (-x[1], x[0]))][:RANGE_GROUPS]
    for a, b, name, u, kind in ranges:
        view.bars.append(Bar(max(a, t0) - t0, min(b, t1) - t0, cpu_lane(u), name, u, kind, name))


def held_in_step(held: HeldBack, kernels: set[int]) -> list[tuple[int, float, str]]:
    """(kernel, ready, cause) of the held-back comm kernels among these GPU activities."""
    return [(int(k), float(r), CAUSES[int(i)]) for k, r, i in zip(held.kernel, held.ready, held.cause) if int(k) in kernels]


@dataclass
class StepBands:
    """Derived intervals of one step on the trace clock, each a (starts, ends) pair of arrays."""

    hidden_comm: tuple[np.ndarray, np.ndarray]  # comm running under compute
    exposed_comm: tuple[np.ndarray, np.ndarray]  # comm with no compute beside it
    host_idle: tuple[np.ndarray, np.ndarray]  # GPU idle with nothing queued: the host was late


def step_bands(rank: RankReport, step: StepReport) -> StepBands:
    """The intervals behind a step's overlap and host-idle numbers, as the metrics count them."""
    return _bands(rank, step, np.flatnonzero(rank.detailed().attribution.gpu_step == step.index))


def steps_bands(rank: RankReport, steps: list[StepReport]) -> list[StepBands]:
    """step_bands of many steps: each step's GPU activities found by one sort, not a scan per step."""
    of_step = iv.index_groups(rank.detailed().attribution.gpu_step)
    return [_bands(rank, s, of_step.get(s.index, np.empty(0, np.int64))) for s in steps]


def _bands(rank: RankReport, step: StepReport, sel: np.ndarray) -> StepBands:
    d = rank.detailed()
    start, end, kind = d.timeline.gpu.start[sel], d.timeline.gpu.end[sel], d.kernel_kind[sel]
    comm = (start[kind == c.COMM], end[kind == c.COMM])
    compute = (start[kind == c.COMPUTE], end[kind == c.COMPUTE])
    host = d.partition.spans(B_HOST, step.start_us, step.end_us)  # as window_time counts it: the one timeline
    return StepBands(iv.intersection(comm, compute), iv.difference(comm, compute), host)
