"""DBO's effect taken apart: a step's period cut into parts on each role's GPU, and a pair's change
of each part (DBO on less DBO off) against the change of its period (docs/analysis.md, "Does DBO
pay: the effect taken apart").

Over a span S = [the first steady step's start, the last steady step's start), which holds N step
periods, each part per step is its time inside S / N:
  compute       the union of the compute kernels (every kernel that is not communication, not a copy)
  comm alone    the union of the communication kernels less compute: on an AFD attention rank, the
                wait for the other role's answer, its round trip
  copy          memcpy/memset alone (under neither)
  idle          the rest, host-caused (nothing queued) or dependency (work queued, waiting), as the
                rank's partition labels it (analysis/accounting.py)
The parts add up to the mean period S / N exactly; a pair's changes add up to the change of the mean
period, and the residual against the change of the median period is stated, not hidden.
Pure functions over the rank's partition and kernel arrays, linear in the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import intervals as iv
from dbo_trace.analysis.accounting import B_COMM, B_COMPUTE, B_COPY, B_HOST, B_OTHER, Partition

TOP_KERNELS = 40  # compute kernel names kept per arm, by time per step (the per-call table reads these)
SHOWN_KERNELS = 5  # kernels a pair lists, by the change of their time per step


@dataclass(frozen=True)
class KernelCalls:
    """One compute kernel name over the span: its time and calls per step, its median call."""

    name: str  # from the trace: untrusted
    us_per_step: float
    calls_per_step: float
    median_us: float


@dataclass(frozen=True)
class FfnParts:
    """The FFN role's GPU over the attention's span S, per step (its trace put on the attention's clock)."""

    compute_us: float  # the union of its compute kernels
    other_busy_us: float  # its other GPU work not under compute (its sends and receives, copies)
    idle_us: float  # its GPU idle


@dataclass(frozen=True)
class SpanParts:
    """A rank's mean step period over S cut into parts, each per step (us)."""

    start_us: float  # S's start, on the rank's trace clock
    span_us: float  # |S|
    periods: int  # N: the step periods S holds
    compute_us: float
    comm_alone_us: float
    copy_us: float
    host_idle_us: float
    dependency_idle_us: float
    kernels: tuple[KernelCalls, ...] = ()  # the top compute kernels over S
    ffn: FfnParts | None = None  # with the FFN's trace

    @property
    def period_us(self) -> float:
        return self.span_us / self.periods

    @property
    def idle_us(self) -> float:
        return self.host_idle_us + self.dependency_idle_us


def span_of(step_start: np.ndarray, steady: np.ndarray) -> tuple[float, float, int] | None:
    """S and N: from the first steady step's start to the last one's; N the steps starting inside.
    step_start: every reported step's start; steady: which are not stalls. None: fewer than two."""
    starts = step_start[steady]
    if len(starts) < 2:
        return None
    lo, hi = float(starts.min()), float(starts.max())
    n = int(((step_start >= lo) & (step_start < hi)).sum())
    return (lo, hi, n) if hi > lo and n > 0 else None


def span_parts(
    part: Partition,
    lo: float,
    hi: float,
    periods: int,
    *,
    start: np.ndarray,
    end: np.ndarray,
    name: np.ndarray,
    compute: np.ndarray,
    names: list[str],
) -> SpanParts:
    """The parts of [lo, hi) per step. start, end, name (ids into names), compute (bool): every GPU
    activity of the rank, for the per-call table."""
    row = part.measure(np.array([lo]), np.array([hi]))[0]
    per = float(periods)
    return SpanParts(
        start_us=lo,
        span_us=hi - lo,
        periods=periods,
        compute_us=float(row[B_COMPUTE]) / per,
        comm_alone_us=float(row[B_COMM]) / per,
        copy_us=float(row[B_COPY]) / per,
        host_idle_us=float(row[B_HOST]) / per,
        dependency_idle_us=float(row[B_OTHER]) / per,
        kernels=kernel_calls(lo, hi, periods, start=start, end=end, name=name, compute=compute, names=names),
    )


def kernel_calls(
    lo: float,
    hi: float,
    periods: int,
    *,
    start: np.ndarray,
    end: np.ndarray,
    name: np.ndarray,
    compute: np.ndarray,
    names: list[str],
) -> tuple[KernelCalls, ...]:
    """Per compute kernel name, the calls that start inside [lo, hi): time and calls per step, median
    call; the TOP_KERNELS names by time per step."""
    keep = compute & (start >= lo) & (start < hi)
    ids, dur = name[keep], (end - start)[keep]
    if not len(ids):
        return ()
    order = np.argsort(ids, kind="stable")
    ids, dur = ids[order], dur[order]
    firsts = iv.run_firsts(ids)
    total = np.add.reduceat(dur, firsts)
    counts = np.diff(np.r_[firsts, len(ids)])
    top = np.argsort(-total, kind="stable")[:TOP_KERNELS]
    return tuple(
        KernelCalls(
            names[int(ids[firsts[k]])],
            float(total[k]) / periods,
            float(counts[k]) / periods,
            float(np.median(dur[firsts[k] : firsts[k] + counts[k]])),
        )
        for k in top.tolist()
    )


def ffn_parts(
    lo: float, hi: float, periods: int, gpu: tuple[np.ndarray, np.ndarray], compute: tuple[np.ndarray, np.ndarray]
) -> FfnParts:
    """The FFN's GPU over the attention's [lo, hi), per step; its intervals on the attention's clock."""
    span = (np.array([lo]), np.array([hi]))
    busy = iv.length(*iv.intersection(gpu, span))
    comp = iv.length(*iv.intersection(compute, span))
    per = float(periods)
    return FfnParts(comp / per, (busy - comp) / per, (hi - lo - busy) / per)


# ---- a pair: DBO on less DBO off ------------------------------------------------------------------------

PAYS, DOES_NOT_PAY, WITHIN_NOISE, NOT_TOLD = "pays", "does not pay", "within noise", "too few steps"


@dataclass(frozen=True)
class KernelChange:
    name: str
    off: KernelCalls | None  # None: not among that arm's top kernels
    on: KernelCalls | None

    @property
    def change_us(self) -> float:
        return (self.on.us_per_step if self.on else 0.0) - (self.off.us_per_step if self.off else 0.0)


@dataclass(frozen=True)
class Effect:
    """DBO's effect per step on one pair: each part off and on, the changes, how they add up."""

    off: SpanParts
    on: SpanParts
    median_change_us: float | None  # the measured change of the median period (compare's sample)
    median_change: float | None  # as a fraction of the DBO-off median
    call: str  # PAYS, DOES_NOT_PAY, WITHIN_NOISE or NOT_TOLD: from the measured change's call
    kernels: tuple[KernelChange, ...] = ()

    def change(self, part: str) -> float:
        return float(getattr(self.on, part)) - float(getattr(self.off, part))

    @property
    def compute_change_us(self) -> float:
        return self.change("compute_us")

    @property
    def comm_alone_change_us(self) -> float:
        return self.change("comm_alone_us")

    @property
    def copy_change_us(self) -> float:
        return self.change("copy_us")

    @property
    def idle_change_us(self) -> float:
        return self.change("idle_us")

    @property
    def parts_sum_us(self) -> float:
        """The parts' changes added: the change of the mean period over S (exactly, but for rounding)."""
        return self.compute_change_us + self.comm_alone_change_us + self.copy_change_us + self.idle_change_us

    @property
    def mean_change_us(self) -> float:
        return self.on.period_us - self.off.period_us

    @property
    def residual_us(self) -> float | None:
        """The parts' sum less the measured change of the median period: how closely they add up to it."""
        return None if self.median_change_us is None else self.parts_sum_us - self.median_change_us

    @property
    def cost_us(self) -> float:
        """What DBO added: the parts that grew (compute, copy, idle; comm where it grew)."""
        return sum(max(self.change(p), 0.0) for p in ("compute_us", "copy_us", "idle_us", "comm_alone_us"))

    @property
    def exposed_removed_us(self) -> float:
        """The exposed comm (comm alone) it removed (0 where comm alone grew): a change of exposed comm,
        never called hidden (docs/analysis.md, "Overlap, with one meaning")."""
        return max(-self.comm_alone_change_us, 0.0)


def effect_of(
    off: SpanParts, on: SpanParts, *, median_off_us: float | None, median_on_us: float | None, beyond_noise: bool | None
) -> Effect:
    """The pair's effect; beyond_noise: compare's call on the measured change of the median period
    (None: too few steps to call)."""
    change_us = median_on_us - median_off_us if median_off_us is not None and median_on_us is not None else None
    frac = change_us / median_off_us if change_us is not None and median_off_us else None
    verdict = NOT_TOLD
    if beyond_noise is False:
        verdict = WITHIN_NOISE
    elif beyond_noise and change_us is not None:
        verdict = PAYS if change_us < 0 else DOES_NOT_PAY
    return Effect(off, on, change_us, frac, verdict, kernel_changes(off, on))


def kernel_changes(off: SpanParts, on: SpanParts, shown: int = SHOWN_KERNELS) -> tuple[KernelChange, ...]:
    """The kernels whose time per step changed most (either way), off and on: where the batch halves,
    the same kernel's time per call shows what a smaller launch costs."""
    a = {k.name: k for k in off.kernels}
    b = {k.name: k for k in on.kernels}
    changes = [KernelChange(n, a.get(n), b.get(n)) for n in dict.fromkeys([*a, *b])]
    changes.sort(key=lambda k: -abs(k.change_us))
    return tuple(changes[:shown])
