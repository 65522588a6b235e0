"""Host time explained: what the CPU was doing while the GPU waited (docs/analysis.md, "Host time").

Every stretch of the `host_idle` bucket is split, instant by instant, into one of a fixed set of
causes by what the threads it follows were doing then: the thread that launched the activity
ending the stretch first, then the step's other microbatch threads. Per instant, the first of
those threads that is in a recorded event decides, innermost kind first (a CUDA call, else a named
range, else a CPU operator), and the outermost event of that kind names it. Where none is in an
event: microbatch thread start-up, between steps, or untraced. The causes add up to host_idle.

All of it is sorted sweeps: the stretches and each thread's events are sorted disjoint interval
lists, and two such lists are intersected pair by pair in one pass (`_intersect`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_HOST, Partition
from dbo_trace.analysis.host.sorted_pairs import _intersect, _split, _subtract, _window_pairs
from dbo_trace.analysis.intervals import index_groups, union
from dbo_trace.analysis.steps.sources import MODEL_RUNNER_HINT, MODEL_RUNNER_PREFIX


LAUNCH, SYNC, OTHER_CALL, NAMED, CPU_OP, STARTUP, BETWEEN, UNTRACED = range(8)
CAUSES = (
    "launch_calls", "synchronisation", "other_cuda_calls", "named", "cpu_ops", "ubatch_startup", "between_steps", "untraced"
)  # fmt: skip
_PAIRS_AT_ONCE = 1 << 18  # (window, piece) pairs materialised at once in causes_in
TOP_NAMES = 5  # names kept per kind (named ranges, CPU operators) in a rank's or a phase's causes

# Ranges that mark steps or microbatch phases (the window the question is asked in, or dbo-trace's
# own hooks) are not work: time inside them alone is not named after them.
_STEP_MARKERS = re.compile(r"^(execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)|ProfilerStep#\d+|dbo:.*)$", re.S)


@dataclass(frozen=True)
class TopItem:
    """The largest item of a host-time split: a cause (kind), or the named range or CPU operator
    (kind NAMED or CPU_OP) with its name."""

    kind: int
    us: float
    name: str | None = None


@dataclass(frozen=True)
class HostCauses:
    """A window's host-caused GPU idle split by cause (us); the causes add up to host_idle_us."""

    host_idle_us: float
    by_cause_us: tuple[float, ...]  # one per CAUSES entry
    launch_calls: int  # CUDA calls (other than synchronisation) the launch-call time came from
    sync_calls: int
    named: tuple[tuple[str, float], ...]  # the largest named ranges (name, us), largest first
    cpu_ops: tuple[tuple[str, float], ...]  # the largest top-level CPU operators outside named ranges
    # the same time by the innermost CPU operator at each instant (what ran inside the top-level
    # one: a compile, an aten op), the largest first
    cpu_ops_inner: tuple[tuple[str, float], ...] = ()

    def us(self, cause: int) -> float:
        return self.by_cause_us[cause]

    def share(self, cause: int) -> float | None:
        return self.share_of(self.by_cause_us[cause])

    def share_of(self, us: float) -> float | None:
        """A part's share of the host-caused idle (a cause's, a named range's, an operator's)."""
        return us / self.host_idle_us if self.host_idle_us > 0 else None

    def rest_us(self, kind: int, shown: int) -> float:
        """A kind's time beyond its `shown` largest names (NAMED, CPU_OP): the rest, as one item."""
        listed = self.named if kind == NAMED else self.cpu_ops
        return self.us(kind) - sum(t for _, t in listed[:shown])

    @property
    def largest(self) -> int | None:
        """The cause with the most time (named ranges and CPU operators as kinds, all names together)."""
        if self.host_idle_us <= 0:
            return None
        by = self.by_cause_us  # a few causes: Python's max (the first of a tie, as argmax) beats an array per call
        return max(range(len(by)), key=by.__getitem__)

    @property
    def launches_lead(self) -> bool:
        """Launch calls are the largest cause: only then is the host time "spent launching kernels"."""
        return self.largest == LAUNCH

    @property
    def top(self) -> TopItem | None:
        """The single largest item the line names: a range or an operator by name, or a cause
        (ties: the earlier in the line's order)."""
        items = [TopItem(k, self.by_cause_us[k]) for k in (LAUNCH, SYNC, OTHER_CALL, STARTUP, BETWEEN, UNTRACED)]
        items += [TopItem(NAMED, t, n) for n, t in self.named[:1]] + [TopItem(CPU_OP, t, n) for n, t in self.cpu_ops[:1]]
        best = max(items, key=lambda x: x.us)
        return best if best.us > 0 else None


