"""Reference figures written from the documentation alone (docs/analysis.md: "The accounting
model", "Steps", "Graph capture", "Inputs"; docs/report-schema.md) and Nsight Systems' own SQLite
schema, without reading the package's implementation and sharing no code with it: plain Python
over `sqlite3` rows and `json.load` events, times in integer nanoseconds.

What is computed, and the docs' words it follows:

- the profiled window: "from the first event of its trace (a CPU op, an annotation, a Python
  function, a CUDA/HIP runtime or driver call, a GPU activity) to the last one's end"; in an
  Nsight Systems export those are the rows of CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET,
  CUPTI_ACTIVITY_KIND_RUNTIME and NVTX_EVENTS of types 59 and 60, one rank per process that ran
  GPU work (process id in bits 24-47 of a serialized global id);
- GPU busy: the union of kernels, memcpy and memset;
- host idle: an idle stretch of the GPU is host idle when the activity that ends it was launched
  (its call joined on the correlation id) after the stretch began, or when nothing follows it (the
  tail); otherwise (launched before, or the launch is not in the trace) it is other idle;
- launch calls: the kernel launch entry points of "Host", under their plain names (nsys's
  `_v<N>` and `_ptsz`/`_ptds` suffixes dropped), a call recorded twice with one correlation id on
  one thread counted once;
- training iterations from `Optimizer.step#<Optimizer>.step` annotations ("Steps", item 4);
- captured launches: launch calls made on a thread between its cudaStreamBeginCapture and
  cudaStreamEndCapture (nested captures on one thread are one window), and the share of the
  host-idle time that lies inside those windows ("Graph capture").
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable

# "Host": launch calls, counted apart from graph launches.
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
    }
)
LAUNCH_PREFIXES = ("cudaLaunchCooperativeKernel",)  # "cudaLaunchCooperativeKernel*"

# "Graph capture": the begin/end calls of a stream capture, CUDA runtime, driver and HIP alike.
CAPTURE_BEGIN = frozenset({"cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture"})
CAPTURE_END = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})

# Kineto categories. Host: "a CPU op, an annotation, a Python function, a CUDA/HIP runtime or
# driver call" (2021 names too). GPU activity: "kernels, memcpy, memset".
KINETO_HOST_CATS = frozenset(
    {
        "cpu_op",
        "user_annotation",
        "python_function",
        "cuda_runtime",
        "cuda_driver",
        "Operator",
        "Runtime",
        "Driver",
        "Python",
    }
)
KINETO_CALL_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
KINETO_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
KINETO_KERNEL_CATS = frozenset({"kernel", "Kernel"})

_SUFFIX = re.compile(r"(_v\d+|_ptsz|_ptds)$")


def plain_name(name: str) -> str:
    """nsys's `cudaLaunchKernel_v7000`, `cudaMemcpyAsync_ptsz_v7000` -> the API's own name."""
    while True:
        stripped = _SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


def is_launch(name: str) -> bool:
    return name in LAUNCH_NAMES or name.startswith(LAUNCH_PREFIXES)


def union_length(intervals: Iterable[tuple[int, int]]) -> int:
    total = 0
    merged: list[int] = []  # [start, end] of the run being merged
    for start, end in sorted(intervals):
        if not merged or start > merged[1]:
            if merged:
                total += merged[1] - merged[0]
            merged = [start, end]
        elif end > merged[1]:
            merged[1] = end
    if merged:
        total += merged[1] - merged[0]
    return total


def idle_stretches(
    window: tuple[int, int], gpu: list[tuple[int, int, Any]], launch_start: dict[Any, int]
) -> list[tuple[int, int, str]]:
    """Every idle stretch of the GPU in the window as (begin, end, 'host'|'other').

    `gpu` holds (start, end, key) per activity, `launch_start` the start of the call that
    launched the activity with that key (absent: its launch is not in the trace)."""
    w0, w1 = window
    acts = sorted(gpu)
    out: list[tuple[int, int, str]] = []
    covered_to = w0  # the end of the GPU activity seen so far (the window's start before any)
    i = 0
    n = len(acts)
    while i < n:
        start = acts[i][0]
        if start > covered_to:
            # the activities that end this stretch start at `start`; if several start at once,
            # the stretch was host idle only where none of them had been launched before it began
            enders = [a for a in acts[i:] if a[0] == start]
            launched_before = False
            for _, _, key in enders:
                t = launch_start.get(key)
                if t is None or t <= covered_to:
                    launched_before = True
            out.append((covered_to, start, "other" if launched_before else "host"))
        while i < n and acts[i][0] == start:
            covered_to = max(covered_to, acts[i][1])
            i += 1
    if w1 > covered_to:
        out.append((covered_to, w1, "host"))  # the tail: nothing more was queued
    return out


# --- Nsight Systems exports -------------------------------------------------------------------


def _pid(global_id: int) -> int:
    return (global_id >> 24) & 0xFFFFFF


def _table_exists(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def nsys_ranks(path: str | Path) -> dict[int, dict[str, Any]]:
    """Per process that ran GPU work: its window, GPU busy, buckets and counts (times in us)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        strings = dict(db.execute("SELECT id, value FROM StringIds"))
        # CUDA API calls, one record per (thread, correlation id, plain name): the outer one
        calls: dict[tuple[int, int, str], tuple[int, int]] = {}
        for start, end, gtid, corr, name_id in db.execute(
            "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ):
            key = (gtid, corr, plain_name(strings[name_id]))
            prev = calls.get(key)
            if prev is None or start < prev[0] or (start == prev[0] and end > prev[1]):
                calls[key] = (start, end)
        host: dict[int, list[tuple[int, int]]] = {}
        launch_start: dict[tuple[int, int], int] = {}
        launches: dict[int, int] = {}
        for (gtid, corr, name), (start, end) in calls.items():
            pid = _pid(gtid)
            host.setdefault(pid, []).append((start, end))
            if is_launch(name):
                launches[pid] = launches.get(pid, 0) + 1
            old = launch_start.get((pid, corr))
            if old is None or start < old:
                launch_start[(pid, corr)] = start
        if _table_exists(db, "NVTX_EVENTS"):
            for start, end, gtid in db.execute(
                "SELECT start, end, globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL"
            ):
                host.setdefault(_pid(gtid), []).append((start, end))
        gpu: dict[int, list[tuple[int, int, tuple[int, int]]]] = {}
        kernels: dict[int, int] = {}
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if not _table_exists(db, table):
                continue
            for start, end, gpid, corr in db.execute(f"SELECT start, end, globalPid, correlationId FROM {table}"):
                pid = _pid(gpid)
                gpu.setdefault(pid, []).append((start, end, (pid, corr)))
                if table == "CUPTI_ACTIVITY_KIND_KERNEL":
                    kernels[pid] = kernels.get(pid, 0) + 1
    finally:
        db.close()
    ranks: dict[int, dict[str, Any]] = {}
    for pid, acts in gpu.items():
        everything = [(s, e) for s, e, _ in acts] + host.get(pid, [])
        window = (min(s for s, _ in everything), max(e for _, e in everything))
        ranks[pid] = _figures(window, acts, launch_start)
        ranks[pid]["kernels"] = kernels.get(pid, 0)
        ranks[pid]["launches"] = launches.get(pid, 0)
    return ranks


def _figures(window: tuple[int, int], acts: list, launch_start: dict) -> dict[str, Any]:
    w = window[1] - window[0]
    busy = union_length((s, e) for s, e, _ in acts)
    stretches = idle_stretches(window, acts, launch_start)
    host_idle = sum(b - a for a, b, kind in stretches if kind == "host")
    other_idle = sum(b - a for a, b, kind in stretches if kind == "other")
    assert busy + host_idle + other_idle == w, "the buckets must add up to the window"
    return {
        "window": window,
        "window_us": w / 1000,
        "busy_us": busy / 1000,
        "utilization": busy / w,
        "host_idle_us": host_idle / 1000,
        "other_idle_us": other_idle / 1000,
        "host_idle_fraction": host_idle / w,
        "host_idle_stretches": [(a, b) for a, b, kind in stretches if kind == "host"],
    }


# --- Kineto traces ----------------------------------------------------------------------------


def load_kineto(path: str | Path) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _ns(us: Any) -> int:
    return round(float(us) * 1000)


def _span_ns(e: dict) -> tuple[int, int]:
    start = _ns(e["ts"])
    return start, start + _ns(e.get("dur", 0))


def training_iterations(events: list[dict]) -> list[tuple[float, float]]:
    """ "Steps", item 4, without ProfilerStep#: (start, end) in trace microseconds per iteration.

    An iteration ends with its optimizers' step; where several optimizers step, the i-th iteration
    ends with the last of their i-th steps, and an optimizer stepping less often than the others is
    not the clock; it begins where the previous one ended; the first at its Optimizer.zero_grad# if
    one comes before, else at the trace's first host event; what follows the last step is left out.
    """
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in KINETO_HOST_CATS]
    steps: dict[str, list[dict]] = {}
    for e in host:
        name = e.get("name", "")
        if name.startswith("Optimizer.step#"):
            optimizer = name[len("Optimizer.step#") :].removesuffix(".step")
            steps.setdefault(optimizer, []).append(e)
    if not steps:
        return []
    most = max(len(v) for v in steps.values())
    clocks = [sorted(v, key=lambda e: float(e["ts"])) for v in steps.values() if len(v) == most]
    ends = [max(float(c[i]["ts"]) + float(c[i].get("dur", 0)) for c in clocks) for i in range(most)]
    first_step = min(float(c[0]["ts"]) for c in clocks)
    zero_grads = [
        float(e["ts"]) for e in host if e.get("name", "").startswith("Optimizer.zero_grad#") and float(e["ts"]) < first_step
    ]
    first_start = min(zero_grads) if zero_grads else min(float(e["ts"]) for e in host)
    starts = [first_start] + ends[:-1]
    return list(zip(starts, ends))


