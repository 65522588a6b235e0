"""Instrumentation of vLLM's DBO classes.

Rules every hook obeys (they run inside someone else's server):
- the wrapped function is called exactly once, with its own arguments, and its
  result or exception passes through untouched;
- no exception leaves a hook: the first failure turns all hooks off and is
  written to the event log once;
- no GPU work: no synchronisation, allocation or stream query, so hooks are
  safe during CUDA graph capture.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from dbo_trace import bundle as fmt
from dbo_trace.files import replace_file
from dbo_trace.record.events import EventLog

try:  # NVTX ranges for Nsight Systems users; optional
    import nvtx as _nvtx
except Exception:  # pragma: no cover - depends on the host
    _nvtx = None

_PHASE_COLOURS = {
    (0, "compute"): "blue",
    (0, "comm"): "cyan",
    (1, "compute"): "red",
    (1, "comm"): "orange",
    (0, "yield"): "grey",
    (1, "yield"): "grey",
}
_NVTX_DOMAIN = "dbo-trace"
COUNTERS_INTERVAL_S = 1.0


@functools.lru_cache(maxsize=64)
def _range_of(ub: int, phase: str) -> tuple[str, str]:
    """Range name and colour of a microbatch phase, built once (the hooks run per yield)."""
    return f"dbo:ub{ub}:{phase}", _PHASE_COLOURS.get((ub, phase), "purple")


_autograd_profiler: Any = None  # torch.autograd.profiler once found; False where torch is absent


def _profiler_enabled() -> bool:
    global _autograd_profiler
    if _autograd_profiler is None:  # resolved once: a failed import is not cached by Python and costs ~50 us
        try:
            import torch.autograd.profiler as ap

            _autograd_profiler = ap
        except Exception:
            _autograd_profiler = False
    return bool(_autograd_profiler and _autograd_profiler._is_profiler_enabled)


_NONE_OPEN = (None, None)


class _Ranges:
    """One open range per thread: NVTX always (if installed), record_function while profiling."""

    def __init__(self) -> None:
        self._local = threading.local()

    def open(self, name: str, colour: str = "green") -> None:
        self.close()
        profiling = _profiler_enabled()
        if _nvtx is None and not profiling:
            return  # nothing to draw ranges into: the common case outside a profile window
        nv = rf = None
        if _nvtx is not None:
            nv = _nvtx.start_range(message=name, color=colour, domain=_NVTX_DOMAIN)
        if profiling:
            rf = _autograd_profiler.record_function(name)
            rf.__enter__()
        self._local.open = (nv, rf)

    def close(self) -> None:
        local = self._local
        nv, rf = getattr(local, "open", _NONE_OPEN)
        if nv is None and rf is None:
            return
        local.open = _NONE_OPEN
        if rf is not None:
            rf.__exit__(None, None, None)
        if nv is not None:
            _nvtx.end_range(nv)


@dataclass(frozen=True)
class Target:
    """One thing we patch: module, class, attribute, and the wrapper factory."""

    module: str
    cls: str
    attr: str
    make: Callable[["Instrumentation", Callable], Callable]

    @property
    def name(self) -> str:
        return f"{self.module}.{self.cls}.{self.attr}"

    def resolve(self) -> tuple[type, Any]:
        """(class, attribute) as installed now; raises when the module, class or attribute is missing."""
        cls = getattr(importlib.import_module(self.module), self.cls)
        return cls, getattr(cls, self.attr)


class Instrumentation:
    def __init__(self, log: EventLog):
        self.log = log
        self.enabled = True
        self.ranges = _Ranges()
        self.counters: Counter[str] = Counter()
        self._thread = threading.local()  # per microbatch thread: current stream phase
        self.patched: list[str] = []
        self.missing: list[str] = []
        self._originals: list[tuple[type, str, Any]] = []
        self._counters_written = 0.0
        self._step: tuple[str, int] | None = None  # the open step's path and perf_counter_ns start

    # -- safety -----------------------------------------------------------
    def safely(self, fn: Callable, *args: Any) -> Any:
        if not self.enabled:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # a hook must never break its host
            self.enabled = False
            try:
                self.log.emit(fmt.EV_HOOK_ERROR, -1, f"{type(exc).__name__}: {exc}"[:300])
            except Exception:
                pass
            return None

    def quietly(self, fn: Callable, *args: Any) -> Any:
        """For our own bookkeeping (flush, counters): runs even after a hook turned the hooks off, so the
        counters still say what happened ("hooks_enabled": false), and never raises."""
        try:
            return fn(*args)
        except Exception:
            return None

    # -- step-level events (UBatchWrapper, workloads) -------------------------
    def step_begin(self, path: str, tokens: list[int] | None = None) -> None:
        self.log.step += 1
        self.counters[f"steps.{path}"] += 1
        self._step = (path, time.perf_counter_ns())
        self.log.emit(fmt.EV_STEP_BEGIN, -1, {"path": path, "tokens": tokens})
        self.ranges.open(f"dbo:step#{self.log.step}:{path}", "green")

    def step_end(self) -> None:
        if self._step is not None:  # the time in steps of each path: what `top`'s waits are a part of
            path, started = self._step
            self.counters[f"step_us.{path}"] += (time.perf_counter_ns() - started) // 1000
            self._step = None
        self.ranges.close()
        self.log.emit(fmt.EV_STEP_END)
        self.log.flush()
        self.counters_due()

    def graph_event(self, kind: str, mode: str, tokens: int | None) -> None:
        self.counters[f"{kind}/{mode}/{tokens}"] += 1
        self.log.emit(kind, -1, {"mode": mode, "tokens": tokens})
        self.counters_due()

    def counters_due(self) -> None:
        """Rewrite the counters at most once a second: a process killed without running atexit
        (vLLM's forked engine core ends with os._exit) still leaves them on disk."""
        now = time.monotonic()
        if now - self._counters_written >= COUNTERS_INTERVAL_S:
            self._counters_written = now
            self.write_counters("periodic")

    def forked(self) -> None:
        """In a forked child: its own log and counters (the parent keeps writing its own)."""
        from dbo_trace.record.events import reopen_after_fork

        self.log = reopen_after_fork() or self.log
        self.counters.clear()
        self._counters_written = 0.0

    # -- the counters summary (at exit and at profiler stop) -------------------
    def write_counters(self, reason: str) -> None:
        """Replace HOST-PID.counters.json beside the event log (format in docs/bundle-format.md)."""
        path = self.log.path.with_suffix(".counters.json")
        body = {
            "format": fmt.COUNTERS_FORMAT,
            "version": fmt.COUNTERS_VERSION,
            "pid": os.getpid(),
            "reason": reason,
            "steps": self.log.step,
            "hooks_enabled": self.enabled,
            "patched": list(self.patched),
            "missing": list(self.missing),
            # Counter updates come from one thread at a time (the microbatches ping-pong).
            "counters": dict(sorted(self.counters.items())),
        }
        replace_file(path, (json.dumps(body, indent=1) + "\n").encode())

    # -- microbatch-thread events (UBatchContext) ----------------------------
    def ub_wait(self, ub: int) -> None:
        self._thread.phase = "compute"
        self._thread.waiting_since = time.perf_counter_ns()
        self.log.emit(fmt.EV_UB_WAIT, ub)

    def ub_run(self, ub: int) -> None:
        self._count_wait(ub)
        self.log.emit(fmt.EV_UB_RUN, ub)
        self._open_phase(ub)

    def _count_wait(self, ub: int) -> None:
        """Time this microbatch thread spent waiting for its turn (live counters: `dbo-trace top`)."""
        since = getattr(self._thread, "waiting_since", None)
        if since is not None:
            self.counters[f"ubatch.{ub}.wait_us"] += (time.perf_counter_ns() - since) // 1000
            self._thread.waiting_since = None

    def ub_exit(self, ub: int) -> None:
        self.ranges.close()
        self.log.emit(fmt.EV_UB_EXIT, ub)

    def stream(self, ub: int, phase: str) -> None:
        if getattr(self._thread, "phase", None) == phase:
            return
        self._thread.phase = phase
        self.log.emit(fmt.EV_STREAM, ub, phase)
        self._open_phase(ub)

    def cpu_yield(self, ub: int) -> None:
        self.counters["ubatch.yields"] += 1
        self._thread.waiting_since = time.perf_counter_ns()
        self.log.emit(fmt.EV_YIELD, ub)
        self.ranges.open(*_range_of(ub, "yield"))

    def cpu_resume(self, ub: int) -> None:
        self._count_wait(ub)
        self.log.emit(fmt.EV_RESUME, ub)
        self._open_phase(ub)

    def _open_phase(self, ub: int) -> None:
        phase = getattr(self._thread, "phase", "compute")
        self.ranges.open(*_range_of(ub, phase))

    # -- patching ------------------------------------------------------------
    def install(self, targets: list[Target]) -> None:
        for target in targets:
            try:
                cls, original = target.resolve()
            except Exception:
                self.missing.append(target.name)
                continue
            self._originals.append((cls, target.attr, cls.__dict__.get(target.attr, original)))
            setattr(cls, target.attr, target.make(self, original))
            self.patched.append(target.name)

    def uninstall(self) -> None:
        for cls, attr, original in reversed(self._originals):
            setattr(cls, attr, original)
        self._originals.clear()
        self.patched.clear()
