"""Where the time went and what the host did: time buckets, host causes (by Python frame too),
the kernel and CPU-range summaries, the step-time spread, the GPU's clock and launch delays."""

from __future__ import annotations

from dataclasses import dataclass, fields

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.host.gpu_clock import ClockBounds, Incomplete
from dbo_trace.analysis.host.host_time import CAUSES, HostCauses
from dbo_trace.analysis.host.python_frames import HostStacks, RankStacks, StackClock, StackRow
from dbo_trace.analysis.host.summaries import CpuRangeRow, KernelSummary, Spread
from dbo_trace.analysis.overlap.queueing import LaunchDelay, LaunchDelayFigures
from dbo_trace.render.document.base import Count, Struct, _r
from dbo_trace.render.document.held import rounded
from dbo_trace.render.words.notes import stacks_line, top_item_name

# Blocks that are the analysis's dataclasses as they are, rounded (render/document/held.py): where the
# window's time went (the buckets add up to window_us), the kernel and CPU-range summaries, a row of
# host idle by sampled Python stack, how the sampled stacks were put on the trace's clock.
TimeBlock = TimeBuckets
KernelSummaryBlock = KernelSummary
CpuRange = CpuRangeRow
StackRowBlock = StackRow
StackClockBlock = StackClock


def time_block(b: TimeBuckets) -> TimeBuckets:
    return rounded(b)


def kernel_summary_block(k: KernelSummary | None) -> KernelSummary | None:
    return None if k is None else rounded(k, share=4)  # its rows' shares


def cpu_range_block(rows: tuple[CpuRangeRow, ...]) -> list[CpuRangeRow]:
    return [rounded(row, share=4) for row in rows]


class HostTestBlock(Struct):
    fraction: float | None
    basis: str


class Share(Struct):
    us: float | None
    share: float | None


class NamedShare(Struct):
    name: str
    us: float | None
    share: float | None


class HostCausesBlock(Struct):
    """What the host did while the GPU waited (docs/analysis.md, "Host time"); the causes add up to host_idle_us."""

    host_idle_us: float | None
    causes: dict[str, Share]  # by analysis.host_time.CAUSES, in its order
    launch_calls: Count
    sync_calls: Count
    named: list[NamedShare]
    cpu_ops: list[NamedShare]
    largest: str | None
    top: NamedShare | None
    line: str | None
    # version 5: the CPU operators' time by the innermost operator at each instant (beside cpu_ops,
    # which names the top-level one)
    cpu_ops_innermost: list[NamedShare] | UnsetType = UNSET


class StepCauses(Struct):
    """A step's causes, compact (one per step): the time of each cause and the largest item."""

    host_idle_us: float | None
    causes_us: dict[str, float | None]
    launch_calls: Count
    top: NamedShare | None


class SpreadBlock(Struct):
    median: float | None
    p90: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True, kw_only=True)
class LaunchDelayBlock(LaunchDelayFigures):
    """Launch call end to activity start (docs/analysis.md, "Launch-to-start delay"): the analysis's
    figures as they are, rounded (render/document/held.py); the rank's clocks are its own block."""

    # version 10: an archive of version 5 to 9 lacks them, read as None (not measured; the archive's
    # version check reads the strict decoding, where they are absent)
    host_idle_us: float | None = None  # type: ignore[assignment]  # the analysis always has them; an old archive may not
    last_us: float | None = None  # type: ignore[assignment]
    window_us: float | None = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class ClocksBlock(ClockBounds):
    """The GPU clock's offsets from the CPU's the events allow (docs/analysis.md, "The GPU's clock"):
    the analysis's ClockBounds as it is, rounded (render/document/held.py)."""

    # version 10: an archive of version 7 to 9 lacks it, read as None (not measured; the archive's
    # version check reads the strict decoding, where it is absent)
    lag_median_us: float | None = None