def no_causes() -> HostCauses:
    return HostCauses(0.0, (0.0,) * len(CAUSES), 0, 0, (), ())


def combine_causes(parts: list[HostCauses], top: int = TOP_NAMES) -> HostCauses:
    """Several windows' causes together (ranks: one GPU each, so times add). Names are merged by
    name and cut to the top again; the cut names' time stays in their kind's total."""
    if not parts:
        return no_causes()
    named: dict[str, float] = {}
    ops: dict[str, float] = {}
    inner: dict[str, float] = {}
    for p in parts:
        for totals, items in ((named, p.named), (ops, p.cpu_ops), (inner, p.cpu_ops_inner)):
            for n, t in items:
                totals[n] = totals.get(n, 0.0) + t
    return HostCauses(
        sum(p.host_idle_us for p in parts),
        tuple(float(sum(p.by_cause_us[k] for p in parts)) for k in range(len(CAUSES))),
        sum(p.launch_calls for p in parts),
        sum(p.sync_calls for p in parts),
        _top(named, top),
        _top(ops, top),
        _top(inner, top),
    )


def _top(totals: dict[str, float], n: int) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(totals.items(), key=lambda x: (-x[1], x[0]))[:n])


@dataclass(frozen=True)
class HostPieces:
    """The host-idle stretches cut into attributed pieces: sorted, disjoint, covering the bucket."""

    lo: np.ndarray
    hi: np.ndarray
    cause: np.ndarray  # LAUNCH ... UNTRACED
    name: np.ndarray  # index into the names for NAMED and CPU_OP pieces, else -1
    inner: np.ndarray  # for CPU_OP pieces the innermost operator then (index into the names), else -1
    lane: np.ndarray  # the thread whose state named the piece (the stretch's lead thread where none did)
    call_at: np.ndarray  # one time per counted CUDA call (where it met host idle), sorted
    call_cause: np.ndarray  # LAUNCH or SYNC per counted call
    names: list[str]

    def causes_in(self, lo: np.ndarray, hi: np.ndarray, host_idle_us: np.ndarray, top: int = TOP_NAMES) -> list[HostCauses]:
        """Per window [lo[i], hi[i]] (windows may overlap each other): the causes of the host idle in
        it. host_idle_us: the window's host idle as the accounting measured it; untraced takes the
        remainder, so the causes add up to it exactly."""
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        sums, named, ops, inner = self._window_sums(lo, hi)
        launches, syncs = self._calls_in(lo, hi)
        out = []
        for i in range(len(lo)):
            row = sums[i].copy()
            row[UNTRACED] = max(0.0, float(host_idle_us[i]) - float(row.sum() - row[UNTRACED]))
            out.append(
                HostCauses(
                    float(host_idle_us[i]),
                    tuple(float(x) for x in row),
                    int(launches[i]),
                    int(syncs[i]),
                    _top({self.names[j]: t for j, t in named[i].items()}, top),
                    _top({self.names[j]: t for j, t in ops[i].items()}, top),
                    _top({self.names[j]: t for j, t in inner[i].items()}, top),
                )
            )
        return out

    def _window_sums(
        self, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, list[dict[int, float]], list[dict[int, float]], list[dict[int, float]]]:
        """Per window: its pieces' time by cause (n, causes), and by name (named ranges, top-level and
        innermost CPU operators: {name index: us})."""
        n = len(lo)
        k = len(CAUSES)
        sums = np.zeros((n, k))
        # One shared empty dict for the windows without names (most of a long run's): never mutated,
        # a window's names are put in a dict of its own.
        named: list[dict[int, float]] = [_NO_NAMES] * n
        ops: list[dict[int, float]] = [_NO_NAMES] * n
        inner: list[dict[int, float]] = [_NO_NAMES] * n
        # The (window, piece) pairs a few windows at a time, so that they never take more than
        # _PAIRS_AT_ONCE entries (a window with more, such as the whole trace's, alone and by slices).
        first_piece = np.searchsorted(self.hi, lo, side="right")
        last_piece = np.searchsorted(self.lo, hi, side="left")
        through = np.cumsum(np.maximum(last_piece - first_piece, 0))
        w0 = 0
        while w0 < n:
            before = int(through[w0 - 1]) if w0 else 0
            w1 = max(w0 + 1, int(np.searchsorted(through, before + _PAIRS_AT_ONCE, side="right")))
            if w1 == w0 + 1:
                self._one_window(w0, lo[w0], hi[w0], int(first_piece[w0]), int(last_piece[w0]), sums, named, ops, inner)
            else:
                win, piece, length = _window_pairs(self.lo, self.hi, lo[w0:w1], hi[w0:w1])
                sums[w0:w1] = np.bincount(win * k + self.cause[piece], weights=length, minlength=(w1 - w0) * k).reshape(-1, k)
                named[w0:w1] = _names_per_window(win, piece, length, self.cause, self.name, NAMED, w1 - w0)
                ops[w0:w1] = _names_per_window(win, piece, length, self.cause, self.name, CPU_OP, w1 - w0)
                inner[w0:w1] = _names_per_window(win, piece, length, self.cause, self.inner, CPU_OP, w1 - w0)
            w0 = w1
        return sums, named, ops, inner

    def _calls_in(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per window, the counted launch and synchronisation calls in it."""
        first = np.searchsorted(self.call_at, lo, side="left")
        last = np.searchsorted(self.call_at, hi, side="left")
        launch_cum = np.r_[0, np.cumsum(self.call_cause == LAUNCH)]
        sync_cum = np.r_[0, np.cumsum(self.call_cause == SYNC)]
        return launch_cum[last] - launch_cum[first], sync_cum[last] - sync_cum[first]

    def _one_window(
        self,
        i: int,
        w_lo: float,
        w_hi: float,
        first: int,
        last: int,
        sums: np.ndarray,
        named: list[dict[int, float]],
        ops: list[dict[int, float]],
        inner: list[dict[int, float]],
    ) -> None:
        """Window i's sums and names from slices of the pieces (its pieces are one contiguous run),
        in the same order as the pairs would give them."""
        if last <= first:
            return
        length = np.minimum(self.hi[first:last], w_hi) - np.maximum(self.lo[first:last], w_lo)
        cause, name, deepest = self.cause[first:last], self.name[first:last], self.inner[first:last]
        keep = length > 0
        if not keep.all():
            length, cause, name, deepest = length[keep], cause[keep], name[keep], deepest[keep]
        sums[i] = np.bincount(cause, weights=length, minlength=len(CAUSES))
        for kind, key, out in ((NAMED, name, named), (CPU_OP, name, ops), (CPU_OP, deepest, inner)):
            sel = cause == kind
            if sel.any():
                keys, inverse = np.unique(key[sel], return_inverse=True)
                out[i] = dict(zip(keys.tolist(), np.bincount(inverse, weights=length[sel]).tolist()))

    def causes_in_union(self, lo: np.ndarray, hi: np.ndarray, host_idle_us: float, top: int = TOP_NAMES) -> HostCauses:
        """The causes inside the union of the windows (overlapping windows count once)."""
        u_lo, u_hi = union(np.asarray(lo, float), np.asarray(hi, float))
        if not len(u_lo):
            return no_causes()
        # combine_causes over the windows' causes_in, without an object per window: each sum adds the
        # windows' parts one after another, in window order, as combine_causes does (cumsum does too)
        sums, named, ops, inner = self._window_sums(u_lo, u_hi)
        launches, syncs = self._calls_in(u_lo, u_hi)
        row = [float(np.cumsum(sums[:, k])[-1]) if k != UNTRACED else 0.0 for k in range(len(CAUSES))]
        row[UNTRACED] = max(0.0, host_idle_us - (sum(row) - row[UNTRACED]))
        return HostCauses(
            host_idle_us, tuple(row), int(launches.sum()), int(syncs.sum()), _top(self._merged(named), top),
            _top(self._merged(ops), top), _top(self._merged(inner), top),
        )  # fmt: skip

    def _merged(self, per_window: list[dict[int, float]]) -> dict[str, float]:
        """Each name's time over the windows, added in window order (as combine_causes adds them)."""
        totals: dict[str, float] = {}
        for found in filter(None, per_window):
            for j, t in found.items():
                name = self.names[j]
                totals[name] = totals.get(name, 0.0) + t
        return totals


_NO_NAMES: dict[int, float] = {}


def _names_per_window(
    win: np.ndarray, piece: np.ndarray, length: np.ndarray, cause: np.ndarray, name: np.ndarray, kind: int, n: int
) -> list[dict[int, float]]:
    sel = cause[piece] == kind
    out: list[dict[int, float]] = [_NO_NAMES] * n
    if not sel.any():
        return out
    width = int(name.max()) + 1
    key = win[sel].astype(np.int64) * width + name[piece[sel]]
    keys, inverse = np.unique(key, return_inverse=True)
    totals = np.bincount(inverse, weights=length[sel]).tolist()
    windows, names = np.divmod(keys, width)
    # keys ascend, so each window's names are one run: a dict per window that has any
    cuts = np.flatnonzero(np.diff(windows)) + 1
    names_l = names.tolist()
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(keys)]):
        out[int(windows[a])] = dict(zip(names_l[a:b], totals[a:b]))
    return out


