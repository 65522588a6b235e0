"""Disaggregated round trips (attention/FFN disaggregation, AFD): the attention side sends each
layer's hidden states to the FFN server and receives the FFN's output back, with two NCCL SendRecv
kernels on the compute stream, so no comm kernel ever overlaps a compute kernel. What DBO can hide
is the round trip itself, from the send's start to its receive's end, under the OTHER microbatch's
attention compute (docs/analysis.md, "Disaggregated round trips").

Pure functions over the attention rank's arrays (and, for the parts, the FFN rank's kernels on the
same clock); linear in kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv

SENDRECV = re.compile(r"sendrecv|ncclDevKernel_Send|ncclDevKernel_Recv|ncclKernel_Send|ncclKernel_Recv", re.IGNORECASE)

# How a step's round trips were given their microbatch
TOLD_THREADS = "launching threads"  # each kernel's own microbatch (the attribution)
TOLD_ORDER = "kernel order"  # DBO's send/yield/receive order: S0 S1 (R0 S0 R1 S1)... R0 R1
TOLD_ONE = "one microbatch"  # send and receive back to back: no DBO in the step
TOLD_NOT = "not told apart"  # two microbatches' kernels whose order fits neither pattern

CLOCK_TOLERANCE_US = 5.0
MATCH_NEARLY = 0.9  # a phase of the FFN's kernels that matches this share of the best phase's matches competes  # one host's processes share time.time_ns to a few microseconds


@dataclass(frozen=True)
class RoundTripRows:
    """One entry per round trip, in step and time order (the trace clock of the attention rank)."""

    step: np.ndarray  # (n,) int64: the attribution's step index
    ubatch: np.ndarray  # (n,) int64: 0 / 1, or -1 with one microbatch or where not told apart
    send_start: np.ndarray  # (n,) float64
    send_end: np.ndarray
    recv_start: np.ndarray
    recv_end: np.ndarray
    hidden_us: np.ndarray  # (n,) float64: the other microbatch's compute inside the round trip (union)
    # (n,) float64: the host's lag, from the send kernel's end to the start of the receive kernel's
    # launch call (an eager step launches the receive only once its thread is back from the yield;
    # a graph replay launched it before the send: 0), and of hidden_us, the part inside that lag
    host_lag_us: np.ndarray | None = None
    lag_hidden_us: np.ndarray | None = None
    recv_index: np.ndarray | None = None  # (n,) int64: each receive kernel's GPU activity index
    # (n,) float64: the time in the round trip during which the other microbatch's round trips of the
    # step were in flight (their union, each less its host's lag), and of it the part inside the host's lag
    beside_us: np.ndarray | None = None
    lag_beside_us: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.step)

    @property
    def round_trip_us(self) -> np.ndarray:
        out: np.ndarray = self.recv_end - self.send_start
        return out

    @property
    def lag_us(self) -> np.ndarray:
        return self.host_lag_us if self.host_lag_us is not None else np.zeros(len(self.step))

    @property
    def rest_us(self) -> np.ndarray:
        """The round trip less the host's lag: what the criterion and the hidden share are of."""
        out: np.ndarray = self.round_trip_us - self.lag_us
        return out

    @property
    def beside(self) -> np.ndarray:
        return self.beside_us if self.beside_us is not None else np.zeros(len(self.step))

    @property
    def rest_overlapped_us(self) -> np.ndarray:
        """Of the rest, the time under the other microbatch's compute or beside its round trip (the two
        never meet on one stream: a microbatch computes only between its receive and its next send)."""
        lag: np.ndarray = self.lag_beside_us if self.lag_beside_us is not None else np.zeros(len(self.step))
        out: np.ndarray = np.minimum(self.rest_hidden_us + self.beside - lag, self.rest_us)
        return out

    @property
    def rest_hidden_us(self) -> np.ndarray:
        """The other microbatch's compute inside the rest (hidden_us less its part inside the lag)."""
        lag: np.ndarray = self.lag_hidden_us if self.lag_hidden_us is not None else np.zeros(len(self.step))
        out: np.ndarray = self.hidden_us - lag
        return out


