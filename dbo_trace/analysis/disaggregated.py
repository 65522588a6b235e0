"""A disaggregated (AFD) run: the attention rank's round trips, their shares by step and the FFN's parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.model import RankAnalysis, RankDetail, StepTable
from dbo_trace.analysis.roles import FFN, RolesInfo, wall_offset_us
from dbo_trace.analysis.roundtrips import AfdRoundTrips, data_plane, ffn_parts, sendrecv_kernels
from dbo_trace.analysis.roundtrips import round_trips as afd_round_trips
from dbo_trace.analysis.roundtrips import summarize as summarize_round_trips
from dbo_trace.analysis.pair import pair_figures
from dbo_trace.analysis.sharing import TimeSlicing, time_slicing
from dbo_trace.analysis.verdict import AfdShare


def rank_round_trips(d: RankDetail, steps: StepTable) -> AfdRoundTrips | None:
    """The disaggregated round trips of an attention rank (analysis/roundtrips.py)."""
    tl, att = d.timeline, d.attribution
    p2p = sendrecv_kernels(tl.names, tl.gpu.name, d.kernel_kind)
    data = data_plane(is_p2p=p2p, kind=d.kernel_kind, stream=tl.gpu.lane, replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH)
    rows, told, unpaired, told_ub = afd_round_trips(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, data=data, step=att.gpu_step, ubatch=att.gpu_ubatch
    )
    in_step = data & (att.gpu_step >= 0)
    kernels_per_step = np.unique(att.gpu_step[in_step], return_counts=True)[1]
    found = summarize_round_trips(
        rows, told, unpaired, data_kernels=int(data.sum()), control_kernels=int((p2p & ~data).sum()),
        step_compute_us=dict(zip(steps.index.tolist(), steps.metrics["compute_busy_us"].tolist())), layers=att.layers,
        kernels_per_step=kernels_per_step,
    )  # fmt: skip
    return None if found is None else replace(found, kernel_ubatch=told_ub)


class RoundTripShares:
    """A disaggregated rank's round trips by step: what share of a step's (or a phase's) round-trip
    time the other microbatch's compute hid. Its steps and phases are judged by it, as the run is,
    not by kernel overlap, which the sends and receives on the compute stream make 0% by construction."""

    def __init__(self, afd: AfdRoundTrips, table: StepTable) -> None:
        rows = afd.rows
        n = int(table.index.max()) + 1 if len(table) else 0
        ok = (rows.step >= 0) & (rows.step < n)
        self.total = np.bincount(rows.step[ok], weights=rows.round_trip_us[ok], minlength=n)  # (n,) by step index
        self.hidden = np.bincount(rows.step[ok], weights=rows.hidden_us[ok], minlength=n)
        self.table = table
        self.microbatched = afd.microbatched

    def of(self, positions: np.ndarray) -> AfdShare:
        """Over the steps at these positions of the table."""
        ix = self.table.index[positions]
        t = float(self.total[ix].sum()) if len(ix) else 0.0
        return AfdShare(float(self.hidden[ix].sum()) / t if t > 0 else None, self.microbatched)

    def by_step(self) -> list[AfdShare]:
        ix = self.table.index
        return [
            AfdShare(float(h) / float(t) if t > 0 else None, self.microbatched)
            for h, t in zip(self.hidden[ix].tolist(), self.total[ix].tolist())
        ]


def time_slicing_of(ranks: Sequence[RankAnalysis], roles: RolesInfo | None) -> TimeSlicing | None:
    """The evidence that the roles' CUDA contexts took turns on their one GPU (no MPS): the
    attention's round trips against their transfer (with_pair, analysis/sharing.py), where it holds.
    The verdict's first reason, and its next step the MPS control daemon."""
    sliced = roles.time_slicing if roles is not None else None
    return sliced if sliced is not None and sliced.sliced and sliced.ratio is not None else None


def with_pair(roles: RolesInfo | None, ranks: list[RankAnalysis]) -> RolesInfo | None:
    """The roles with what the two sides tell together: whether they time-slice the GPU (the attention's
    round trips against their transfer, analysis/sharing.py) and, with the FFN's trace, its compute per
    step and per round trip and each side's GPU busy over the attention's steps (analysis/pair.py)."""
    att = next((r for r in ranks if r.afd is not None and r.detail is not None), None)
    if roles is None or att is None or att.afd is None or att.detail is None:
        return roles
    rows, parts, tl = att.afd.rows, att.afd.parts, att.detail.timeline
    sliced = time_slicing(
        send_us=rows.send_end - rows.send_start, receive_us=rows.recv_end - rows.recv_start,
        round_trip_us=rows.round_trip_us, ffn_compute_us=parts.compute_us if parts is not None else None,
        sharing=roles.sharing,
    )  # fmt: skip
    ffn = next((r for r in ranks if r.role == FFN and r.detail is not None), None)
    offset = wall_offset_us(ffn.detail.timeline, tl) if ffn is not None and ffn.detail is not None else None
    if ffn is None or ffn.detail is None or offset is None:
        return replace(roles, time_slicing=sliced)
    ftl, table = ffn.detail.timeline, att.steps.table
    compute = ffn.detail.kernel_kind == c.COMPUTE
    pair = pair_figures(
        step_start=table.start_us, step_end=table.start_us + table.period_us, attention=(tl.gpu.start, tl.gpu.end),
        ffn=(ftl.gpu.start + offset, ftl.gpu.end + offset),
        ffn_compute=(ftl.gpu.start[compute] + offset, ftl.gpu.end[compute] + offset),
        round_trip_compute_us=parts.compute_us if parts is not None else None,
        round_trip_queue_us=parts.queue_us if parts is not None else None, round_trips_per_step=att.afd.per_step,
    )  # fmt: skip
    return replace(roles, time_slicing=sliced, pair=pair)


def with_ffn_parts(ranks: list[RankAnalysis]) -> list[RankAnalysis]:
    """The attention ranks' round trips with their parts from the FFN rank's data-plane kernels, put
    on the attention's clock (both traces' baseTimeNanoseconds: one host's time.time_ns)."""
    ffn = next((r for r in ranks if r.role == FFN and r.detail is not None), None)
    if ffn is None:
        return ranks
    fd = ffn.detailed()
    ftl = fd.timeline
    data = data_plane(
        is_p2p=sendrecv_kernels(ftl.names, ftl.gpu.name, fd.kernel_kind),
        kind=fd.kernel_kind,
        stream=ftl.gpu.lane,
        replayed=fd.launch_kind == c.CALL_GRAPH_LAUNCH,
    )
    out = []
    for r in ranks:
        offset = wall_offset_us(ftl, r.detail.timeline) if r.afd is not None and r.detail is not None else None
        if r.afd is None or offset is None:
            out.append(r)
            continue
        idx = np.flatnonzero(data)
        idx = idx[np.argsort(ftl.gpu.start[idx], kind="stable")]
        compute = fd.kernel_kind == c.COMPUTE
        parts = ffn_parts(
            r.afd.rows, ftl.gpu.start[idx] + offset, ftl.gpu.end[idx] + offset,
            (ftl.gpu.start[compute] + offset, ftl.gpu.end[compute] + offset),
        )  # fmt: skip
        out.append(replace(r, afd=replace(r.afd, parts=parts, ffn_matched=int(parts.matched.sum()))))
    return out