def _runs(start: np.ndarray, end: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge a thread's events of one kind into runs, each named by its outermost event: the first to
    start (the longer at a tie). An event starting at or after every earlier one's end begins a run."""
    if not len(start):
        return np.empty(0), np.empty(0), np.empty(0, np.int64)
    order = np.lexsort((-end, start))
    s, e, n = start[order], end[order], name[order]
    running = np.maximum.accumulate(e)
    begins = np.r_[True, s[1:] >= running[:-1]]
    idx = np.flatnonzero(begins)
    ends = running[np.r_[idx[1:] - 1, len(s) - 1]]
    keep = ends > s[idx]
    return s[idx][keep], ends[keep], n[idx][keep]


@dataclass(frozen=True)
class _Thread:
    """One thread's recorded events as sorted disjoint layers."""

    layers: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]  # (cause, lo, hi, name), innermost kind first
    call_lo: np.ndarray  # each call, for counting
    call_hi: np.ndarray
    call_cause: np.ndarray
    # its CPU operators' time cut where the innermost operator changes (covering their runs exactly)
    inner_lo: np.ndarray
    inner_hi: np.ndarray
    inner_name: np.ndarray


def host_pieces(
    *,
    part: Partition,
    names: list[str],
    gpu_start: np.ndarray,  # (n_gpu,) float64
    gpu_launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    gpu_launch_index: np.ndarray,  # (n_gpu,) int64 into the calls, -1 unknown
    gpu_step: np.ndarray,  # (n_gpu,) int64, -1 in none
    call_start: np.ndarray,  # (n_calls,) float64
    call_end: np.ndarray,  # (n_calls,) float64
    call_name: np.ndarray,  # (n_calls,) int32 into names
    call_lane: np.ndarray,  # (n_calls,) int64
    call_kind: np.ndarray,  # (n_calls,) int8: classify.CALL_*
    call_step: np.ndarray,  # (n_calls,) int64, -1 in none
    call_ubatch: np.ndarray,  # (n_calls,) int8, -1 unknown
    cpu_start: np.ndarray,  # (n_cpu,) float64
    cpu_end: np.ndarray,  # (n_cpu,) float64
    cpu_name: np.ndarray,  # (n_cpu,) int32 into names
    cpu_lane: np.ndarray,  # (n_cpu,) int64
    cpu_is_annotation: np.ndarray,  # (n_cpu,) bool
    step_lo: np.ndarray,  # (n_steps,) float64
    step_hi: np.ndarray,  # (n_steps,) float64
    steps_marked: bool,
) -> HostPieces:
    """Attribute every host-idle stretch of the partition (docs/analysis.md, "Host time").
    step_lo/step_hi: the steps' CPU windows (sorted, disjoint); steps_marked: they come from markers
    (inferred steps say nothing about what is between steps)."""
    s_lo, s_hi = part.spans(B_HOST, part.lo, part.hi)
    if not len(s_lo):
        return _Emitted().pieces(names)
    lead, step = _stretch_leads(part.ender_time(s_hi), gpu_start, gpu_launch_start, gpu_launch_index, gpu_step, call_lane, cpu_lane)
    # The threads each stretch follows, in order: its lead thread, then its step's microbatch
    # threads other than the lead (a table row per step), looked up by position (`_followed_at`).
    ub_table, first_calls = _ubatch_lanes(call_step, call_ubatch, call_lane, call_start)
    step_row = np.where((step >= 0) & (step < len(ub_table) - 1), step, len(ub_table) - 1)
    del step
    out = _Emitted()
    r_lo, r_hi, r_k = _follow_threads(
        out, s_lo, s_hi, lead, ub_table, step_row, names,
        call_start, call_end, call_name, call_lane, call_kind, cpu_start, cpu_end, cpu_name, cpu_lane, cpu_is_annotation,
    )  # fmt: skip
    del step_row
    r_lane = lead[r_k]  # what no thread explains stays with the stretch's lead thread
    del lead, r_k

    # No followed thread in any event: a microbatch thread not yet started, between steps, or untraced.
    up_lo, up_hi = _startup_windows(step_lo, step_hi, first_calls)
    lo, hi, ia, _ = _intersect(r_lo, r_hi, up_lo, up_hi)
    out.emit(lo, hi, STARTUP, r_lane[ia])
    lo, hi, ia = _subtract(r_lo, r_hi, up_lo, up_hi)
    lane = r_lane[ia]
    del r_lo, r_hi, r_lane
    if steps_marked:
        b_lo, b_hi, ib = _subtract(lo, hi, step_lo, step_hi)
        out.emit(b_lo, b_hi, BETWEEN, lane[ib])
        lo, hi, ia, _ = _intersect(lo, hi, step_lo, step_hi)
        lane = lane[ia]
    out.emit(lo, hi, UNTRACED, lane)
    del lo, hi
    return out.pieces(names)


