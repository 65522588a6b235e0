"""What-ifs: a model's step against the measured one (every round trip at a given time, no hand-over
latency, SMs kept for comm), each with what it changed; its words are render/'s."""

from __future__ import annotations

from dataclasses import dataclass


# -- what-if estimates (a model) ----------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """A model's step against the measured one; what it changed and on what assumptions is its
    kind's (render/document/ledger.py words them)."""

    step_us: float  # the measured median step
    predicted_us: float  # the model's step

    @property
    def change(self) -> float | None:
        """Predicted against measured: -0.1 is 10% shorter."""
        return self.predicted_us / self.step_us - 1 if self.step_us > 0 else None


@dataclass(frozen=True, kw_only=True)
class RoundTripWhatIf(WhatIf):
    """Every round trip taking round_trip_us: each of a step's N round trips costs max(C, R)."""

    round_trip_us: float
    compute_us: float = 0.0  # C: compute per microbatch (per round trip), which the model keeps
    comm_us: float = 0.0  # R: the measured comm per round trip, which it replaces

    @property
    def compute_covers(self) -> bool:
        """C already covers both R and the new round trip: the model changes nothing, whatever exposed
        the comm (a held-back start, a dependency) is not the round trip's length."""
        return self.compute_us >= max(self.comm_us, self.round_trip_us)


@dataclass(frozen=True, kw_only=True)
class NoHandoversWhatIf(WhatIf):
    """No hand-over latency: a bound, every hand-over on the step's critical path."""


@dataclass(frozen=True, kw_only=True)
class CommSmsWhatIf(WhatIf):
    """sms_reserved of the GPU's sms kept for comm: the crowded comm hides, the compute slows by cost_us."""

    sms_reserved: int
    sms: int
    crowded_us: float  # comm exposed for want of a free SM, per step
    compute_us: float  # the step's compute, per step
    cost_us: float  # what the compute loses with the SMs reserved, per step


# why an asked what-if has no estimate (render/document/ledger.py words each)
ONE_MICROBATCH = "one_microbatch"  # no step's two microbatches told apart: C, the compute per microbatch, is not there
NO_ROUND_TRIPS = "no_round_trips"  # no DBO arithmetic: no comm operations counted per step
NO_SM_COUNT = "no_sm_count"  # sms=N: the trace does not give the GPU's SM count
SMS_NOT_FEWER = "sms_not_fewer"  # sms=N: N is not fewer than the GPU's SMs


@dataclass(frozen=True, kw_only=True)
class NotEstimated:
    """An asked what-if (round-trip=X or sms=N) the model makes no estimate for, and why: one of the
    codes above; afd: an AFD arm (--what-if dbo=on|off predicts DBO's effect from it instead);
    dbo_given: --what-if dbo=on|off was given too (its line suggests no --what-if dbo=)."""

    why: str
    round_trip_us: float | None = None  # round-trip=X as asked
    sms_reserved: int | None = None  # sms=N as asked
    sms: int | None = None  # the GPU's SMs, where known
    step_us: float | None = None  # the measured median step, where known
    afd: bool = False
    dbo_given: bool = False


def not_estimated(
    why: str, *, round_trips_us: tuple[float, ...] = (), sms: tuple[int, ...] = (), step_us: float | None = None,
    afd: bool = False, dbo_given: bool = False,
) -> list[WhatIf | NotEstimated]:
    """Each asked what-if that why leaves without an estimate, in the order asked (round trips, then SMs)."""
    out: list[WhatIf | NotEstimated] = [
        NotEstimated(why=why, round_trip_us=x, step_us=step_us, afd=afd, dbo_given=dbo_given) for x in round_trips_us
    ]
    return out + [NotEstimated(why=why, sms_reserved=n, step_us=step_us, afd=afd, dbo_given=dbo_given) for n in sms]


def what_if_round_trip(*, step_us: float, round_trips: float, compute_us: float, comm_us: float, round_trip_us: float) -> WhatIf:
    """The step with every round trip taking round_trip_us: each of the N round trips moves from
    max(C, R) to max(C, X) (docs/analysis.md, "What-if estimates")."""
    delta = round_trips * (max(compute_us, comm_us) - max(compute_us, round_trip_us))
    return RoundTripWhatIf(
        step_us=step_us, predicted_us=max(0.0, step_us - delta), round_trip_us=round_trip_us, compute_us=compute_us,
        comm_us=comm_us,
    )  # fmt: skip


def what_if_no_handovers(*, step_us: float, handover_us: float) -> WhatIf:
    """The step without DBO's hand-over latency: at most that much shorter, where every hand-over is
    on the step's critical path (the GPU waits for it)."""
    return NoHandoversWhatIf(step_us=step_us, predicted_us=max(0.0, step_us - handover_us))


def what_if_comm_sms(*, step_us: float, sms_reserved: int, sms: int, crowded_us: float, compute_us: float) -> WhatIf | None:
    """The step with sms_reserved of the GPU's sms kept for comm: the comm exposed because it found no
    free SM (crowded, per step) hides, and the step's compute runs on the other SMs, longer by
    sms_reserved / (sms - sms_reserved) of it."""
    if not 0 < sms_reserved < sms:
        return None
    cost = compute_us * sms_reserved / (sms - sms_reserved)
    return CommSmsWhatIf(
        step_us=step_us,
        predicted_us=max(0.0, step_us - crowded_us + cost),
        sms_reserved=sms_reserved,
        sms=sms,
        crowded_us=crowded_us,
        compute_us=compute_us,
        cost_us=cost,
    )