@dataclass(frozen=True)
class FfnParts:
    """Per round trip, its parts on the shared clock, from the FFN's matching receive [f0, f1] and
    send [g0, g1]; NaN where no FFN kernel matched."""

    matched: np.ndarray  # (n,) bool
    transfer_us: np.ndarray  # send start -> FFN has the data, and FFN starts sending -> receive end
    ffn_us: np.ndarray  # FFN compute and queueing: FFN receive end -> FFN send start
    wait_us: np.ndarray  # the attention receive kernel's time before the FFN began sending back
    late_us: np.ndarray  # of transfer_us, the FFN sending back before the attention's receive began (its host was late)
    compute_us: np.ndarray | None = None  # of ffn_us, the FFN's compute kernels' busy time (None: not given)
    queue_us: np.ndarray | None = None  # of ffn_us, the rest: the FFN queueing or waiting
    # (n, 4) float64: the matched FFN receive's start and end and its send's start and end, unclipped,
    # on the attention's clock (NaN where none matched): the pipeline's visits (analysis/afd/pipeline.py)
    ffn_kernels: np.ndarray | None = None


@dataclass(frozen=True)
class AfdRoundTrips:
    """The rank's disaggregated round trips and their summary (docs/analysis.md)."""

    rows: RoundTripRows
    data_kernels: int  # SendRecv kernels on a stream that also ran compute (the data plane)
    control_kernels: int  # the other SendRecv kernels (the control plane: DP metadata)
    unpaired: int  # data kernels left without a partner (a step cut by the profiler)
    steps: int  # steps with round trips
    per_step: float  # median round trips per step
    per_step_kernels: float  # median data-plane kernels per step
    layers: int | None
    microbatches_told: dict[str, int]  # steps by how their microbatches were told apart
    microbatched: bool  # some step ran two microbatches
    median_us: float  # median round trip
    hidden_us: float  # summed over round trips
    total_us: float
    host_lag_total_us: float  # summed over round trips: the host's lag (send end to the receive's launch call)
    lag_hidden_us: float  # of hidden_us, the part inside the host's lag
    compute_per_microbatch_us: float | None  # median over steps: step compute busy / round trips
    median_exposed_us: float  # median of (round trip - hidden): what the compute did not cover
    parts: FfnParts | None = None  # with the FFN's trace
    ffn_matched: int = 0
    layers_inferred: bool = False  # layers from a microbatch's round trips per step (one FFN per layer)
    host_lag_median_us: float = 0.0  # median over round trips
    lag_op: tuple[str, float] | None = None  # the CPU op that held the receive's launching thread, its share of the lag
    # (n_gpu,) int8: each GPU activity's microbatch as the round trips told it (a data kernel's round
    # trip's; a compute kernel's by its thread or DBO's order), -1 elsewhere: what a picture draws by
    kernel_ubatch: np.ndarray | None = None

    @property
    def per_layer(self) -> float | None:
        return self.per_step / self.layers if self.layers else None

    @property
    def hidden_share(self) -> float | None:
        """Share of the round trips' time, less the host's lag, during which the attention GPU
        computed the other microbatch's work (time-weighted over every round trip)."""
        rest = self.total_us - self.host_lag_total_us
        return (self.hidden_us - self.lag_hidden_us) / rest if rest > 0 else None

    @property
    def beside_total_us(self) -> float:
        """Summed over round trips: the time beside the other microbatch's round trips."""
        return float(self.rows.beside.sum())

    @property
    def overlapped_share(self) -> float | None:
        """Share of the round trips' time, less the host's lag, under the other microbatch's compute or
        beside its round trip: the label's basis (docs/analysis.md, "The step as a pipeline")."""
        rest = self.total_us - self.host_lag_total_us
        return float(self.rows.rest_overlapped_us.sum()) / rest if rest > 0 else None

    @property
    def criterion_ratio(self) -> float | None:
        """Per-microbatch compute / the round trip's exposed time; >= 1: one microbatch's compute
        could cover the other's round trip. None with one microbatch (no other compute to hide it)."""
        if not self.microbatched or self.compute_per_microbatch_us is None or self.median_exposed_us <= 0:
            return None
        return self.compute_per_microbatch_us / self.median_exposed_us

    @property
    def criterion_met(self) -> bool | None:
        ratio = self.criterion_ratio
        return None if ratio is None else ratio >= 1.0

    @property
    def median_receive_us(self) -> float:
        return float(np.median(self.rows.recv_end - self.rows.recv_start))

    def median_part(self, name: str) -> float | None:
        part = getattr(self.parts, name) if self.parts is not None else None
        if self.parts is None or part is None or not self.parts.matched.any():
            return None
        return float(np.median(part[self.parts.matched]))