def _stretch_leads(
    s_hi: np.ndarray,
    gpu_start: np.ndarray,
    gpu_launch_start: np.ndarray,
    gpu_launch_index: np.ndarray,
    gpu_step: np.ndarray,
    call_lane: np.ndarray,
    cpu_lane: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per stretch: the thread that launched the activity ending it (of those starting at its end,
    the earliest launched; the main thread where none was launched) and that activity's step."""
    order = np.lexsort((np.where(np.isnan(gpu_launch_start), np.inf, gpu_launch_start), gpu_start))
    starts = gpu_start[order]
    at = np.clip(np.searchsorted(starts, s_hi, side="left"), 0, max(len(starts) - 1, 0))
    ends_on = (np.take(starts, at, mode="clip") == s_hi) if len(starts) else np.zeros(len(s_hi), bool)
    ender = np.where(ends_on, order[at] if len(order) else -1, -1)
    launch = np.where(ender >= 0, gpu_launch_index[np.clip(ender, 0, None)] if len(gpu_launch_index) else -1, -1)
    main = _main_lane(call_lane, cpu_lane)
    lead = np.where(launch >= 0, call_lane[np.clip(launch, 0, None)] if len(call_lane) else main, main)
    step = np.where(ender >= 0, gpu_step[np.clip(ender, 0, None)] if len(gpu_step) else -1, -1)
    return lead, step


class _Emitted:
    """The attributed pieces and counted calls as they are found, in parts."""

    def __init__(self) -> None:
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.cause: list[np.ndarray] = []
        self.name: list[np.ndarray] = []
        self.inner: list[np.ndarray] = []
        self.lane: list[np.ndarray] = []
        self.call_at: list[np.ndarray] = []
        self.call_cause: list[np.ndarray] = []

    def emit(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        cause: int,
        lane: np.ndarray | int,
        name: np.ndarray | None = None,
        inner: np.ndarray | None = None,
    ) -> None:
        self.lo.append(lo)
        self.lane.append(np.broadcast_to(np.asarray(lane, np.int64), (len(lo),)))
        self.hi.append(hi)
        self.cause.append(np.full(len(lo), cause, np.int8))
        self.name.append(np.full(len(lo), -1, np.int32) if name is None else name.astype(np.int32, copy=False))
        self.inner.append(np.full(len(lo), -1, np.int32) if inner is None else inner.astype(np.int32, copy=False))

    def pieces(self, names: list[str]) -> HostPieces:
        """All of it in time order. Millions of pieces on a large trace: each field is put in order
        on its own and its parts freed."""
        p_lo = _joined(self.lo, np.float64)
        order = np.argsort(p_lo, kind="stable")
        p_lo = p_lo[order]
        at = _joined(self.call_at, np.float64)
        c_order = np.argsort(at, kind="stable")
        return HostPieces(
            p_lo,
            _joined(self.hi, np.float64)[order],
            _joined(self.cause, np.int8)[order],
            _joined(self.name, np.int32)[order],
            _joined(self.inner, np.int32)[order],
            _joined(self.lane, np.int64)[order],
            at[c_order],
            _joined(self.call_cause, np.int8)[c_order],
            names,
        )


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The parts as one array; the parts list is emptied."""
    joined: np.ndarray = np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)
    parts.clear()
    return joined


def _follow_threads(
    out: _Emitted,
    s_lo: np.ndarray,
    s_hi: np.ndarray,
    lead: np.ndarray,
    ub_table: np.ndarray,
    step_row: np.ndarray,
    names: list[str],
    call_start: np.ndarray,
    call_end: np.ndarray,
    call_name: np.ndarray,
    call_lane: np.ndarray,
    call_kind: np.ndarray,
    cpu_start: np.ndarray,
    cpu_end: np.ndarray,
    cpu_name: np.ndarray,
    cpu_lane: np.ndarray,
    cpu_is_annotation: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Attribute the stretches to the threads they follow, position by position; what none of
    them explains is returned (sorted, disjoint), with each part's stretch. The threads' layers are freed on return."""
    depth = 1 + int(_others_followed(ub_table, step_row, lead).max(initial=0))
    call_sync = (call_kind == c.CALL_SYNC) | (_sync_names(names, call_name)[call_name] if len(names) else False)
    call_launch = ~call_sync & np.isin(call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH, c.CALL_COPY))
    call_cause = np.where(call_sync, SYNC, np.where(call_launch, LAUNCH, OTHER_CALL)).astype(np.int8)
    del call_sync, call_launch
    cpu_named, cpu_op = range_kinds(names, cpu_name, cpu_is_annotation)
    cpu_lane = as_call_threads(cpu_lane, cpu_start, cpu_end, cpu_op, call_lane, call_start)

    in_table = ub_table[np.unique(step_row)].ravel()
    lanes_needed = np.union1d(lead, in_table[in_table != _NO_LANE]).tolist()
    calls_of, cpu_of = index_groups(call_lane), index_groups(cpu_lane)  # per thread by one sort, not a mask each
    no_events = np.empty(0, np.int64)
    threads = {
        lane: _thread_layers(
            calls_of.get(lane, no_events), cpu_of.get(lane, no_events),
            call_start, call_end, call_cause, cpu_start, cpu_end, cpu_name, cpu_named, cpu_op,
            s_lo, s_hi,
        )
        for lane in lanes_needed
    }  # fmt: skip
    del call_cause, cpu_named, cpu_op, cpu_lane, calls_of, cpu_of

    # What no followed thread explains yet: (lo, hi, stretch), sorted and disjoint.
    r_lo, r_hi, r_k = s_lo, s_hi, np.arange(len(s_lo))
    for position in range(depth):
        lane_at = _followed_at(position, lead[r_k], ub_table, step_row[r_k])
        none = lane_at == _NO_LANE
        rest_lo, rest_hi, rest_k = [r_lo[none]], [r_hi[none]], [r_k[none]]
        for lane in np.unique(lane_at[~none]).tolist():
            sel = lane_at == lane
            th = threads[lane]
            # Innermost kind first (synchronisation, launch, other CUDA calls, named ranges, CPU
            # operators): each layer takes what it covers of what the layers before it left.
            lo, hi, k = r_lo[sel], r_hi[sel], r_k[sel]
            for cause, l_lo, l_hi, l_name in th.layers:
                (h_lo, h_hi, _, ib), (lo, hi, ia) = _split(lo, hi, l_lo, l_hi)
                if cause == CPU_OP and l_name is not None:
                    # each piece cut where the innermost operator changes, keeping its top-level name;
                    # what no innermost stretch covers (none should) stays named by the top-level one
                    (i_lo, i_hi, ic, jc), (u_lo, u_hi, uc) = _split(h_lo, h_hi, th.inner_lo, th.inner_hi)
                    out.emit(i_lo, i_hi, cause, lane, l_name[ib][ic], th.inner_name[jc])
                    out.emit(u_lo, u_hi, cause, lane, l_name[ib][uc], l_name[ib][uc])
                else:
                    out.emit(h_lo, h_hi, cause, lane, None if l_name is None else l_name[ib])
                if cause in (LAUNCH, SYNC, OTHER_CALL):
                    _count_calls(th, h_lo, h_hi, cause, out.call_at, out.call_cause)
                k = k[ia]
            rest_lo.append(lo)
            rest_hi.append(hi)
            rest_k.append(k)
        del lane_at, none
        r_lo, r_hi, r_k = np.concatenate(rest_lo), np.concatenate(rest_hi), np.concatenate(rest_k)
        del rest_lo, rest_hi, rest_k
        order = np.argsort(r_lo, kind="stable")
        r_lo, r_hi, r_k = r_lo[order], r_hi[order], r_k[order]
    return r_lo, r_hi, r_k


