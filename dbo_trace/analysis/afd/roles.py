"""Roles of a disaggregated run (an AFD attention server and its FFN server): both traces call
themselves rank 0 of world size 1, so their names and ranks do not tell them apart; the bundle's
manifest does, or the traces' own evidence (analysis/afd/role_evidence.py). Pure functions."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dbo_trace.analysis.afd.pair_compute import PairFigures
from dbo_trace.analysis.afd.gpu_sharing import GpuSharing, TimeSlicing, gpu_sharing
from dbo_trace.bundle import Manifest
from dbo_trace.trace.timeline import CommArgs, Intervals, Timeline

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
    args = tl.gpu_args
    if args is not None:
        args = CommArgs(args.collective[g_keep], args.group[g_keep], args.nelems[g_keep], args.seq[g_keep])
    return replace(
        tl, gpu=gpu, gpu_is_copy=tl.gpu_is_copy[g_keep], calls=calls, cpu=cpu, cpu_is_annotation=tl.cpu_is_annotation[c_keep],
        gpu_args=args, launch=tl.launch.take(g_keep) if tl.launch is not None else None,
    )  # fmt: skip


def roles_info(manifests: list[Manifest], present: list[str], metadatas: list[dict[str, Any]] | None = None) -> RolesInfo | None:
    """present: the roles of the traces read; the manifest may declare more (a role whose traces
    were not written), which the note names as missing. metadatas: the traces' (their device ids)."""
    if not present:
        return None
    declared = [r for m in manifests for r in m.roles]
    sharing = gpu_sharing(manifests, metadatas or [])
    ordered = tuple(sorted(set(present) | set(declared), key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r)))
    return RolesInfo(
        ordered,
        sharing.shared_gpu,
        sharing.mps,
        missing=tuple(r for r in ordered if r not in present),
        sharing=sharing,
    )
