"""Where the steps are: from the best source a trace offers, each with its phase where known.

Sources, best first (docs/analysis.md, "Steps"):
1. the user's --step-marker REGEX (an explicit choice wins over every guess);
2. the plugin's event log (one step per UBatchWrapper call), else its `dbo:step#<n>:<path>` ranges
   (NVTX in Nsight Systems, record_function in torch traces);
3. vLLM's own step annotations `execute_context_<n>(<tok>)_generation_<m>(<tok>)` and the
   detailed form `execute_<tok>_context_<n>(sq..)_generation_<m>(sq..)` (vllm/v1/worker/gpu_worker.py);
4. `ProfilerStep#N` (torch profiler with a schedule), else training iterations from the
   `Optimizer.step#...` annotations torch writes every iteration;
5. `gpu_model_runner: ...` ranges of vLLM's model runner, grouped from one `preprocess` to the next;
6. long GPU idle gaps (inferred);
7. the whole trace (inferred).
An AFD FFN rank's steps are its attention's on the pair's clock (partner_steps), after 1.
Steps from 1-5 are markers; 6-7 are inferred, and the output says so. A step's phase (prefill,
decode, mixed) comes from the vLLM annotation that holds its start, whatever the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dbo_trace import bundle as fmt
from dbo_trace.analysis.intervals import gaps
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.timeline import Timeline, starts_with

SOURCE_MARKER = "--step-marker ranges"
SOURCE_EVENT_LOG = "event log"
SOURCE_HOOK_RANGES = "dbo step ranges"
SOURCE_VLLM = "vLLM execute_* annotations"
SOURCE_PROFILER_STEP = "ProfilerStep# annotations"
SOURCE_OPTIMIZER = "Optimizer.step# annotations (training iterations)"
SOURCE_MODEL_RUNNER = "vLLM gpu_model_runner ranges"
SOURCE_GAPS = "GPU idle gaps (inferred: no step markers)"
SOURCE_WHOLE = "whole trace (inferred: no step markers)"
SOURCE_PAIR = "the attention's steps on the pair's clock"
INFERRED_SOURCES = (SOURCE_GAPS, SOURCE_WHOLE)

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
PHASES = (PREFILL, DECODE, MIXED)

# execute_context_2(1024)_generation_3(3)  |  execute_1027_context_2(sq1024sk..)_generation_3(sq3sk..)
_VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)[^)]*\)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
_HOOK_STEP = re.compile(r"^dbo:step#(\d+):(\w+)$")  # the plugin's range around each UBatchWrapper call
MODEL_RUNNER_PREFIX = "gpu_model_runner: "  # vLLM's model runner's ranges (host_time names host idle by them too)
_MODEL_RUNNER_FIRST = "gpu_model_runner: preprocess"
# Each pattern's literal start as a hint (timeline.names_hinted): a long run's 100,000 ProfilerStep#
# names are searched for it at once, not each tested by the pattern.
HINTS = {
    _VLLM_STEP: starts_with("execute_"),
    _OPTIMIZER_STEP: starts_with("Optimizer.step#"),
    _ZERO_GRAD: starts_with("Optimizer.zero_grad#"),
    _HOOK_STEP: starts_with("dbo:step#"),
}
MODEL_RUNNER_HINT = starts_with(MODEL_RUNNER_PREFIX)

STEP_GAP_MIN_US = 1000.0  # a GPU idle gap this long (and >= 20x the median gap) separates inferred steps
STEP_GAP_FACTOR = 20.0


@dataclass(frozen=True)
class Steps:
    start: np.ndarray  # CPU window on the trace clock (us), sorted, disjoint
    end: np.ndarray
    label: list[str]
    path: list[str | None]  # UBatchWrapper path, where the event log knows it
    source: str
    phase: list[str | None] = field(default_factory=list)  # prefill / decode / mixed, where vLLM says
    context_tokens: list[int | None] = field(default_factory=list)
    generation_tokens: list[int | None] = field(default_factory=list)
    partner: bool = False  # an AFD FFN rank's steps, its attention's (partner_steps)

    def __post_init__(self) -> None:
        n = len(self.start)
        for name in ("phase", "context_tokens", "generation_tokens"):
            if not getattr(self, name):
                object.__setattr__(self, name, [None] * n)  # frozen: the one fill-in, at construction

    def __len__(self) -> int:
        return len(self.start)

    @property
    def inferred(self) -> bool:
        return self.source in INFERRED_SOURCES

    def take(self, keep: np.ndarray) -> "Steps":
        pick = [int(i) for i in keep]
        return Steps(
            self.start[keep],
            self.end[keep],
            [self.label[i] for i in pick],
            [self.path[i] for i in pick],
            self.source,
            [self.phase[i] for i in pick],
            [self.context_tokens[i] for i in pick],
            [self.generation_tokens[i] for i in pick],
            self.partner,
        )


def decode_requests(label: str) -> int | None:
    """The decode (generation) requests a vLLM step annotation names; None: not vLLM's annotation."""
    m = _VLLM_STEP.match(label)
    return int(m.group(3)) if m else None