_NO_LANE = np.iinfo(np.int64).min


def as_call_threads(
    cpu_lane: np.ndarray,
    cpu_start: np.ndarray,
    cpu_end: np.ndarray,
    cpu_op: np.ndarray,
    call_lane: np.ndarray,
    call_start: np.ndarray,
) -> np.ndarray:
    """CPU ranges' threads as their CUDA calls name them. A thread that made no CUDA call but whose
    CPU operators hold other threads' calls is the thread whose calls they hold most (seen with
    profile_all_threads: each step's new microbatch threads' operators get new ids, their calls
    the first step's). Ties: the lowest thread id."""
    calling = set(np.unique(call_lane).tolist())
    order = np.argsort(call_start, kind="stable")
    c_start, c_lane = call_start[order], call_lane[order]
    out = cpu_lane
    # Each thread's events by one sort, and only the calls inside its runs' span searched: such
    # threads come new with every step, so a pass over all events or all calls per thread grows
    # with steps x events.
    for lane, mine in index_groups(cpu_lane).items():
        sel = mine[cpu_op[mine]]
        if lane in calling or not len(sel):
            continue
        lo, hi, _ = _runs(cpu_start[sel], cpu_end[sel], np.zeros(len(sel), np.int64))
        if not len(lo):
            continue
        a, b = np.searchsorted(c_start, [lo[0], hi[-1]], side="left")  # no call outside [lo[0], hi[-1]) is held
        j = np.searchsorted(lo, c_start[a:b], side="right") - 1
        held = (j >= 0) & (c_start[a:b] < hi[np.clip(j, 0, None)])
        if not held.any():
            continue
        values, counts = np.unique(c_lane[a:b][held], return_counts=True)
        if out is cpu_lane:
            out = cpu_lane.copy()
        out[mine] = values[counts.argmax()]
    return out


