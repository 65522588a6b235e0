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
             ran, it started only when that compute ended (analysis/held.py says why)
  peer       before all of these: the stretch lies in the part of the comm kernel that waited for
             the last rank to arrive at the same collective (analysis/peers.py)
Pure: arrays in, an Exposure out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis import classify as c

HOST, WAITING, NOTHING, UNKNOWN = "host", "waiting", "nothing", "unknown"
LATE_RECORD, CROWDED, HELD = "late_record", "crowded", "held"
PEER = "peer"
REASONS = (LATE_RECORD, CROWDED, HELD, HOST, WAITING, NOTHING, UNKNOWN, PEER)
REASON_SHORT = {
    PEER: "waiting for a peer rank",
    LATE_RECORD: "held back: late event record",
    CROWDED: "held back: no free SMs",
    HELD: "held back by other ubatch",
    HOST: "host (not launched)",
    WAITING: "waiting on a dependency",
    NOTHING: "nothing left in the step",
    UNKNOWN: "unknown",
}
REASON_TEXT = {
    PEER: "the comm kernel was waiting for a peer rank to arrive at the same collective",
    LATE_RECORD: "the comm waited on an event recorded after the other microbatch's compute was queued (late record)",
    CROWDED: "the comm was ready but could not start until the other microbatch's compute freed the SMs",
    HELD: "the comm was ready but started only when the other microbatch's compute ended (record with CUDA sync "
    "events to tell a late event record from an SM-hungry kernel)",
    HOST: "the other microbatch's compute had not been launched (host)",
    WAITING: "compute was queued but waited on a stream or event dependency",
    NOTHING: "no compute was left in the step to overlap (imbalance or the step's end)",
    UNKNOWN: "the compute's launch is not in the trace",
}


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
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    ubatch: np.ndarray,
    step: np.ndarray,
    launch_start: np.ndarray,
    held: dict[int, str] | None = None,
    peer_until: np.ndarray | None = None,
) -> Exposure:
    """seg_*: the exposed-comm stretches (comm running, no compute); the rest: every GPU activity.
    held: comm kernels held back past the other microbatch's compute (analysis/held.py) -> its cause,
    which is the stretch's reason: had the comm started when ready, that compute would have hidden it.
    peer_until: per GPU activity, until when the comm kernel waited for a peer rank (NaN: it did not;
    analysis/peers.py): that part of a stretch is PEER, the rest takes its reason as above."""
    held = held or {}
    by = {r: 0.0 for r in REASONS}
    kernels: list[int] = []
    lengths: list[float] = []
    reasons: list[str] = []
    comm = np.flatnonzero(kind == c.COMM)
    comm = comm[np.argsort(start[comm], kind="stable")]
    comm_start = start[comm]
    # Compute kernels grouped by step, each group in start order: a query looks at its own step only.
    compute = np.flatnonzero(kind == c.COMPUTE)
    compute = compute[np.lexsort((start[compute], step[compute]))]
    c_step = step[compute]
    for s, e in zip(seg_start, seg_end):
        mid = 0.5 * (s + e)
        j = int(np.searchsorted(comm_start, mid, side="right")) - 1
        k = -1
        for back in range(j, max(j - 16, -1), -1):  # comm kernels on several streams can overlap
            if end[comm[back]] >= mid:
                k = int(comm[back])
                break
        if k < 0:
            continue
        if peer_until is not None and peer_until[k] > s:
            waited = float(min(e, peer_until[k]) - s)
            by[PEER] += waited
            kernels.append(k)
            lengths.append(waited)
            reasons.append(PEER)
            s = s + waited
            if s >= e:
                continue
        reason = held.get(k) or _compute_state(k, s, compute, c_step, start, ubatch, step, launch_start)
        by[reason] += float(e - s)
        kernels.append(k)
        lengths.append(float(e - s))
        reasons.append(reason)
    return Exposure(float(np.sum(seg_end - seg_start)), by, tuple(kernels), tuple(lengths), tuple(reasons))


def _compute_state(
    k: int, s: float, compute: np.ndarray, c_step: np.ndarray, start: np.ndarray, ubatch: np.ndarray,
    step: np.ndarray, launch_start: np.ndarray,
) -> str:  # fmt: skip
    """The state, when the stretch began at s, of the compute that could have hidden comm kernel k:
    the next compute kernel of the other microbatch in k's step (compute: sorted by step, then start)."""
    lo, hi = np.searchsorted(c_step, [step[k], step[k] + 1]) if step[k] >= 0 else (0, len(compute))
    group = compute[lo:hi]
    later = group[start[group] >= s]
    if ubatch[k] >= 0:
        later = later[(ubatch[later] >= 0) & (ubatch[later] != ubatch[k])]
    if not len(later):
        return NOTHING
    launched = launch_start[later[np.argmin(start[later])]]
    return UNKNOWN if np.isnan(launched) else HOST if launched > s else WAITING