def phase_of(context_requests: int, generation_requests: int) -> str | None:
    """vLLM's counts: prefill (context) requests only, decode (generation) only, or both."""
    if context_requests and generation_requests:
        return MIXED
    if context_requests:
        return PREFILL
    if generation_requests:
        return DECODE
    return None


def _from_rows(rows: list[tuple[Any, ...]], source: str) -> Steps | None:
    """rows: (start, end, label[, phase, context tokens, generation tokens[, path]]); overlapping rows keep
    the outer one."""
    if not rows:
        return None
    rows.sort(key=lambda r: (r[0], -r[1]))
    kept = []
    last_end = -np.inf
    for row in rows:
        if row[0] >= last_end:  # nested or overlapping markers (a range inside a step) are not steps of their own
            kept.append(row)
            last_end = row[1]
    return Steps(
        np.array([r[0] for r in kept], float),
        np.array([r[1] for r in kept], float),
        [r[2] for r in kept],
        [r[6] if len(r) > 6 else None for r in kept],
        source,
        [r[3] if len(r) > 3 else None for r in kept],
        [r[4] if len(r) > 4 else None for r in kept],
        [r[5] if len(r) > 5 else None for r in kept],
    )


def vllm_steps(tl: Timeline) -> Steps | None:
    rows = []
    for start, end, name, m in tl.cpu_ranges_named(_VLLM_STEP.match, hint=HINTS[_VLLM_STEP]):
        ctx_req, ctx_tok, gen_req, gen_tok = (int(g) for g in m.groups())
        rows.append((start, end, name, phase_of(ctx_req, gen_req), ctx_tok, gen_tok))
    return _from_rows(rows, SOURCE_VLLM)


def hook_steps(tl: Timeline) -> Steps | None:
    """The plugin's own step ranges, with their path, where its event log is not at hand."""
    rows = [(s, e, f"step {m.group(1)}", None, None, None, m.group(2)) for s, e, _n, m in tl.cpu_ranges_named(_HOOK_STEP.match, hint=HINTS[_HOOK_STEP])]
    return _from_rows(rows, SOURCE_HOOK_RANGES)


def profiler_steps(tl: Timeline) -> Steps | None:
    return _named_ranges(tl, _PROFILER_STEP.match, SOURCE_PROFILER_STEP)


def _named_ranges(tl: Timeline, match: Callable[[str], Any], source: str) -> Steps | None:
    """The CPU ranges whose name match() accepts as steps, labelled by their names, as _from_rows
    makes them (by start, the longer first where two start together; a range that begins inside the
    last kept one is not a step of its own), with no object per range where none nests."""
    sel, _hits = tl.cpu_ranges_matching(match)
    if not len(sel):
        return None
    start, end, name = tl.cpu.start[sel].astype(float), tl.cpu.end[sel].astype(float), tl.cpu.name[sel]
    order = np.lexsort((-end, start))
    start, end, name = start[order], end[order], name[order]
    if len(start) > 1 and not (start[1:] >= np.maximum.accumulate(end)[:-1]).all():
        names = tl.names
        return _from_rows([(s, e, names[n]) for s, e, n in zip(start.tolist(), end.tolist(), name.tolist())], source)
    labels = list(map(tl.names.__getitem__, name.tolist()))
    return Steps(start, end, labels, [None] * len(labels), source)