def range_kinds(names: list[str], cpu_name: np.ndarray, cpu_is_annotation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per CPU range: is it a named range (an annotation or a model-runner phase, not a step
    marker or a dbo range), is it a CPU operator (neither annotation nor marker)."""
    if not len(names):
        return cpu_is_annotation.copy(), ~cpu_is_annotation
    marker = c.per_name(names, cpu_name, lambda n: bool(_STEP_MARKERS.match(n)))[cpu_name]
    runner = c.per_name(names, cpu_name, lambda n: n.startswith(MODEL_RUNNER_PREFIX), hint=MODEL_RUNNER_HINT)[cpu_name]
    return (cpu_is_annotation | runner) & ~marker, ~cpu_is_annotation & ~runner & ~marker


def outermost_runs(start: np.ndarray, end: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One thread's ranges of one kind merged into runs named by their outermost range (what a picture draws)."""
    return _runs(start, end, name)


def _main_lane(call_lane: np.ndarray, cpu_lane: np.ndarray) -> int:
    """The thread that made the most CUDA calls (the most CPU events where there are none)."""
    lanes = call_lane if len(call_lane) else cpu_lane
    if not len(lanes):
        return _NO_LANE + 1
    values, counts = np.unique(lanes, return_counts=True)
    return int(values[counts.argmax()])


def _ubatch_lanes(
    call_step: np.ndarray, call_ubatch: np.ndarray, call_lane: np.ndarray, call_start: np.ndarray
) -> tuple[np.ndarray, dict[int, list[float]]]:
    """Per step: its microbatch threads in microbatch order (row `step` of a table padded with
    _NO_LANE, one row more than the steps: an empty row for stretches without a step), and each
    one's first call in the step."""
    sel = (call_step >= 0) & (call_ubatch >= 0)
    if not sel.any():
        return np.full((1, 0), _NO_LANE, np.int64), {}
    st, ub, lane, t = call_step[sel], call_ubatch[sel], call_lane[sel], call_start[sel]
    order = np.lexsort((t, lane, ub, st))
    st, ub, lane, t = st[order], ub[order], lane[order], t[order]
    heads = np.flatnonzero(np.r_[True, (st[1:] != st[:-1]) | (ub[1:] != ub[:-1]) | (lane[1:] != lane[:-1])])
    lanes: dict[int, list[int]] = {}
    firsts: dict[int, list[float]] = {}
    for h in heads.tolist():  # one per (step, microbatch, thread): a few per step
        if int(lane[h]) not in lanes.setdefault(int(st[h]), []):
            lanes[int(st[h])].append(int(lane[h]))
        firsts.setdefault(int(st[h]), []).append(float(t[h]))
    table = np.full((max(lanes) + 2, max(len(v) for v in lanes.values())), _NO_LANE, np.int64)
    for s, row in lanes.items():
        table[s, : len(row)] = row
    return table, firsts


def _others_followed(ub_table: np.ndarray, row: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """Per stretch: how many of its step's microbatch threads it follows after its lead."""
    n = np.zeros(len(row), np.int64)
    for j in range(ub_table.shape[1]):
        col = ub_table[row, j]
        n += (col != _NO_LANE) & (col != lead)
    return n


def _followed_at(position: int, lead: np.ndarray, ub_table: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Per stretch: the thread it follows at this position (0: its lead; then its step's microbatch
    threads other than the lead, in microbatch order), or _NO_LANE past its last."""
    if position == 0:
        return lead
    out = np.full(len(row), _NO_LANE, np.int64)
    seen = np.zeros(len(row), np.int64)
    for j in range(ub_table.shape[1]):
        col = ub_table[row, j]
        other = (col != _NO_LANE) & (col != lead)
        seen += other
        at = other & (seen == position)
        out[at] = col[at]
    return out


def _startup_windows(
    step_lo: np.ndarray, step_hi: np.ndarray, first_calls: dict[int, list[float]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per microbatched step: from its start to the first call of its last microbatch thread to start."""
    lo, hi = [], []
    for st in sorted(first_calls):
        if 0 <= st < len(step_lo):
            end = min(max(first_calls[st]), float(step_hi[st]))
            if end > step_lo[st]:
                lo.append(float(step_lo[st]))
                hi.append(end)
    return union(np.array(lo, float), np.array(hi, float))


def _sync_names(names: list[str], used: np.ndarray) -> np.ndarray:
    """Blocking copies are synchronisation too: cudaMemcpy / cuMemcpyDtoH and kin, never *Async.
    Per name, of those `used` (name indices) only (classify.per_name)."""
    return c.per_name(names, used, lambda n: n.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy")) and "Async" not in n)


def _thread_layers(
    call_sel: np.ndarray,  # the thread's calls, ascending positions
    cpu_sel: np.ndarray,  # its CPU ranges, ascending positions
    call_start: np.ndarray,
    call_end: np.ndarray,
    call_cause: np.ndarray,
    cpu_start: np.ndarray,
    cpu_end: np.ndarray,
    cpu_name: np.ndarray,
    cpu_named: np.ndarray,
    cpu_op: np.ndarray,
    s_lo: np.ndarray,  # the host-idle stretches (sorted, disjoint): only operators meeting them can name them
    s_hi: np.ndarray,
) -> _Thread:
    cs, ce, cause = call_start[call_sel], call_end[call_sel], call_cause[call_sel]
    layers: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = []
    for kind in (SYNC, LAUNCH, OTHER_CALL):
        layers.append((kind, *union(cs[cause == kind], ce[cause == kind]), None))
    ops = cpu_sel[cpu_op[cpu_sel]]
    for kind, sel in ((NAMED, cpu_sel[cpu_named[cpu_sel]]), (CPU_OP, ops)):
        layers.append((kind, *_runs(cpu_start[sel], cpu_end[sel], cpu_name[sel])))
    # An operator that meets no stretch names no instant of one (its ancestors, which do, meet it
    # too): left out of the innermost pass, the one pass here in Python.
    j = np.searchsorted(s_hi, cpu_start[ops], side="right")
    ops = ops[(j < len(s_lo)) & (s_lo[np.minimum(j, len(s_lo) - 1)] < cpu_end[ops])]
    order = np.argsort(cs, kind="stable")
    return _Thread(layers, cs[order], ce[order], cause[order], *innermost(cpu_start[ops], cpu_end[ops], cpu_name[ops]))


def innermost(start: np.ndarray, end: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One thread's ranges (nested, as a profiler records them) as the stretches in which the
    innermost open range is one: sorted, disjoint, covering their union exactly. A range that
    outlives its parent (float rounding at epoch microseconds makes siblings overlap by a hair) is
    the innermost until its own end; its parent, closed meanwhile, leaves the stack unseen. One pass
    with a stack (the nesting is inherently sequential), over the thread's operators only."""
    if not len(start):
        return np.empty(0), np.empty(0), np.empty(0, np.int64)
    order = np.lexsort((-end, start))
    s_l, e_l, n_l = start[order].tolist(), end[order].tolist(), name[order].tolist()
    lo: list[float] = []
    hi: list[float] = []
    nm: list[int] = []
    stack: list[tuple[float, int]] = []  # (end, name) of the open ranges, innermost last
    at: float = float(s_l[0])

    def close_until(t: float) -> float:
        """Close every open range that ends by t, emitting its innermost stretches; where now."""
        now = at
        while stack and stack[-1][0] <= t:
            e, n = stack.pop()
            if e > now:
                lo.append(now)
                hi.append(e)
                nm.append(n)
                now = e
        return now

    for s, e, n in zip(s_l, e_l, n_l):
        at = close_until(s)
        if stack and s > at:
            lo.append(at)
            hi.append(s)
            nm.append(stack[-1][1])
        at = max(at, s)
        stack.append((e, n))
    close_until(float("inf"))
    out_lo, out_hi = np.array(lo, float), np.array(hi, float)
    keep = out_hi > out_lo
    return out_lo[keep], out_hi[keep], np.array(nm, np.int64)[keep]


def _count_calls(
    th: _Thread, lo: np.ndarray, hi: np.ndarray, cause: int, call_at: list[np.ndarray], call_cause: list[np.ndarray]
) -> None:
    """Each call of the kind that met one of these pieces counts once, at the first instant it did."""
    sel = th.call_cause == cause
    c_lo, c_hi = th.call_lo[sel], th.call_hi[sel]
    if not len(lo) or not len(c_lo):
        return
    j = np.searchsorted(hi, c_lo, side="right")
    ok = (j < len(lo)) & (lo[np.clip(j, 0, len(lo) - 1)] < c_hi)
    call_at.append(np.maximum(c_lo[ok], lo[j[ok]]))
    call_cause.append(np.full(int(ok.sum()), cause, np.int8))
