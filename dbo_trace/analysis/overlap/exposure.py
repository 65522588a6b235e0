"""Why communication is exposed: for every stretch where comm runs and no compute does, what the
compute that could have hidden it was doing.

The compute that could hide a stretch is the next compute kernel to start at or after it, of the
other microbatch where microbatches are known (any compute otherwise), in the same step as the
comm. Its state when the stretch began names the cause:
  host       it had not been launched yet: the host (the other microbatch's thread, Python,
             the launch path) was late
  waiting    it had been launched but did not run: a stream waited on an event or a dependency
             (an event recorded after the compute it guards makes comm wait for all of it)
  nothing    there was none left in the step: the other microbatch had finished (imbalance
             between microbatches, or the step's last comm)
  unknown    its launch is not in the trace
  late-record, crowded, held
             the comm kernel itself was held back: ready while the other microbatch's compute
             ran, it started only when that compute ended (analysis/overlap/held.py says why)
  peer       before all of these: the stretch lies in the part of the comm kernel that waited for
             the last rank to arrive at the same collective (analysis/cross_rank/collective_waits.py)
Pure: arrays in, an Exposure out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from dbo_trace.analysis import classify as c

HOST, WAITING, NOTHING, UNKNOWN = "host", "waiting", "nothing", "unknown"
LATE_RECORD, CROWDED, HELD = "late_record", "crowded", "held"
PEER = "peer"
# Why an operation's time was exposed, in the order the exposure block adds them; the document writes them as they are.
ExposureReason = Literal["late_record", "crowded", "held", "host", "waiting", "nothing", "unknown", "peer"]
REASONS: tuple[ExposureReason, ...] = get_args(ExposureReason)
assert REASONS == (LATE_RECORD, CROWDED, HELD, HOST, WAITING, NOTHING, UNKNOWN, PEER)
@dataclass(frozen=True)
class Exposure:
    exposed_us: float
    by_reason_us: dict[str, float] = field(default_factory=dict)
    # per exposed stretch: the comm kernel it belongs to (index into the GPU activities), its length, its reason
    stretch_kernel: tuple[int, ...] = ()
    stretch_us: tuple[float, ...] = ()
    stretch_reason: tuple[str, ...] = ()

    @property
    def top(self) -> list[tuple[str, float]]:
        return sorted(((r, t) for r, t in self.by_reason_us.items() if t > 0), key=lambda x: -x[1])


def exposure(
    *,
    seg_start: np.ndarray,  # (n_stretches,) float64
    seg_end: np.ndarray,  # (n_stretches,) float64
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    step: np.ndarray,  # (n_gpu,) int64, -1 in none
    launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    held: dict[int, str] | None = None,
    peer_until: np.ndarray | None = None,  # (n_gpu,) float64, NaN: no wait
) -> Exposure:
    """seg_*: the exposed-comm stretches (comm running, no compute); the rest: every GPU activity.
    held: comm kernels held back past the other microbatch's compute (analysis/overlap/held.py) -> its cause,
    which is the stretch's reason: had the comm started when ready, that compute would have hidden it.
    peer_until: per GPU activity, until when the comm kernel waited for a peer rank (NaN: it did not;
    analysis/cross_rank/collective_waits.py): that part of a stretch is PEER, the rest takes its reason as above."""
    held = held or {}
    comm = np.flatnonzero(kind == c.COMM)
    comm = comm[np.argsort(start[comm], kind="stable")]
    seg_start, seg_end = np.asarray(seg_start, float), np.asarray(seg_end, float)
    # The comm kernel of each stretch: the latest-starting one at its middle still running there,
    # among the 16 before it (comm kernels on several streams can overlap).
    mid = 0.5 * (seg_start + seg_end)
    j = np.searchsorted(start[comm], mid, side="right") - 1
    of = np.full(len(mid), -1, np.int64)
    for back in range(16):
        at = j - back
        pending = (of < 0) & (at >= 0)
        if not pending.any():
            break
        hit = np.flatnonzero(pending)[end[comm[at[pending]]] >= mid[pending]]
        of[hit] = comm[at[hit]]
    found = np.flatnonzero(of >= 0)
    of_stretch = of[found]
    s0, e0 = seg_start[found], seg_end[found]
    # The part of a stretch its comm kernel spent waiting for a peer rank comes first; the rest takes
    # the reason of the compute state when that wait ended.
    waited = np.zeros(len(found))
    if peer_until is not None and len(found):
        until = peer_until[of_stretch]
        waited = np.where(until > s0, np.minimum(e0, until) - s0, 0.0)  # NaN: no wait
    s1 = s0 + waited
    state = _compute_states(of_stretch, s1, start, kind, ubatch, step, launch_start)
    # Per stretch up to two pieces, in stretch order: the wait for a peer (where there was one), then
    # the rest with its reason (a held kernel's cause, else the compute state), left out where the
    # wait filled the stretch. Each reason's total adds its pieces in that order (a running sum, as
    # the figures have always been added), in numpy rather than a Python step per stretch.
    code = _STATE_REASON[state]  # the reason a stretch takes from its compute state...
    if held and len(of_stretch):  # ...unless its comm kernel was held back: then the hold's cause
        keys = np.fromiter(held, np.int64, len(held))
        causes = np.array([REASONS.index(r) for r in held.values()], np.int64)
        order = np.argsort(keys, kind="stable")
        keys, causes = keys[order], causes[order]
        at = np.searchsorted(keys, of_stretch).clip(0, len(keys) - 1)
        code = np.where(keys[at] == of_stretch, causes[at], code)
    kept = np.column_stack((waited > 0, ~((waited > 0) & (s1 >= e0)))).ravel()
    piece_kernel = np.repeat(of_stretch, 2)[kept]
    piece_us = np.column_stack((waited, e0 - s1)).ravel()[kept]
    piece_reason = np.column_stack((np.full(len(code), REASONS.index(PEER)), code)).ravel()[kept]
    by: dict[str, float] = {r: 0.0 for r in REASONS}
    for i in np.unique(piece_reason).tolist():
        by[REASONS[i]] = float(np.cumsum(piece_us[piece_reason == i])[-1])
    reasons = tuple(np.array(REASONS, object)[piece_reason].tolist())
    return Exposure(float(np.sum(seg_end - seg_start)), by, tuple(piece_kernel.tolist()), tuple(piece_us.tolist()), reasons)


STATES = (HOST, WAITING, NOTHING, UNKNOWN)
_STATE_REASON = np.array([REASONS.index(r) for r in STATES], np.int64)  # STATES[i] as an index into REASONS


def _compute_states(
    k: np.ndarray, s: np.ndarray, start: np.ndarray, kind: np.ndarray, ubatch: np.ndarray, step: np.ndarray,
    launch_start: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """For each comm kernel k[i] and the time s[i] its stretch began, the state (index into STATES) of
    the compute that could have hidden it: the first compute kernel to start at or after s[i] in k's
    step (anywhere, where k is in no step), of another microbatch where k's is known; on equal starts
    the lowest step, then the lowest index. One sorted merge of queries and candidates per microbatch
    of the queries (a handful), not a scan of the step per stretch."""
    out = np.full(len(k), STATES.index(NOTHING), np.int64)
    compute = np.flatnonzero(kind == c.COMPUTE)
    compute = compute[np.lexsort((start[compute], step[compute]))]  # the order ties are broken in
    for u in np.unique(ubatch[k]).tolist():
        q = np.flatnonzero(ubatch[k] == u)
        cand = compute if u < 0 else compute[(ubatch[compute] >= 0) & (ubatch[compute] != u)]
        for stepped in (True, False):
            qq = q[(step[k[q]] >= 0) == stepped]
            if len(qq) and len(cand):
                pick = _first_at_or_after(step[cand] if stepped else None, start[cand], step[k[qq]], s[qq])
                got = pick >= 0
                launched = launch_start[cand[pick[got]]]
                host_or_waiting = np.where(launched > s[qq[got]], STATES.index(HOST), STATES.index(WAITING))
                out[qq[got]] = np.where(np.isnan(launched), STATES.index(UNKNOWN), host_or_waiting)
    return out


def _first_at_or_after(c_group: np.ndarray | None, c_start: np.ndarray, q_group: np.ndarray, q_start: np.ndarray) -> np.ndarray:
    """For each query, the position of the first candidate (in the candidates' given order) of its
    group (any group where c_group is None) that starts at or after the query: the earliest such start,
    the earliest position on ties. -1: none. Queries and candidates are sorted together once."""
    n_c = len(c_start)
    if c_group is None:
        c_group, q_group = np.zeros(n_c, np.int64), np.zeros(len(q_start), np.int64)
    group = np.r_[c_group, q_group]
    t = np.r_[c_start, q_start]
    is_candidate = np.r_[np.ones(n_c, np.int8), np.zeros(len(q_start), np.int8)]  # a query sorts before an equal start
    position = np.r_[np.arange(n_c), np.zeros(len(q_start), np.int64)]
    order = np.lexsort((position, is_candidate, t, group))
    # At every place in that order, the place of the next candidate at or after it.
    at = np.where(is_candidate[order] == 1, np.arange(len(order)), len(order))
    next_at = np.minimum.accumulate(at[::-1])[::-1]
    places = np.empty(len(order), np.int64)
    places[order] = np.arange(len(order))
    nxt = next_at[places[n_c:]]
    hit = order[np.minimum(nxt, len(order) - 1)]
    return np.where((nxt < len(order)) & (group[hit] == q_group), hit, -1)