def optimizer_steps(tl: Timeline) -> Steps | None:
    """Training iterations where no ProfilerStep# marks them. An iteration ends with its optimizers'
    step (several optimizers step one after the other: the i-th iteration ends with the last of
    their i-th steps) and begins where the previous one ended; the first begins at its zero_grad
    if one comes before, else at the trace's first host event. What follows the last optimizer
    step is a partial iteration and is left out."""
    ranges = _from_rows([(s, e, name) for s, e, name, _ in tl.cpu_ranges_named(_OPTIMIZER_STEP.match, hint=HINTS[_OPTIMIZER_STEP])], "")
    if ranges is None:
        return None
    _names, which, counts = np.unique(np.asarray(ranges.label), return_inverse=True, return_counts=True)
    which = which.reshape(-1)
    # Optimizers that step every iteration step equally often; one that steps less is not the clock.
    # The i-th iteration ends at the latest i-th step of those: each step's rank among its
    # optimizer's steps, in time order, by one stable sort (not a pass over the steps per name).
    rows = np.flatnonzero(counts[which] == counts.max())
    by_name = rows[np.argsort(which[rows], kind="stable")]
    rank = np.arange(len(by_name)) % counts.max()
    ends = np.full(counts.max(), -np.inf)
    np.maximum.at(ends, rank, ranges.end[by_name])
    zero_grad = [s for s, _e, _n, _m in tl.cpu_ranges_named(_ZERO_GRAD.match, hint=HINTS[_ZERO_GRAD]) if s < ends[0]]
    first_host = min(tl.cpu.start.min(initial=np.inf), tl.calls.start.min(initial=np.inf))
    starts = np.r_[min(zero_grad) if zero_grad else first_host, ends[:-1]]
    n = len(ends)
    labels = [f"iteration {i + 1}" for i in range(n)]
    return Steps(starts.astype(float), ends.astype(float), labels, [None] * n, SOURCE_OPTIMIZER)


def model_runner_steps(tl: Timeline) -> Steps | None:
    """From each `gpu_model_runner: preprocess` to the end of the last model-runner range before the next one."""
    ranges = sorted(tl.cpu_ranges_named(lambda n: n.startswith(MODEL_RUNNER_PREFIX), hint=MODEL_RUNNER_HINT))
    firsts = [r for r in ranges if r[2] == _MODEL_RUNNER_FIRST]
    if not firsts:
        return None
    starts = np.array([r[0] for r in firsts])
    ends = starts.copy()
    for s, e, _name, _ in ranges:
        k = np.searchsorted(starts, s, side="right") - 1
        if k >= 0:
            ends[k] = max(ends[k], e)
    rows = [(float(s), float(e), f"model runner step {i + 1}") for i, (s, e) in enumerate(zip(starts, ends))]
    return _from_rows(rows, SOURCE_MODEL_RUNNER)


def marker_steps(tl: Timeline, pattern: str) -> Steps | None:
    return _named_ranges(tl, re.compile(pattern).search, SOURCE_MARKER)


def log_steps(logs: list[EventLogData], base_time_ns: int) -> Steps | None:
    begins: dict[tuple[int, int], tuple[int, str | None]] = {}
    rows = []
    for log in logs:
        for t, kind, ident, _native, _ub, step, detail in log.records:
            if kind == fmt.EV_STEP_BEGIN:
                path = detail.get("path") if isinstance(detail, dict) else None
                begins[(ident, step)] = (t, path if isinstance(path, str) else None)  # a log is input: a path is a name
            elif kind == fmt.EV_STEP_END and (ident, step) in begins:
                t0, path = begins.pop((ident, step))
                rows.append((t0, t, f"step {step}", path))
    if not rows:
        return None
    rows.sort()
    start = log_to_trace_us(np.array([r[0] for r in rows]), base_time_ns)
    end = log_to_trace_us(np.array([r[1] for r in rows]), base_time_ns)
    return Steps(start, end, [r[2] for r in rows], [r[3] for r in rows], SOURCE_EVENT_LOG)


def log_to_trace_us(t_ns: np.ndarray, base_time_ns: int) -> np.ndarray:
    """time.time_ns() on the recording host -> the trace's microsecond clock."""
    return (np.asarray(t_ns, dtype=np.int64) - np.int64(base_time_ns)) / 1000.0


