"""Roles of a disaggregated run (an AFD attention server and its FFN server): both traces call
themselves rank 0 of world size 1, so their names and ranks do not tell them apart; the bundle's
manifest does, or the traces' own evidence (analysis/afd/role_evidence.py). Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dbo_trace.analysis.afd.pair_compute import PairFigures
from dbo_trace.analysis.afd.gpu_sharing import GpuSharing, TimeSlicing, gpu_sharing
from dbo_trace.bundle import Manifest
from dbo_trace.trace.timeline import Intervals, Timeline

ATTENTION, FFN = "attention", "ffn"
ROLE_ORDER = (ATTENTION, FFN)


@dataclass(frozen=True)
class RolesInfo:
    """What the manifests and the traces say about the run's roles and their GPU."""

    roles: tuple[str, ...]  # the roles present, attention first
    shared_gpu: bool | None  # both roles on one GPU (their figures are not two GPUs')
    mps: bool | None  # MPS verified on (its daemon answered), off, or not known (sharing.py)
    ffn_window_restricted: bool = False  # the FFN's events cut to the attention's window
    missing: tuple[str, ...] = ()  # roles the manifest declares whose traces are not there
    sharing: GpuSharing | None = None
    time_slicing: TimeSlicing | None = None  # the attention's round trips against their transfer
    pair: PairFigures | None = None  # with both roles' traces

    def notes(self) -> list[RoleMissing | SharedGpu]:
        """The run's notes on its roles: a declared role without a trace, and both roles on one GPU
        (time-slicing, where seen, is the verdict's first reason: report.combine)."""
        out: list[RoleMissing | SharedGpu] = [RoleMissing(self.missing)] if self.missing else []
        if self.shared_gpu:
            out.append(
                SharedGpu(
                    roles=self.roles if len(self.roles) > 1 else ROLE_ORDER,  # a pair of roles, whichever were traced
                    mps=self.mps,
                    mps_claimed=self.sharing is not None and self.sharing.mps_claimed,
                    traced=len(self.roles) - len(self.missing),
                )
            )
        return out


@dataclass(frozen=True)
class RoleMissing:
    """The manifest declares these roles and their traces are not there: the round trips' parts on
    that side are not measured."""

    roles: tuple[str, ...]


@dataclass(frozen=True)
class SharedGpu:
    """Both roles ran on one GPU: a rank's figures are of a GPU it shared, and figures added over the
    ranks are one GPU's twice."""

    roles: tuple[str, ...]  # the pair's roles, attention first
    mps: bool | None  # MPS verified on, off, or not known
    mps_claimed: bool  # the manifest's mps says a control pipe existed (not a verification)
    traced: int  # roles with a trace


def wall_offset_us(tl: Timeline, reference: Timeline) -> float | None:
    """What to add to tl's ts to put it on reference's ts clock (both from baseTimeNanoseconds)."""
    if tl.base_time_ns is None or reference.base_time_ns is None:
        return None
    return (tl.base_time_ns - reference.base_time_ns) / 1000.0


def event_window(tl: Timeline) -> tuple[float, float] | None:
    starts = [float(a.start.min()) for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    ends = [float(a.end.max()) for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    return (min(starts), max(ends)) if starts else None


def _cut(iv: Intervals, lo: float, hi: float) -> tuple[Intervals, np.ndarray]:
    """The intervals overlapping [lo, hi), clipped to it, and the indices they came from."""
    keep = (iv.end > lo) & (iv.start < hi)
    start = np.maximum(iv.start[keep], lo)
    order = np.argsort(start, kind="stable")  # clipping may move an early start past a later one
    fields = (start, np.minimum(iv.end[keep], hi), iv.name[keep], iv.lane[keep], iv.correlation[keep])
    taken = np.flatnonzero(keep)[order]
    return Intervals(*(f[order] for f in fields)), taken


def restrict(tl: Timeline, lo: float, hi: float) -> Timeline:
    """The timeline's events that overlap [lo, hi) (tl's own ts clock), each cut to it: the FFN's
    last receive waits out the attention side's profiler export (seconds), which is not the run."""
    gpu, g_keep = _cut(tl.gpu, lo, hi)
    calls, _ = _cut(tl.calls, lo, hi)
    cpu, c_keep = _cut(tl.cpu, lo, hi)
    return tl.with_events(gpu, g_keep, calls, cpu, c_keep)


@dataclass(frozen=True)
class RoleFacts:
    """What the manifests and the traces say of the roles before the ranks are read together: the
    roles the manifests declare, whether the roles shared a GPU (and MPS), and whether the FFN's
    events were cut to the attention's window."""

    declared: tuple[str, ...]
    sharing: GpuSharing
    ffn_window_restricted: bool = False


def role_facts(manifests: list[Manifest], metadatas: list[dict[str, Any]], ffn_window_restricted: bool = False) -> RoleFacts:
    """metadatas: the traces' (their device ids)."""
    return RoleFacts(tuple(r for m in manifests for r in m.roles), gpu_sharing(manifests, metadatas), ffn_window_restricted)


def roles_info(
    facts: RoleFacts | None, present: list[str], *, time_slicing: TimeSlicing | None = None, pair: PairFigures | None = None
) -> RolesInfo | None:
    """The run's roles, once (analysis/context.py): present, the roles of the traces read; the manifest
    may declare more (a role whose traces were not written), which the note names as missing; with what
    the pair told together (time_slicing, pair). None without a role."""
    if not present or facts is None:
        return None
    sharing = facts.sharing
    ordered = tuple(
        sorted(set(present) | set(facts.declared), key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r))
    )
    return RolesInfo(
        ordered,
        sharing.shared_gpu,
        sharing.mps,
        ffn_window_restricted=facts.ffn_window_restricted,
        missing=tuple(r for r in ordered if r not in present),
        sharing=sharing,
        time_slicing=time_slicing,
        pair=pair,
    )