def sendrecv_kernels(names: list[str], name: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """(n_gpu,) bool: communication kernels named as NCCL point-to-point (SendRecv) kernels."""
    hits = np.array([bool(SENDRECV.search(n)) for n in names], bool) if names else np.zeros(0, bool)
    out: np.ndarray = (kind == c.COMM) & (hits[name] if len(name) else np.zeros(0, bool))
    return out


def data_plane(*, is_p2p: np.ndarray, kind: np.ndarray, stream: np.ndarray, replayed: np.ndarray) -> np.ndarray:
    """(n_gpu,) bool: the point-to-point kernels on a stream that also ran compute kernels (AFD's
    data plane runs on the compute stream; torch.distributed's control-plane sends on its own), or
    replayed from a CUDA graph (captured with the model; a graph may place its nodes on several
    internal streams). replayed: (n_gpu,) bool."""
    compute_streams = np.unique(stream[kind == c.COMPUTE])
    out: np.ndarray = is_p2p & (np.isin(stream, compute_streams) | replayed)
    return out


def _dbo_order(n: int) -> np.ndarray | None:
    """Microbatch and role (0 send, 1 receive) of each of a step's n data kernels in DBO's order,
    where each microbatch sends, yields to the other and receives after the other's send:
    S0 S1 (R0 S0 R1 S1) x (L-1) R0 R1. None where n does not fit it."""
    if n < 4 or n % 4:
        return None
    layers = n // 4
    ub = [0, 1] + [0, 0, 1, 1] * (layers - 1) + [0, 1]
    role = [0, 0] + [1, 0, 1, 0] * (layers - 1) + [1, 1]
    return np.array([ub, role], np.int64)


def _pairs_in_order(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One microbatch's data kernels in time order: send, receive, send, receive ..."""
    k = len(idx) // 2 * 2
    return idx[0:k:2], idx[1:k:2], len(idx) - k


def round_trips(
    *,
    start: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    data: np.ndarray,
    step: np.ndarray,
    ubatch: np.ndarray,
    launch_start: np.ndarray | None = None,
) -> tuple[RoundTripRows, dict[str, int], int, np.ndarray]:
    """Every round trip of every step. start, end, kind, step, ubatch: (n_gpu,) per GPU activity;
    data: (n_gpu,) bool, the data-plane kernels (data_plane). A step's data kernels are paired per
    microbatch by order (send, then its receive); microbatches come from the launching threads where
    every data kernel has one, else from DBO's kernel order where compute ran between the step's first
    two data kernels (one microbatch's send, then the other's attention), else the step is one
    microbatch. Returns the rows, the steps by how they were told apart, the unpaired kernels, and
    each activity's microbatch as told here ((n_gpu,) int8, -1 where none). launch_start: (n_gpu,) the
    start of each activity's launching call (NaN unknown): the host's lag before each receive."""
    order = np.lexsort((start, step))
    sel = order[data[order] & (step[order] >= 0)]
    compute = np.flatnonzero(kind == c.COMPUTE)
    compute = compute[np.lexsort((start[compute], step[compute]))]
    c_step = step[compute]
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("step", "ub", "s", "r")}
    told: dict[str, int] = {}
    unpaired = 0
    hidden: list[float] = []
    lag_hidden: list[float] = []
    beside: list[float] = []
    lag_beside: list[float] = []
    told_ub = np.full(len(start), -1, np.int8)
    bounds = np.flatnonzero(np.diff(step[sel])) + 1
    for group in np.split(sel, bounds) if len(sel) else []:
        s = int(step[group[0]])
        lo, hi = np.searchsorted(c_step, [s, s + 1])
        comp = compute[lo:hi]
        comp_ub = ubatch[comp].astype(np.int64)
        ubs = ubatch[group].astype(np.int64)
        if (ubs >= 0).all() and len(np.unique(ubs)) == 2:
            how = TOLD_THREADS
            sends, recvs, ub = [], [], []
            for u in np.unique(ubs):
                a, b, left = _pairs_in_order(group[ubs == u])
                sends.append(a)
                recvs.append(b)
                ub.append(np.full(len(a), u))
                unpaired += left
            send, recv, rt_ub = np.concatenate(sends), np.concatenate(recvs), np.concatenate(ub)
        else:
            between = len(group) >= 2 and bool(
                ((start[comp] >= end[group[0]]) & (start[comp] < start[group[1]])).any()
            )
            pattern = _dbo_order(len(group)) if between else None
            if pattern is not None:
                how = TOLD_ORDER
                ub_k, role = pattern
                send_ix = [np.flatnonzero((ub_k == u) & (role == 0)) for u in (0, 1)]
                recv_ix = [np.flatnonzero((ub_k == u) & (role == 1)) for u in (0, 1)]
                send = np.concatenate([group[i] for i in send_ix])
                recv = np.concatenate([group[i] for i in recv_ix])
                rt_ub = np.concatenate([np.zeros(len(send_ix[0]), np.int64), np.ones(len(send_ix[1]), np.int64)])
                comp_ub = _compute_ubatch_by_order(start[comp], start[group], end[group], ub_k, role)
            else:
                how = TOLD_NOT if between else TOLD_ONE
                send, recv, left = _pairs_in_order(group)
                unpaired += left
                rt_ub = np.full(len(send), -1, np.int64)
                comp_ub = np.full(len(comp), -1, np.int64)
        told[how] = told.get(how, 0) + 1
        told_ub[comp] = comp_ub
        told_ub[send], told_ub[recv] = rt_ub, rt_ub
        o = np.argsort(start[send], kind="stable")
        send, recv, rt_ub = send[o], recv[o], rt_ub[o]
        # each round trip in flight: its send's start to its receive's end, less the host's lag (the
        # answer waiting for its receive's launch is no work of the FFN's or the wire's): two pieces
        lag_ends = np.array(
            [_lag_end(end[si], start[ri], launch_start[ri] if launch_start is not None else np.nan) for si, ri in zip(send, recv)]
        )
        flight_lo = np.concatenate([start[send], lag_ends])
        flight_hi = np.concatenate([end[send], end[recv]])
        for k, (si, ri, u) in enumerate(zip(send.tolist(), recv.tolist(), rt_ub.tolist())):
            other = (comp_ub >= 0) & (comp_ub != u)
            other_rt = np.tile((rt_ub >= 0) & (rt_ub != u), 2)
            hidden.append(_covered(start[si], end[ri], start[comp], end[comp], other) if u >= 0 else 0.0)
            beside.append(_covered(start[si], end[ri], flight_lo, flight_hi, other_rt) if u >= 0 else 0.0)
            lag_end = float(lag_ends[k])
            lagged = u >= 0 and lag_end > end[si]
            lag_hidden.append(_covered(end[si], lag_end, start[comp], end[comp], other) if lagged else 0.0)
            lag_beside.append(_covered(end[si], lag_end, flight_lo, flight_hi, other_rt) if lagged else 0.0)
        out["step"].append(np.full(len(send), s, np.int64))
        out["ub"].append(rt_ub)
        out["s"].append(send)
        out["r"].append(recv)

    def cat(key: str) -> np.ndarray:
        return np.concatenate(out[key]) if out[key] else np.zeros(0, np.int64)

    si, ri = cat("s"), cat("r")
    lag = np.zeros(len(si))
    if launch_start is not None and len(si):
        lag_end = np.clip(np.nan_to_num(launch_start[ri], nan=-np.inf), end[si], np.maximum(start[ri], end[si]))
        lag = lag_end - end[si]
    rows = RoundTripRows(
        step=cat("step"),
        ubatch=cat("ub"),
        send_start=start[si].astype(float),
        send_end=end[si].astype(float),
        recv_start=start[ri].astype(float),
        recv_end=end[ri].astype(float),
        hidden_us=np.array(hidden, float),
        host_lag_us=lag.astype(float),
        lag_hidden_us=np.array(lag_hidden, float),
        recv_index=ri.astype(np.int64),
        beside_us=np.array(beside, float),
        lag_beside_us=np.array(lag_beside, float),
    )
    return rows, told, unpaired, told_ub


def _lag_end(send_end: float, recv_start: float, launch: float) -> float:
    """Where the host's lag ends: the receive's launch call, within [the send's end, the receive's start]."""
    if not np.isfinite(launch):
        return send_end
    return float(min(max(launch, send_end), max(recv_start, send_end)))


def _compute_ubatch_by_order(
    c_start: np.ndarray, d_start: np.ndarray, d_end: np.ndarray, ub_k: np.ndarray, role: np.ndarray
) -> np.ndarray:
    """In DBO's order, the compute after a receive continues that microbatch's layer, and the compute
    after a send (before the next send) is the other microbatch's attention: the compute between data
    kernel k and k+1 is k's microbatch after a receive, k+1's after a send."""
    k = np.searchsorted(d_end, c_start, side="right") - 1  # the last data kernel ended before it
    out = np.where(k < 0, ub_k[0], 0)
    after = k >= 0
    kk = np.clip(k, 0, len(ub_k) - 1)
    nxt = np.clip(k + 1, 0, len(ub_k) - 1)
    out = np.where(after & (role[kk] == 1), ub_k[kk], np.where(after, ub_k[nxt], out))
    return out.astype(np.int64)


def _covered(lo: float, hi: float, start: np.ndarray, end: np.ndarray, chosen: np.ndarray) -> float:
    """Length of [lo, hi] covered by the union of the chosen intervals."""
    s = np.clip(start[chosen], lo, hi)
    e = np.clip(end[chosen], lo, hi)
    keep = e > s
    if not keep.any():
        return 0.0
    s, e = s[keep], e[keep]
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    total, cur_s, cur_e = 0.0, float(s[0]), float(e[0])
    for a, b in zip(s[1:].tolist(), e[1:].tolist()):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s = a
        cur_e = max(cur_e, b)
    return total + cur_e - cur_s


def ffn_parts(
    rows: RoundTripRows, ffn_start: np.ndarray, ffn_end: np.ndarray, compute: tuple[np.ndarray, np.ndarray] | None = None
) -> FfnParts:
    """Each round trip's parts from the FFN's data-plane kernels (start, end on the attention rank's
    clock, in time order). The FFN receives each send and sends its answer back in FIFO order:
    receive, send, receive, send ... A round trip is matched to the first FFN receive ending at or
    after its send started (and after the previous match), with the FFN send that follows it, where
    send start <= FFN receive end <= FFN send start <= receive end (within the clocks' tolerance).
    Which of the FFN's kernels are receives (the first or the second) is the choice that matches
    (nearly) most, and of those the one whose receives end soonest after the sends started. compute:
    the FFN's compute kernels (start, end on the same clock), which split its part into compute and
    queueing."""
    n = len(rows)
    candidates: list[tuple[FfnParts, np.ndarray]] = []
    order = np.argsort(rows.send_start, kind="stable")
    for phase in (0, 1):
        f_recv_s, f_recv_e = ffn_start[phase::2], ffn_end[phase::2]
        f_send_s = ffn_start[phase + 1 :: 2]
        f_send_e = ffn_end[phase + 1 :: 2]
        matched = np.zeros(n, bool)
        f1 = np.full(n, np.nan)
        g0 = np.full(n, np.nan)
        kernels = np.full((n, 4), np.nan)
        nxt = 0
        for i in order.tolist():
            j = max(int(np.searchsorted(f_recv_e, rows.send_start[i] - CLOCK_TOLERANCE_US)), nxt)
            if j >= len(f_recv_e) or j >= len(f_send_s):
                break
            a, b = f_recv_e[j], f_send_s[j]
            if a <= b + CLOCK_TOLERANCE_US and b <= rows.recv_end[i] + CLOCK_TOLERANCE_US:
                matched[i], f1[i], g0[i] = True, a, b
                kernels[i] = (f_recv_s[j], a, b, f_send_e[j])
                nxt = j + 1
        found = _parts(rows, matched, f1, g0, compute, kernels)
        candidates.append((found, f1 - rows.send_start))
    # Both phases may match: taking the FFN's sends for its receives also fits the order. The FFN's
    # receive ends as the data arrives, soon after the send; of the phases that match nearly as
    # many round trips as the best, the one whose receives end soonest after the sends is taken.
    most = max(int(p.matched.sum()) for p, _ in candidates)
    fit = [(p, d) for p, d in candidates if p.matched.sum() >= MATCH_NEARLY * most]
    return min(fit, key=lambda pd: float(np.median(pd[1][pd[0].matched])) if pd[0].matched.any() else np.inf)[0]


def _parts(
    rows: RoundTripRows, matched: np.ndarray, f1: np.ndarray, g0: np.ndarray, compute: tuple[np.ndarray, np.ndarray] | None,
    kernels: np.ndarray,
) -> FfnParts:  # fmt: skip
    """kernels: (n, 4) float64, the matched FFN kernels (FfnParts.ffn_kernels)."""
    s0, r0, r1 = rows.send_start, rows.recv_start, rows.recv_end
    t1 = np.clip(f1, s0, r1)
    t2 = np.clip(g0, t1, r1)
    transfer = (t1 - s0) + (r1 - t2)
    ffn = t2 - t1
    wait = np.clip(t2 - r0, 0.0, None)
    # an answer sent before the attention's receive kernel started waits there (in NCCL's buffers
    # for a small one) until the attention's host posts the receive: the host's lateness, not the wire
    late = np.clip(r0 - t2, 0.0, r1 - t2)
    nan = np.where(matched, 1.0, np.nan)
    if compute is None:
        return FfnParts(matched, transfer * nan, ffn * nan, wait * nan, late * nan, ffn_kernels=kernels)
    busy = np.zeros(len(ffn))
    if matched.any():
        busy[matched] = iv.covered_within(t1[matched], t2[matched], *iv.union(*compute))
    return FfnParts(matched, transfer * nan, ffn * nan, wait * nan, late * nan, busy * nan, (ffn - busy) * nan, kernels)


def summarize(
    rows: RoundTripRows,
    told: dict[str, int],
    unpaired: int,
    *,
    data_kernels: int,
    control_kernels: int,
    step_compute_us: dict[int, float],
    layers: int | None,
    kernels_per_step: np.ndarray,
    kernel_ubatch: np.ndarray | None = None,
    lag_op: tuple[str, float] | None = None,
) -> AfdRoundTrips | None:
    """The rank's summary; None without round trips. step_compute_us: each step's compute busy time;
    kernel_ubatch, lag_op: each GPU activity's microbatch as the round trips told it, and the CPU op
    that held the host's lag (AfdRoundTrips)."""
    if not len(rows):
        return None
    steps, per_step = np.unique(rows.step, return_counts=True)
    rt = rows.round_trip_us
    two = rows.ubatch >= 0
    inferred = layers is None
    if layers is None:  # one remote FFN per layer: a microbatch's round trips per step are the layers
        per_microbatch = np.unique(np.stack([rows.step, rows.ubatch]), axis=1, return_counts=True)[1]
        layers = int(np.median(per_microbatch)) or None
    per_mb = [step_compute_us[int(s)] / n for s, n in zip(steps.tolist(), per_step.tolist()) if int(s) in step_compute_us]
    return AfdRoundTrips(
        rows=rows,
        data_kernels=data_kernels,
        control_kernels=control_kernels,
        unpaired=unpaired,
        steps=len(steps),
        per_step=float(np.median(per_step)),
        per_step_kernels=float(np.median(kernels_per_step)) if len(kernels_per_step) else 0.0,
        layers=layers,
        layers_inferred=inferred,
        microbatches_told=told,
        microbatched=bool(two.any()) or told.get(TOLD_NOT, 0) > 0,
        median_us=float(np.median(rt)),
        hidden_us=float(rows.hidden_us.sum()),
        total_us=float(rt.sum()),
        host_lag_total_us=float(rows.lag_us.sum()),
        lag_hidden_us=float((rows.hidden_us - rows.rest_hidden_us).sum()),
        host_lag_median_us=float(np.median(rows.lag_us)),
        compute_per_microbatch_us=float(np.median(per_mb)) if per_mb else None,
        median_exposed_us=float(np.median(rows.rest_us - rows.rest_hidden_us)),
        kernel_ubatch=kernel_ubatch,
        lag_op=lag_op,
    )