def gap_steps(tl: Timeline) -> Steps | None:
    """No markers: split the GPU timeline at idle gaps far longer than the usual one."""
    g_start, g_end = gaps(tl.gpu.start, tl.gpu.end)
    if not len(g_start):
        return None
    length = g_end - g_start
    cut = length >= max(STEP_GAP_MIN_US, STEP_GAP_FACTOR * float(np.median(length)))
    if not cut.any():
        return None
    # Windows tile the timeline: each runs from the previous gap's start to the next one's,
    # so a segment's launch calls, which precede its kernels, fall inside it.
    lo = min(tl.gpu.start.min(), tl.calls.start.min(initial=np.inf))
    bounds = np.r_[lo, g_start[cut], tl.gpu.end.max()]
    n = len(bounds) - 1
    return Steps(bounds[:-1], bounds[1:], [f"segment {i + 1}" for i in range(n)], [None] * n, SOURCE_GAPS)


def partner_steps(steps: Steps, offset_us: float) -> Steps:
    """An AFD FFN rank's steps: its attention's, moved onto the FFN's clock (offset_us: what to add to
    the attention's ts to get the FFN's). steps.end: where each attention step's GPU work ended. The
    FFN serves a step between the end of the attention's previous step and the end of this one (the
    attention's step ends on the FFN's last answer), so the windows tile those ends, the first from
    its step's start; the CPU's step starts would not do, as a host running ahead of its GPU (the
    roles time-slicing one GPU) starts a step while the GPU still serves the last one."""
    end = np.maximum.accumulate(steps.end) + offset_us if len(steps) else steps.end.copy()
    start = np.r_[steps.start[:1] + offset_us, end[:-1]]
    # no phase: a phase's figures are the served rank's (the FFN's added in would count each step twice)
    return Steps(start, end, list(steps.label), [None] * len(steps), SOURCE_PAIR, partner=True)


def whole_trace(tl: Timeline) -> Steps:
    lo = min(tl.gpu.start.min(initial=np.inf), tl.calls.start.min(initial=np.inf))
    hi = max(tl.gpu.end.max(initial=-np.inf), tl.calls.end.max(initial=-np.inf))
    return Steps(np.array([lo]), np.array([hi]), ["whole trace"], [None], SOURCE_WHOLE)


def index_in(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time, the index of the (sorted, disjoint) window containing it, or -1."""
    if not len(start):
        return np.full(len(t), -1, np.int64)
    i = np.searchsorted(start, t, side="right") - 1
    ok = (i >= 0) & (t <= end[np.clip(i, 0, None)])
    return np.where(ok, i, -1)


def _seen_by_profiler(steps: Steps, tl: Timeline) -> Steps | None:
    """The steps the profiler window saw (the log also holds warm-up and unprofiled steps)."""
    if not len(tl.calls):
        return None
    hits = index_in(steps.start, steps.end, tl.calls.start)
    inside = np.isin(np.arange(len(steps)), hits[hits >= 0])
    return steps.take(np.flatnonzero(inside)) if inside.any() else None


def _with_phases(steps: Steps, vllm: Steps | None) -> Steps:
    """Give each step the phase and token counts of the vLLM annotation that holds its start."""
    if vllm is None or steps.source == SOURCE_VLLM:
        return steps
    k = index_in(vllm.start, vllm.end, steps.start)
    for i, j in enumerate(k):
        if j >= 0:
            steps.phase[i] = vllm.phase[j]
            steps.context_tokens[i] = vllm.context_tokens[j]
            steps.generation_tokens[i] = vllm.generation_tokens[j]
    return steps


def find_steps(tl: Timeline, logs: list[EventLogData], step_marker: str | None = None, partner: Steps | None = None) -> Steps:
    """The steps of one rank's trace, from the best source it has. partner: an AFD FFN rank's
    attention steps on its clock (partner_steps): its own trace marks none, and a step is one
    forward pass of the pair, so the attention's steps are the FFN's."""
    vllm = vllm_steps(tl)
    steps = marker_steps(tl, step_marker) if step_marker else None
    steps = steps or (partner if partner is not None and len(partner) else None)
    if steps is None and logs and tl.base_time_ns is not None:
        found = log_steps(logs, tl.base_time_ns)
        steps = _seen_by_profiler(found, tl) if found else None
    steps = steps or hook_steps(tl) or vllm or profiler_steps(tl) or optimizer_steps(tl) or model_runner_steps(tl)
    steps = steps or gap_steps(tl) or whole_trace(tl)
    return _with_phases(steps, vllm)
