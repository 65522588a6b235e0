"""The k-th step of every rank laid out on one time axis for a picture: each rank's compute and comm
kernels on their own lanes, shifted onto the ranks' shared clock, and each comm kernel's wait for a
peer rank marked. Pure: a Report in, a RanksView out; renderers draw it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.model import Report
from dbo_trace.render.pictures.step_view import Bar


@dataclass(frozen=True)
class RanksView:
    position: int  # the k-th reported step of every rank (0-based)
    start: float  # on the shared axis (the shared clock less its earliest offset), us
    end: float
    lanes: list[str]  # top to bottom: per rank its CPU lane (launch calls), its compute lane, then its comm lane
    bars: list[Bar] = field(default_factory=list)  # times relative to start
    waits: list[tuple[float, float, str, int]] = field(default_factory=list)  # (start, end, lane, rank waited for)
    title: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start


def ranks_step_view(report: Report, position: int) -> RanksView:
    """Every rank's step at this position (ranks with fewer steps are left out)."""
    cross = report.cross_rank
    ranks = [r for r in report.ranks if r.detail is not None and position < len(r.steps)]
    shift = {r.rank: cross.shift_us(r.rank) if cross is not None else 0.0 for r in ranks}
    lo = min((r.steps[position].start_us + shift[r.rank] for r in ranks), default=0.0)
    hi = max((r.steps[position].end_us + shift[r.rank] for r in ranks), default=0.0)
    aligned = cross is not None and cross.alignment is not None and cross.alignment.aligned
    how = cross.alignment.method if aligned and cross is not None and cross.alignment is not None else "not aligned"
    lanes: list[str] = []
    bars: list[Bar] = []
    waits: list[tuple[float, float, str, int]] = []
    spans = cross.waits.wait_spans if cross is not None and cross.waits is not None else {}
    for r in ranks:
        d, step, s = r.detailed(), r.steps[position], shift[r.rank]
        cpu_lane, compute_lane, comm_lane = f"rank {r.rank} CPU launches", f"rank {r.rank} compute", f"rank {r.rank} comm"
        lanes += [cpu_lane, compute_lane, comm_lane]
        tl = d.timeline
        calls = np.flatnonzero(d.attribution.call_step == step.index)
        bars += [
            Bar(
                float(tl.calls.start[i]) + s - lo,
                float(tl.calls.end[i]) + s - lo,
                cpu_lane,
                tl.names[tl.calls.name[i]],
                int(d.attribution.call_ubatch[i]),
                "launch",
            )
            for i in calls
        ]
        sel = np.flatnonzero(d.attribution.gpu_step == step.index)
        for i in sel:
            kind = int(d.kernel_kind[i])
            bars.append(
                Bar(
                    float(tl.gpu.start[i]) + s - lo,
                    float(tl.gpu.end[i]) + s - lo,
                    comm_lane if kind == c.COMM else compute_lane,
                    tl.names[tl.gpu.name[i]],
                    int(d.attribution.gpu_ubatch[i]),
                    c.KIND_NAMES[kind],
                )
            )
        if r.rank in spans:
            begin, end, peer = spans[r.rank]
            inside = (begin >= step.start_us) & (begin < step.end_us)
            waits += [
                (float(b) + s - lo, float(e) + s - lo, comm_lane, int(p))
                for b, e, p in zip(begin[inside], end[inside], peer[inside])
            ]
    title = f"step {position + 1} of every rank on one time axis ({how})"
    return RanksView(position, lo, hi, lanes, bars=bars, waits=waits, title=title)
