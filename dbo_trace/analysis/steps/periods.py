"""Start-to-start step periods as a sample (docs/analysis.md, "compare: statistics that hold"): what
`compare` compares and what the profiler's overhead is measured with.

A step's period runs from its start to the next step's start on its rank (analysis/steps/stalls.py); the
rank's last step has no next start, so its period is its window, which is not a start-to-start
period (with graphs the GPU runs behind the CPU and the last window is half as long again as a
period). The sample leaves it out, where the rank has other steps. Pure; steps are read through the
few attributes named in PeriodStep, so this module needs nothing of analysis/report.py.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar


class PeriodStep(Protocol):
    @property
    def period_us(self) -> float: ...

    @property
    def start_us(self) -> float: ...

    @property
    def index(self) -> int: ...

    @property
    def stall(self) -> object | None: ...


S = TypeVar("S", bound=PeriodStep)


class MarkedLike(Protocol):
    @property
    def period_us(self) -> float: ...

    @property
    def phase(self) -> str | None: ...


def marked_periods_of(ranks: Sequence[Sequence[MarkedLike]], phase: str | None) -> list[float]:
    """The steady steps' periods by vLLM's annotations (each rank's marked periods, its steady
    annotated steps with a next start), of one phase (None: all), the k-th averaged over the ranks
    that have them, as steady_periods averages: one basis for every step median where the traces carry
    the annotations beside steps of another source (an event log's start at another point of the step,
    which moves with DBO: docs/analysis.md, "compare: statistics that hold")."""
    mine = [[m.period_us for m in r if phase is None or m.phase == phase] for r in ranks]
    mine = [m for m in mine if m]
    if not mine:
        return []
    n = min(len(m) for m in mine)
    return [sum(m[k] for m in mine) / len(mine) for k in range(n)]


def last_index(steps: Sequence[PeriodStep]) -> int | None:
    """The index of the rank's step with no next start (its latest start); None where the rank has
    one step (its window is then all there is) or none."""
    if len(steps) < 2:
        return None
    return max(steps, key=lambda s: s.start_us).index


def steady_periods(per_rank: Sequence[tuple[Sequence[S], int | None]]) -> tuple[list[float], list[S]]:
    """The sample: per rank (its chosen steps, and last_index of all its steps), the steady steps with
    a next start; with several ranks the k-th such step's period averaged over the ranks (the ranks
    of one step are one observation, not several). Returns the periods and the first rank's k-th
    steps (for their token counts)."""
    steady = [[s for s in mine if s.stall is None and s.index != last] for mine, last in per_rank]
    steady = [m for m in steady if m]
    if not steady:
        return [], []
    n = min(len(m) for m in steady)
    periods = [sum(m[k].period_us for m in steady) / len(steady) for k in range(n)]
    return periods, steady[0][:n]
