"""Host time by Python frame: sampled Python stacks (py-spy) put on the trace's clock and joined to
the host-idle pieces (docs/analysis.md, "Host time by Python frame").

1. **Frames.** Each sampled frame is *project* (the code under study: vLLM, the AFD plugin, the
   user's own files), *library* (the standard library, site-/dist-packages, frozen modules,
   dbo-trace's own hooks) or py-spy's process/thread pseudo-frame (`frame_kind`). Per stack (a node
   of the samples' tree): the innermost project frame, the library frame it called into (the
   outermost library frame below it) and the innermost library frame.
2. **Clock** (`align`): py-spy's `ts` counts from its own start; the manifest's `started_unix_ns`
   (time.time_ns() just before py-spy was spawned) puts it on the trace's clock (Kineto's
   `ts + baseTimeNanoseconds/1000` is time.time_ns()/1000) late by py-spy's start-up. Then the
   shift is refined on **anchors**, functions whose sampled spans the trace also records as CPU
   ranges: vLLM's model runner `execute_model` (the step annotation `execute_...` wraps it) and any
   function a user annotation (`record_function`) is named after. A sample sees a range from the
   first sample after it starts until the first sample after it ends, so both edges of a sampled
   span are late by a uniform 0 .. one sampling period (longer where py-spy stalls): the shift is the
   one that makes the edges' lower quartile of lateness a quarter period (accuracy about
   period / (2 sqrt(edges))).
3. **Pieces** (`host_stacks`): every host-idle piece (analysis/host/host_time.py) is cut by the stacks its
   thread was sampled in; aggregated by cause and frame.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.host.host_time import CAUSES, HostPieces
from dbo_trace.analysis.host.sorted_pairs import _window_pairs
from dbo_trace.analysis.intervals import union
from dbo_trace.trace.pystacks import StackSamples

META, PROJECT, LIBRARY = 0, 1, 2
PROJECT_PACKAGES = ("vllm", "afd_plugin")  # packages under study wherever they are installed
TOOL_PACKAGES = ("dbo_trace",)  # dbo-trace's own hooks wrap vLLM's functions: never the project
_STDLIB = re.compile(r"/lib/python\d+(\.\d+)?t?/")
_SITE = re.compile(r"/(site|dist)-packages/")
STEP_ANNOTATION = re.compile(r"^execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)$", re.S)
SEARCH_EARLY_US = 50_000.0  # how far before started_unix_ns py-spy's clock may be taken to start
SEARCH_LATE_US = 3_000_000.0  # how far after (py-spy's start-up and attach)
PROFILER_START_SLACK_US = 40_000.0  # how long before the profiler's start returns its first event may be recorded
PROFILER_START_EARLY_US = 5_000.0  # and how long after
_BIN_US = 200.0  # the coarse search's resolution
MIN_ANCHOR_EDGES = 4
NO_FRAME = -1
TOP_ROWS = 20


def frame_kind(function: str, filename: str) -> int:
    """META (py-spy's process/thread pseudo-frames), PROJECT or LIBRARY (module docstring)."""
    if not filename:
        return META if function.startswith(("process ", "thread (")) else LIBRARY
    if filename.startswith("<"):
        return LIBRARY  # <frozen importlib._bootstrap>, <string>
    parts = filename.replace("\\", "/").split("/")
    if any(p in TOOL_PACKAGES for p in parts[:-1]):
        return LIBRARY
    if any(p in PROJECT_PACKAGES for p in parts[:-1]):
        return PROJECT
    if _SITE.search(filename) or _STDLIB.search(filename):
        return LIBRARY
    return PROJECT


def module_of(filename: str) -> str:
    """The frame's module as Python names it: `importlib._bootstrap`, `torch.nn.modules.module`,
    `vllm.v1.worker.gpu_model_runner`; a file outside any known root by its name."""
    if filename.startswith("<frozen ") and filename.endswith(">"):
        return filename[8:-1]
    path = filename.replace("\\", "/")
    for root in (_SITE, _STDLIB):
        m = root.search(path)
        if m:
            path = path[m.end() :]
            break
    else:
        parts = path.split("/")
        for i, p in enumerate(parts[:-1]):
            if p in PROJECT_PACKAGES or p in TOOL_PACKAGES:
                path = "/".join(parts[i:])
                break
        else:
            path = parts[-1]
    if path.endswith(".py"):
        path = path[:-3]
    if path.endswith("/__init__"):
        path = path[: -len("/__init__")]
    return path.replace("/", ".") or filename


def frame_label(function: str, filename: str) -> str:
    """`module:function`, e.g. `importlib._bootstrap:_find_and_load`."""
    return f"{module_of(filename)}:{function}" if filename else function


@dataclass(frozen=True)
class NodeFrames:
    """Per stack (node): its innermost project frame, the library frame that project frame called
    (the outermost library frame below it), and the innermost library frame below it (frame ids, -1
    none). Without a project frame in the stack, the library frames are the whole stack's."""

    project: np.ndarray
    entry: np.ndarray
    inner: np.ndarray


def node_frames(samples: StackSamples) -> NodeFrames:
    kinds = np.fromiter((frame_kind(f, p) for f, p, _ in samples.frames), np.int8, len(samples.frames))
    n = len(samples.node_parent)
    project = np.full(n, NO_FRAME, np.int32)
    entry = np.full(n, NO_FRAME, np.int32)
    inner = np.full(n, NO_FRAME, np.int32)
    parent = samples.node_parent.tolist()
    frame = samples.node_frame.tolist()
    kind = kinds.tolist()
    pr, en, inn = [NO_FRAME] * n, [NO_FRAME] * n, [NO_FRAME] * n
    for i in range(1, n):  # a parent is always created before its children
        p, f = parent[i], frame[i]
        k = kind[f]
        if k == PROJECT:
            pr[i], en[i], inn[i] = f, NO_FRAME, NO_FRAME
        elif k == LIBRARY:
            pr[i], en[i], inn[i] = pr[p], (en[p] if en[p] != NO_FRAME else f), f
        else:
            pr[i], en[i], inn[i] = pr[p], en[p], inn[p]
    project[:] = pr
    entry[:] = en
    inner[:] = inn
    return NodeFrames(project, entry, inner)


# ---- the clock ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackClock:
    """How the samples were put on the trace's clock: trace us = py-spy us + offset_us."""

    method: str  # "anchors" (refined), "profiler start, anchors" (refined near the profiler's start) or "start" (started_unix_ns alone)
    offset_us: float
    accuracy_us: float | None  # expected (1 sigma) where anchored; None: only the start-up bound
    anchors: str | None  # what was matched
    edges: int  # sampled span edges matched to the trace's
    overlap: float | None  # share of the sampled anchor time inside the trace's anchor ranges, once aligned
    startup_us: float | None  # the refinement's shift: py-spy's start-up, as measured


def anchor_names(names: list[str], cpu_name: np.ndarray, cpu_is_annotation: np.ndarray) -> dict[int, str]:
    """The trace's CPU range names that anchor (name index -> what it anchors on): vLLM's step
    annotations anchor on the model runner's execute_model; every other user annotation on a
    function of its name."""
    used = np.unique(cpu_name[cpu_is_annotation]).tolist()
    out = {}
    for i in used:
        name = names[i]
        if STEP_ANNOTATION.match(name):
            out[i] = "execute_model"
        elif name.isidentifier():  # a function's name; not dbo-trace's `dbo:...` nor ProfilerStep#N
            out[i] = name
    return out


def _anchor_frames(samples: StackSamples, functions: set[str]) -> np.ndarray:
    """Per frame: does it anchor (its function, or the part after the last dot, is one of these;
    execute_model only in a model runner's file)."""
    out = np.zeros(len(samples.frames), bool)
    for i, (fn, path, _) in enumerate(samples.frames):
        bare = fn.rsplit(".", 1)[-1]
        if bare == "execute_model":
            out[i] = "execute_model" in functions and "model_runner" in path
        elif fn in functions or bare in functions:
            out[i] = bool(path)
    return out


def _spans_with(samples: StackSamples, in_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The threads' stretches spent inside a marked frame: consecutive segments of a thread that
    touch are one span."""
    sel = in_node[samples.seg_node]
    a, b, t = samples.seg_start[sel], samples.seg_end[sel], samples.seg_thread[sel]
    if not len(a):
        return a, b
    new = np.r_[True, (t[1:] != t[:-1]) | (a[1:] > b[:-1])]
    heads = np.flatnonzero(new)
    ends = np.r_[heads[1:] - 1, len(a) - 1]
    order = np.argsort(a[heads], kind="stable")
    return a[heads][order], b[ends][order]


def _marked_nodes(samples: StackSamples, frame_marked: np.ndarray) -> np.ndarray:
    parent, frame = samples.node_parent.tolist(), samples.node_frame.tolist()
    marked = frame_marked.tolist()
    out = [False] * len(parent)
    for i in range(1, len(parent)):
        out[i] = out[parent[i]] or marked[frame[i]]
    return np.array(out, bool)


def _overlap(a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray) -> float:
    """Total overlap of two sorted lists of disjoint intervals."""
    first = np.searchsorted(b_hi, a_lo, side="right")
    last = np.searchsorted(b_lo, a_hi, side="left")
    total = 0.0
    for i in np.flatnonzero(last > first).tolist():
        j = np.arange(first[i], last[i])
        total += float(np.clip(np.minimum(a_hi[i], b_hi[j]) - np.maximum(a_lo[i], b_lo[j]), 0, None).sum())
    return total


_PROFILER_FILE = re.compile(r"torch/(profiler|autograd)/")
_PROFILER_START = re.compile(r"^(profile\.__enter__|(_KinetoProfile|profile)\.(start|start_trace|prepare_trace))$")


def _profiler_start_end(samples: StackSamples) -> float | None:
    """When the samples last saw the torch profiler starting (`profile.__enter__`, `start`,
    `prepare_trace`, ...): py-spy's clock, or None where they never did. The trace's first event
    follows it (the profiler records from the end of its start; one start per recording)."""
    marked = np.array([bool(_PROFILER_START.match(f)) and bool(_PROFILER_FILE.search(p)) for f, p, _ in samples.frames], bool)
    if not marked.any():
        return None
    _lo, hi = _spans_with(samples, _marked_nodes(samples, marked))
    return float(hi.max()) if len(hi) else None


def _coarse_shift(
    s_lo: np.ndarray, s_hi: np.ndarray, r_lo: np.ndarray, r_hi: np.ndarray, early: float, late: float
) -> float:
    """The shift d in [early, late] at which the sampled spans + d overlap the ranges most: the
    cross-correlation of the two coverings, binned, by FFT."""
    lo = min(float(s_lo.min()) - SEARCH_EARLY_US, float(r_lo.min()) - SEARCH_LATE_US)
    hi = max(float(s_hi.max()) + SEARCH_LATE_US, float(r_hi.max()) + SEARCH_EARLY_US)
    n = int(math.ceil((hi - lo) / _BIN_US)) + 1
    if n > 1 << 24:  # over an hour of window at this resolution: coarser bins
        scale = n / (1 << 24)
        bin_us = _BIN_US * scale
        n = 1 << 24
    else:
        bin_us = _BIN_US

    def cover(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x = np.zeros(n + 1)
        np.add.at(x, np.clip(((a - lo) / bin_us).astype(np.int64), 0, n), 1.0)
        np.add.at(x, np.clip(((b - lo) / bin_us).astype(np.int64), 0, n), -1.0)
        return np.minimum(np.cumsum(x[:n]), 1.0)

    s, r = cover(s_lo, s_hi), cover(r_lo, r_hi)
    size = 1 << int(math.ceil(math.log2(2 * n)))
    corr = np.fft.irfft(np.fft.rfft(r, size) * np.conj(np.fft.rfft(s, size)), size)  # corr[k] = sum r[i + k] s[i]
    shifts = np.r_[np.arange(0, size // 2), np.arange(-size // 2, 0)] * bin_us
    ok = (shifts >= early) & (shifts <= late)
    if not ok.any():
        ok = np.abs(shifts - (early + late) / 2) == np.abs(shifts - (early + late) / 2).min()
    best = np.flatnonzero(ok)[int(np.argmax(corr[ok]))]
    return float(shifts[best])


def align(
    samples: StackSamples,
    *,
    base_time_ns: int | None,
    names: list[str],
    cpu_start: np.ndarray,  # (n_cpu,) float64
    cpu_end: np.ndarray,  # (n_cpu,) float64
    cpu_name: np.ndarray,  # (n_cpu,) int32 into names
    cpu_is_annotation: np.ndarray,  # (n_cpu,) bool
    trace_first_us: float | None = None,  # the trace's first event
    period_us: float | None = None,
) -> StackClock | None:
    """The samples on the trace's clock (module docstring, 2), or None where the trace or the
    samples say nothing about their clocks (no baseTimeNanoseconds, no started_unix_ns)."""
    if base_time_ns is None or samples.started_unix_ns is None:
        return None
    offset = (samples.started_unix_ns - base_time_ns) / 1000.0
    period = period_us or (1e6 / samples.rate_hz if samples.rate_hz else 10_000.0)
    anchors = anchor_names(names, cpu_name, cpu_is_annotation)
    start_only = StackClock("start", offset, None, None, 0, None, None)
    if not anchors:
        return start_only
    marked = _anchor_frames(samples, set(anchors.values()))
    if not marked.any():
        return start_only
    s_lo, s_hi = _spans_with(samples, _marked_nodes(samples, marked))
    sel = np.isin(cpu_name, list(anchors)) & cpu_is_annotation
    r_lo, r_hi = union(cpu_start[sel], cpu_end[sel])
    if len(s_lo) < 2 or not len(r_lo):
        return start_only
    s_lo, s_hi = s_lo + offset, s_hi + offset
    # Where the samples saw the profiler start: its sampled end is late by up to a period, and the
    # trace's first event comes at or before its true end (on a GPU the start's own CUDA calls are
    # recorded: 20 ms before it returned on the H200): the shift is at least the guess below, and
    # not much more. The search is narrowed to that, so that evenly spaced steps cannot alias.
    early, late, narrowed = -SEARCH_EARLY_US, SEARCH_LATE_US, False
    started = _profiler_start_end(samples)
    if started is not None and trace_first_us is not None:
        guess = trace_first_us - (started + offset)
        if early - PROFILER_START_SLACK_US <= guess <= late + PROFILER_START_SLACK_US:
            early, late = guess - PROFILER_START_EARLY_US, guess + period + PROFILER_START_SLACK_US
            narrowed = True
    d = _coarse_shift(s_lo, s_hi, r_lo, r_hi, early, late)
    # Pair each sampled span with the range it overlaps most at that shift; both edges of a pair.
    a, b = s_lo + d, s_hi + d
    first = np.searchsorted(r_hi, a, side="right")
    last = np.searchsorted(r_lo, b, side="left")
    lateness = []
    used: set[int] = set()
    for i in range(len(a)):
        js = range(int(first[i]), int(last[i]))
        if not js:
            continue
        j = max(js, key=lambda j: min(b[i], r_hi[j]) - max(a[i], r_lo[j]))
        if j in used:
            continue
        used.add(j)
        lateness += [a[i] - r_lo[j], b[i] - r_hi[j]]
    matched = {samples.frames[i][0].rsplit(".", 1)[-1] for i in np.flatnonzero(marked).tolist()}
    found = ", ".join(sorted(matched))[:200]
    if len(lateness) < MIN_ANCHOR_EDGES:
        return start_only
    edges = np.array(lateness)
    late = edges[np.abs(edges - np.median(edges)) <= 3 * period]  # a merged or split span is no edge
    if len(late) < MIN_ANCHOR_EDGES:
        return start_only
    # Late by the wait for the next sample: uniform over a period where py-spy keeps its rate, with
    # a long right tail where it stalls (a busy machine). The lower quartile is period / 4 either way.
    shift = d - (float(np.percentile(late, 25)) - period / 4)
    aligned = _overlap(s_lo + shift, s_hi + shift, r_lo, r_hi)
    sampled = float((s_hi - s_lo).sum())
    return StackClock(
        offset_us=offset + shift,
        method="profiler start, anchors" if narrowed else "anchors",
        accuracy_us=period / (2 * math.sqrt(len(late))),
        anchors=found,
        edges=len(late),
        overlap=aligned / sampled if sampled > 0 else None,
        startup_us=shift,
    )


# ---- threads ---------------------------------------------------------------------------------------


def thread_of_lane(
    samples: StackSamples, pid: int | None, lanes: np.ndarray, log_native: dict[int, int] | None = None
) -> dict[int, int]:
    """Trace thread id (lane) -> sampled thread (index into samples.threads), for the process pid.
    Kineto names a Python thread's CUDA calls by the low 32 bits of its pthread id
    (threading.get_ident(), py-spy's tid) and the main thread's, and CPU operators, by the native id:
    py-spy's `--threads` frames or the event log (ident -> native id) give that; without either, the
    lane equal to the process id is the main thread, the one sampled thread not started by threading."""
    out: dict[int, int] = {}
    mine = [i for i, (p, _) in enumerate(samples.threads) if pid is None or p == pid]
    wanted = set(np.unique(lanes).tolist())
    for i in mine:
        tid = samples.threads[i][1]
        keys = {tid, tid & 0xFFFFFFFF}
        native = samples.native.get(i)
        if native is None and log_native:
            native = log_native.get(tid)
        if native is not None:
            keys.add(native)
        for k in keys & wanted:
            out.setdefault(k, i)
    if pid is not None and pid in wanted and pid not in out:
        main = [i for i in mine if not _started_by_threading(samples, i)]
        if len(main) == 1:
            out[pid] = main[0]
    return out


def _started_by_threading(samples: StackSamples, thread: int) -> bool:
    """Its outermost Python frame is threading's bootstrap (py-spy 0.4: `Thread._bootstrap`)."""
    sel = np.flatnonzero(samples.seg_thread == thread)
    if not len(sel):
        return True
    node = int(samples.seg_node[sel[0]])
    parent, frame = samples.node_parent, samples.node_frame
    outer = -1
    while node:
        f = samples.frames[int(frame[node])]
        if f[1]:
            outer = int(frame[node])
        node = int(parent[node])
    if outer < 0:
        return True  # no Python frame at all (py-spy's thread of id 0 in vLLM's engine core): not the main thread
    fn, path, _ = samples.frames[outer]
    return fn.rsplit(".", 1)[-1] == "_bootstrap" and path.endswith("threading.py")


# ---- pieces ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackPieces:
    """The host-idle pieces cut by the sampled stack of their thread: sorted, disjoint."""

    lo: np.ndarray
    hi: np.ndarray
    cause: np.ndarray  # host_time cause of the piece
    project: np.ndarray  # frame ids, -1 none; all -1 where the thread was not sampled then
    entry: np.ndarray
    inner: np.ndarray
    sampled: np.ndarray  # bool: the thread had a sample there


@dataclass(frozen=True)
class StackRow:
    cause: str
    project: str | None
    library: str | None  # the library call the project frame made (outermost library frame below it)
    inner: str | None  # the innermost library frame
    us: float
    share: float | None  # of the host idle measured


@dataclass(frozen=True)
class HostStacks:
    """Host-caused GPU idle by sampled Python frame over a window."""

    samples: str  # the file
    rate_hz: float | None
    clock: StackClock
    host_idle_us: float
    sampled_us: float  # host idle in which the thread followed had a sample
    untraced_us: float  # host_time's untraced bucket (before the frames)
    unexplained_us: float  # untraced and not sampled either
    by_cause_us: dict[str, float]  # sampled time per host_time cause
    rows: tuple[StackRow, ...]  # largest first

    def percent_of(self, us: float) -> float | None:
        """A part of the host idle in percent (None: no host idle)."""
        return 100 * us / self.host_idle_us if self.host_idle_us > 0 else None


def stack_pieces(
    pieces: HostPieces,
    samples: StackSamples,
    frames: NodeFrames,
    clock: StackClock,
    lane_thread: dict[int, int],
) -> StackPieces:
    """Cut every piece by the segments of the sampled thread its lane maps to."""
    out_lo, out_hi, out_k, out_node = [], [], [], []
    seg_thread = samples.seg_thread
    lanes = pieces.lane
    for lane, th in lane_thread.items():
        sel = np.flatnonzero(lanes == lane)
        if not len(sel):
            continue
        segs = np.flatnonzero(seg_thread == th)
        a = samples.seg_start[segs] + clock.offset_us
        b = samples.seg_end[segs] + clock.offset_us
        p_lo, p_hi = pieces.lo[sel], pieces.hi[sel]
        first = np.searchsorted(b, p_lo, side="right")
        last = np.searchsorted(a, p_hi, side="left")
        counts = np.maximum(last - first, 0)
        ia = np.repeat(np.arange(len(sel)), counts)
        ib = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
        lo = np.maximum(p_lo[ia], a[ib])
        hi = np.minimum(p_hi[ia], b[ib])
        keep = hi > lo
        out_lo.append(lo[keep])
        out_hi.append(hi[keep])
        out_k.append(sel[ia[keep]])
        out_node.append(samples.seg_node[segs][ib[keep]])
    lo = np.concatenate(out_lo) if out_lo else np.empty(0)
    hi = np.concatenate(out_hi) if out_hi else np.empty(0)
    k = np.concatenate(out_k) if out_k else np.empty(0, np.int64)
    node = np.concatenate(out_node) if out_node else np.empty(0, np.int32)
    order = np.argsort(lo, kind="stable")
    lo, hi, k, node = lo[order], hi[order], k[order], node[order]
    return StackPieces(
        lo=lo,
        hi=hi,
        cause=pieces.cause[k],
        project=frames.project[node],
        entry=frames.entry[node],
        inner=frames.inner[node],
        sampled=np.ones(len(lo), bool),
    )


def host_stacks(
    pieces: HostPieces,
    stacks: StackPieces,
    samples: StackSamples,
    clock: StackClock,
    lo: np.ndarray,
    hi: np.ndarray,
    host_idle_us: float,
    untraced_us: float,
    top: int = TOP_ROWS,
) -> HostStacks:
    """The sampled frames of the host idle inside the windows [lo, hi] (disjoint, sorted)."""
    _win, piece, length = _window_pairs(stacks.lo, stacks.hi, np.asarray(lo, float), np.asarray(hi, float))
    totals: dict[tuple[int, int, int, int], float] = {}
    for key, t in zip(
        zip(
            stacks.cause[piece].tolist(), stacks.project[piece].tolist(), stacks.entry[piece].tolist(), stacks.inner[piece].tolist()
        ),
        length.tolist(),
    ):
        if t > 0:
            totals[key] = totals.get(key, 0.0) + t
    labels = [frame_label(f, p) for f, p, _ in samples.frames]
    by_cause: dict[str, float] = {}
    merged: dict[tuple[str, str | None, str | None, str | None], float] = {}
    for (cause, pr, en, inn), t in totals.items():
        name = CAUSES[cause]
        by_cause[name] = by_cause.get(name, 0.0) + t
        key = (name, labels[pr] if pr >= 0 else None, labels[en] if en >= 0 else None, labels[inn] if inn >= 0 else None)
        merged[key] = merged.get(key, 0.0) + t
    rows = sorted(merged.items(), key=lambda x: (-x[1], x[0][0], x[0][1] or "", x[0][2] or "", x[0][3] or ""))[:top]
    sampled = float(sum(totals.values()))
    untraced_sampled = by_cause.get("untraced", 0.0)
    return HostStacks(
        clock=clock,
        samples=samples.path,
        rate_hz=samples.rate_hz,
        host_idle_us=host_idle_us,
        sampled_us=sampled,
        untraced_us=untraced_us,
        unexplained_us=max(0.0, untraced_us - untraced_sampled),
        rows=tuple(
            StackRow(c, p, e, i, t, t / host_idle_us if host_idle_us > 0 else None) for (c, p, e, i), t in rows
        ),
        by_cause_us=by_cause,
    )


@dataclass(frozen=True)
class SampleTrack:
    """One sampled thread's stacks on the trace's clock over the rank's window, for a timeline:
    each stretch named by its innermost project frame and the library call it made."""

    thread: str  # `thread <pthread id>` (and its native id and name where known)
    lo: np.ndarray
    hi: np.ndarray
    names: list[str]


@dataclass(frozen=True)
class RankStacks:
    """A rank's host time by Python frame: over its window, and per phase; the sampled threads the
    trace's threads map to, as tracks."""

    window: HostStacks
    phases: dict[str, HostStacks]
    tracks: tuple[SampleTrack, ...] = ()
    steps: tuple[StepFrame, ...] = ()  # per step, in the rank's step order


@dataclass(frozen=True)
class StepFrame:
    """A step's host idle in its most-sampled project frame (None: stacks with no project frame)."""

    project: str | None
    us: float
    sampled_us: float  # the step's host idle that had a sample


def step_frames(stacks: StackPieces, samples: StackSamples, lo: np.ndarray, hi: np.ndarray) -> tuple[StepFrame, ...]:
    """Per window [lo[i], hi[i]] (a step's; they may overlap): the project frame holding most of
    its sampled host idle. Grouped sums, no loop over steps' pieces."""
    n = len(lo)
    if not n:
        return ()
    win, piece, length = _window_pairs(stacks.lo, stacks.hi, np.asarray(lo, float), np.asarray(hi, float))
    keep = length > 0
    win, piece, length = win[keep], piece[keep], length[keep]
    sampled = np.bincount(win, weights=length, minlength=n)
    frame = stacks.project[piece].astype(np.int64) + 1  # 0: no project frame
    width = int(frame.max(initial=0)) + 1
    keys, inverse = np.unique(win.astype(np.int64) * width + frame, return_inverse=True)
    totals = np.bincount(inverse, weights=length)
    k_win, k_frame = keys // width, keys % width
    # per window its largest total (ties: the lower frame id), by one sort
    order = np.lexsort((k_frame, -totals, k_win))
    firsts = order[np.r_[True, k_win[order][1:] != k_win[order][:-1]]] if len(order) else order
    labels = [frame_label(f, p) for f, p, _ in samples.frames]
    out = [StepFrame(None, 0.0, float(sampled[i])) for i in range(n)]
    for j in firsts.tolist():
        w, f = int(k_win[j]), int(k_frame[j])
        out[w] = StepFrame(labels[f - 1] if f > 0 else None, float(totals[j]), float(sampled[w]))
    return tuple(out)


def sample_tracks(
    samples: StackSamples, frames: NodeFrames, clock: StackClock, threads: list[int], window: tuple[float, float]
) -> tuple[SampleTrack, ...]:
    labels = [frame_label(f, p) for f, p, _ in samples.frames]
    out = []
    for th in sorted(set(threads)):
        segs = np.flatnonzero(samples.seg_thread == th)
        lo = np.maximum(samples.seg_start[segs] + clock.offset_us, window[0])
        hi = np.minimum(samples.seg_end[segs] + clock.offset_us, window[1])
        keep = hi > lo
        nodes = samples.seg_node[segs][keep]
        names = [
            (labels[p] if p >= 0 else "(no project frame)") + (f" > {labels[e]}" if e >= 0 else "")
            for p, e in zip(frames.project[nodes].tolist(), frames.entry[nodes].tolist())
        ]
        t_lo: list[float] = []
        t_hi: list[float] = []
        t_names: list[str] = []
        for a, b, n in zip(lo[keep].tolist(), hi[keep].tolist(), names):
            if t_names and t_names[-1] == n and t_hi[-1] >= a:
                t_hi[-1] = b
            else:
                t_lo.append(a)
                t_hi.append(b)
                t_names.append(n)
        tid = samples.threads[th][1]
        native = samples.native.get(th)
        name = f"thread {tid:#x}" + (f" ({native})" if native is not None else "")
        if th in samples.thread_names:
            name += f" {samples.thread_names[th]}"
        out.append(SampleTrack(name, np.array(t_lo), np.array(t_hi), t_names))
    return tuple(out)


def rank_host_stacks(
    *,
    samples: list[StackSamples],
    pieces: HostPieces,
    pid: int | None,
    base_time_ns: int | None,
    names: list[str],
    call_lane: np.ndarray,  # (n_calls,) int64
    cpu_start: np.ndarray,  # (n_cpu,) float64
    cpu_end: np.ndarray,  # (n_cpu,) float64
    cpu_name: np.ndarray,  # (n_cpu,) int32
    cpu_lane: np.ndarray,  # (n_cpu,) int64
    cpu_is_annotation: np.ndarray,  # (n_cpu,) bool
    log_native: dict[int, int],  # the event log's thread idents -> native ids
    window: tuple[float, float],
    host_idle_us: float,
    untraced_us: float,
    phases: list[tuple[str, np.ndarray, np.ndarray, float, float]],  # (phase, step lo, step hi, host idle, untraced)
    steps: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0)),  # every step's window, in order
) -> tuple[RankStacks | None, list[str]]:
    """The first samples file of this process that can be aligned: its frames over the rank's host
    idle (and a note for each file that could not be used)."""
    notes = []
    for s in samples:
        clock = align(
            s, base_time_ns=base_time_ns, names=names, cpu_start=cpu_start, cpu_end=cpu_end, cpu_name=cpu_name,
            cpu_is_annotation=cpu_is_annotation, trace_first_us=window[0],
        )  # fmt: skip
        if clock is None:
            notes.append(
                f"{s.path}: the Python stack samples cannot be put on the trace's clock "
                "(the trace has no baseTimeNanoseconds or the manifest no started_unix_ns)"
            )
            continue
        lanes = np.unique(np.r_[call_lane, cpu_lane, pieces.lane]).astype(np.int64)
        lane_thread = thread_of_lane(s, pid, lanes, log_native)
        if not lane_thread:
            notes.append(f"{s.path}: no sampled thread of process {pid} matches a thread of the trace")
            continue
        frames = node_frames(s)
        cut = stack_pieces(pieces, s, frames, clock, lane_thread)
        whole = host_stacks(pieces, cut, s, clock, np.array([window[0]]), np.array([window[1]]), host_idle_us, untraced_us)
        by_phase = {}
        for name, lo, hi, idle, untraced in phases:
            u_lo, u_hi = union(lo, hi)
            by_phase[name] = host_stacks(pieces, cut, s, clock, u_lo, u_hi, idle, untraced, top=10)
        tracks = sample_tracks(s, frames, clock, list(lane_thread.values()), window)
        return RankStacks(whole, by_phase, tracks, step_frames(cut, s, *steps)), notes
    return None, notes


def log_natives(records: list[list[object]], headers: list[dict[str, object]]) -> dict[int, int]:
    """Thread ident -> native id, from hook event logs (their header's main thread and every record)."""
    out: dict[int, int] = {}
    for h in headers:
        ident, native = h.get("main_ident"), h.get("main_native_tid")
        if type(ident) is int and type(native) is int:
            out[ident] = native
    for r in records:
        ident, native = r[2], r[3]
        if type(ident) is int and type(native) is int and native > 0:
            out.setdefault(ident, native)
    return out
