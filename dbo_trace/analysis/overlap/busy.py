"""What each microbatch kept the GPU busy with: per microbatch (0 and 1) and phase (compute, comm),
the disjoint stretches its GPU activities cover. The Perfetto export draws one lane of each; the
unions are computed here, for every pair at once (one sort), so that the renderer only writes."""

from __future__ import annotations

import numpy as np

from dbo_trace.analysis.steps.attribution import PHASE_COMM, PHASE_COMPUTE
from dbo_trace.analysis.intervals import grouped_union, run_firsts

MICROBATCHES = (0, 1)
PHASES = (PHASE_COMPUTE, PHASE_COMM)


def microbatch_busy(
    *,
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    phase: np.ndarray,  # (n_gpu,) attribution.PHASE_*
    selected: np.ndarray,  # (n_gpu,) bool: the activities to count (in steps, in the exported window)
) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(microbatch, phase) -> (start, end) of the disjoint, sorted stretches that the selected
    activities of that microbatch and phase cover; every pair of MICROBATCHES x PHASES is there,
    empty where none ran. The same floats as intervals.union over each pair's activities alone."""
    out = {(u, p): (np.empty(0), np.empty(0)) for u in MICROBATCHES for p in PHASES}
    counted = selected & np.isin(ubatch, MICROBATCHES) & np.isin(phase, PHASES)
    at = np.flatnonzero(counted)
    if not len(at):
        return out
    key = ubatch[at].astype(np.int64) * (max(PHASES) + 1) + phase[at]  # one group per (microbatch, phase)
    group, s, e = grouped_union(key, start[at], end[at])
    heads = run_firsts(group)
    for k, head in enumerate(heads.tolist()):
        stop = int(heads[k + 1]) if k + 1 < len(heads) else len(group)
        u, p = divmod(int(group[head]), max(PHASES) + 1)
        out[(u, p)] = (s[head:stop], e[head:stop])
    return out