def capture_windows(events: list[dict]) -> list[tuple[Any, int, int]]:
    """(thread, begin, end) in ns per capture window: from a thread's first begin to its last end."""
    calls = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X"
            and e.get("cat") in KINETO_CALL_CATS
            and (e.get("name") in CAPTURE_BEGIN or e.get("name") in CAPTURE_END)
        ),
        key=lambda e: float(e["ts"]),
    )
    depth: dict[Any, int] = {}
    opened: dict[Any, int] = {}
    windows = []
    for e in calls:
        thread = (e.get("pid"), e.get("tid"))
        start, end = _span_ns(e)
        if e["name"] in CAPTURE_BEGIN:
            if depth.get(thread, 0) == 0:
                opened[thread] = start
            depth[thread] = depth.get(thread, 0) + 1
        elif depth.get(thread, 0) > 0:
            depth[thread] -= 1
            if depth[thread] == 0:
                windows.append((thread, opened.pop(thread), end))
    return windows


def kineto_capture(events: list[dict]) -> dict[str, Any]:
    """Captured launch count and the share of host-idle time inside capture windows ("Graph
    capture"), with the accounting model's window and host-idle stretches over a Kineto trace."""
    windows = capture_windows(events)
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") in KINETO_CALL_CATS and is_launch(e.get("name", ""))]
    captured = []
    for e in launches:
        thread = (e.get("pid"), e.get("tid"))
        t = _ns(e["ts"])
        if any(th == thread and b <= t <= en for th, b, en in windows):
            captured.append(e)
    host = [_span_ns(e) for e in events if e.get("ph") == "X" and e.get("cat") in KINETO_HOST_CATS]
    launch_start: dict[Any, int] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in KINETO_CALL_CATS and "correlation" in e.get("args", {}):
            launch_start.setdefault(e["args"]["correlation"], _ns(e["ts"]))
    acts = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in KINETO_GPU_CATS:
            s, en = _span_ns(e)
            acts.append((s, en, e.get("args", {}).get("correlation")))
    everything = host + [(s, en) for s, en, _ in acts]
    window = (min(s for s, _ in everything), max(en for _, en in everything))
    fig = _figures(window, acts, launch_start)
    host_idle = sum(b - a for a, b in fig["host_idle_stretches"])
    inside = 0
    for a, b in fig["host_idle_stretches"]:
        for _, wb, we in windows:
            lo, hi = max(a, wb), min(b, we)
            if hi > lo:
                inside += hi - lo
    return {
        "windows": windows,
        "captured_launches": len(captured),
        "captured_correlations": {e["args"]["correlation"] for e in captured},
        "captured_launch_starts": sorted(_ns(e["ts"]) for e in captured),
        "window_us": fig["window_us"],
        "host_idle_us": host_idle / 1000,
        "host_idle_in_capture_us": inside / 1000,
        "capture_share": inside / host_idle if host_idle else 0.0,
    }
