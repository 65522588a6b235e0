"""A disaggregated (AFD) run: the attention rank's round trips, their labels and the FFN's parts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.model import PhaseReport, RankDetail, RankReport, StepReports, StepTable
from dbo_trace.analysis.roles import FFN, wall_offset_us
from dbo_trace.analysis.roundtrips import AfdRoundTrips, data_plane, ffn_parts, sendrecv_kernels
from dbo_trace.analysis.roundtrips import round_trips as afd_round_trips
from dbo_trace.analysis.roundtrips import summarize as summarize_round_trips
from dbo_trace.analysis.verdict import Verdict, with_round_trip_share, with_round_trips


def rank_round_trips(d: RankDetail, steps: StepTable) -> AfdRoundTrips | None:
    """The disaggregated round trips of an attention rank (analysis/roundtrips.py)."""
    tl, att = d.timeline, d.attribution
    p2p = sendrecv_kernels(tl.names, tl.gpu.name, d.kernel_kind)
    data = data_plane(is_p2p=p2p, kind=d.kernel_kind, stream=tl.gpu.lane, replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH)
    rows, told, unpaired = afd_round_trips(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, data=data, step=att.gpu_step, ubatch=att.gpu_ubatch
    )
    in_step = data & (att.gpu_step >= 0)
    kernels_per_step = np.unique(att.gpu_step[in_step], return_counts=True)[1]
    return summarize_round_trips(
        rows, told, unpaired, data_kernels=int(data.sum()), control_kernels=int((p2p & ~data).sum()),
        step_compute_us=dict(zip(steps.index.tolist(), steps.metrics["compute_busy_us"].tolist())), layers=att.layers,
        kernels_per_step=kernels_per_step,
    )  # fmt: skip


def _afd_labels(afd: AfdRoundTrips, steps: StepReports, phases: list[PhaseReport]) -> tuple[StepReports, list[PhaseReport]]:
    """A disaggregated rank's steps and phases labelled as its run is (verdict.with_round_trip_share):
    by the share of their own round trips' time under the other microbatch's compute, not by kernel
    overlap, which the sends and receives on the compute stream make 0% by construction."""
    rows = afd.rows
    rt = rows.round_trip_us
    table = steps.table
    n = int(table.index.max()) + 1 if len(table) else 0
    ok = (rows.step >= 0) & (rows.step < n)
    total = np.bincount(rows.step[ok], weights=rt[ok], minlength=n)
    hidden = np.bincount(rows.step[ok], weights=rows.hidden_us[ok], minlength=n)

    def share(ix: list[int]) -> float | None:
        t = float(total[ix].sum()) if ix else 0.0
        return float(hidden[ix].sum()) / t if t > 0 else None

    steps = steps.with_round_trip_share([share([i]) for i in table.index.tolist()], afd.microbatched)
    phases = [
        p if p.verdict is None else replace(
            p,
            verdict=with_round_trip_share(
                p.verdict, share(table.index[table.steady_or_all(table.of_phase(p.phase))].tolist()), afd.microbatched
            ),
        )
        for p in phases
    ]  # fmt: skip
    return steps, phases


def _run_round_trips(v: Verdict, ranks: list[RankReport]) -> Verdict:
    """The run's verdict speaks of the round trips where one attention rank measured them."""
    afd = [r.afd for r in ranks if r.afd is not None]
    return with_round_trips(v, afd[0]) if len(afd) == 1 else v


def with_ffn_parts(ranks: list[RankReport]) -> list[RankReport]:
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
        parts = ffn_parts(r.afd.rows, ftl.gpu.start[idx] + offset, ftl.gpu.end[idx] + offset)
        out.append(replace(r, afd=replace(r.afd, parts=parts, ffn_matched=int(parts.matched.sum()))))
    return out