@dataclass(frozen=True, kw_only=True)
class IncompleteBlock(Incomplete):
    """The trace lacks GPU work: its host idle is an upper bound (docs/analysis.md, "Incomplete
    traces"): the analysis's Incomplete as it is, rounded (render/document/held.py), and that bound."""

    # version 10: an archive of version 7 to 9 lacks it, read as None (not measured; the version
    # check reads the strict decoding, where it is absent)
    activities: int | None = None  # type: ignore[assignment]  # the analysis always has it; an old archive may not
    host_idle_upper_bound: bool  # always true: what the block says of the rank's host idle


class Attribution(Struct, kw_only=True):
    # Version 3 only (a review archive's): repeats of the rank's microbatch_source and steps_source,
    # read so that such an archive decodes (and its version is checked); never written since version 4.
    ubatch_source: str | UnsetType = UNSET
    step_source: str | UnsetType = UNSET
    profile_all_threads: bool | None


@dataclass(frozen=True)
class HostStacksBlock(HostStacks):
    """The host-caused GPU idle by sampled Python frame over a window (the rank's, a phase's): the
    analysis's HostStacks as it is, rounded (render/document/held.py), and its line in words after its
    figures (the analysis holds no sentences), so its figures are declared once, there."""

    line: str


class RankStacksBlock(Struct):
    window: HostStacksBlock
    phases: dict[str, HostStacksBlock]


def host_causes_block(c: HostCauses | None, line: str | None = None) -> HostCausesBlock | None:
    if c is None:
        return None

    def share(us: float) -> float | None:
        return _r(c.share_of(us), 4)

    top = c.top
    largest = c.largest
    return HostCausesBlock(
        host_idle_us=_r(c.host_idle_us),
        causes={key: Share(us=_r(c.us(k)), share=_r(c.share(k), 4)) for k, key in enumerate(CAUSES)},
        launch_calls=c.launch_calls,
        sync_calls=c.sync_calls,
        named=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.named],
        cpu_ops=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.cpu_ops],
        largest=None if largest is None else CAUSES[largest],
        top=None if top is None else NamedShare(name=top_item_name(top), us=_r(top.us), share=share(top.us)),
        line=line,
        cpu_ops_innermost=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.cpu_ops_inner],
    )


def host_stacks_block(h: HostStacks, head: str) -> HostStacksBlock:
    figures = rounded(h, overlap=4, share=4)  # its clock's overlap and its rows' shares
    return HostStacksBlock(**{f.name: getattr(figures, f.name) for f in fields(HostStacks)}, line=stacks_line(h, head))


def rank_stacks_block(s: RankStacks | None, rank: int) -> RankStacksBlock | UnsetType:
    if s is None:
        return UNSET
    return RankStacksBlock(
        window=host_stacks_block(s.window, f"rank {rank}"),
        phases={p: host_stacks_block(h, f"rank {rank} {p}") for p, h in s.phases.items()},
    )


def spread_block(x: Spread | None) -> SpreadBlock | None:
    if x is None:
        return None
    return SpreadBlock(median=_r(x.median_us), p90=_r(x.p90_us), p99=_r(x.p99_us), max=_r(x.max_us))


def step_causes_block(c: HostCauses | None) -> StepCauses | None:
    if c is None:
        return None
    top = c.top
    return StepCauses(
        host_idle_us=_r(c.host_idle_us),
        causes_us={key: _r(c.by_cause_us[k]) for k, key in enumerate(CAUSES)},
        launch_calls=c.launch_calls,
        top=None if top is None else NamedShare(name=top_item_name(top), us=_r(top.us), share=_r(c.share_of(top.us), 4)),
    )


def clocks_block(b: ClockBounds | None) -> ClocksBlock | None:
    if b is None:
        return None
    return rounded(ClocksBlock(**{f.name: getattr(b, f.name) for f in fields(b)}))


def incomplete_block(x: Incomplete | None) -> IncompleteBlock | None:
    if x is None:
        return None
    block = IncompleteBlock(**{f.name: getattr(x, f.name) for f in fields(x)}, host_idle_upper_bound=True)
    return rounded(block, launch_coverage=4, correlation_coverage=4)


def launch_delay_block(x: LaunchDelay | None) -> LaunchDelayBlock | None:
    if x is None:
        return None
    return rounded(LaunchDelayBlock(**{f.name: getattr(x, f.name) for f in fields(LaunchDelayFigures)}))
