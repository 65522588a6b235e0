"""A GPU that runs behind: how long launched work waited before it started (docs/analysis.md,
"Launch-to-start delay").

The host-idle bucket holds a GPU idle stretch whose ending activity was launched after the stretch
began. Where that launch call **ended** well before the activity started, the rest of the stretch
was not the host: the work was launched and waited (a queue in the driver or the runtime, or GPU
timestamps offset from the CPU's). This module measures that part and the launch-to-start delay
of every launched activity, and says when the delays look like a clock offset rather than a queue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLOCK_OFFSET_US = 1000.0  # every activity started at least this long after its launch call ended: suspect the clocks
LAUNCH_LATENCY_US = 20.0  # an idle GPU starts launched work within this (measured: 2-10 us); beyond it, a queue


@dataclass(frozen=True)
class LaunchDelay:
    """Launch call end to activity start, over the launched activities (graph replays' kernels apart:
    they start in the graph's own order)."""

    activities: int
    median_us: float
    p90_us: float
    max_us: float
    min_us: float
    first_us: float  # the first launched activity's (the lead-in a queue or an offset shows in)
    queued_in_host_idle_us: float  # host-idle time past the ending activity's launch call's end + LAUNCH_LATENCY_US
    host_idle_us: float  # the host-idle bucket it is part of

    @property
    def clock_offset_suspect(self) -> bool:
        """No activity started sooner than CLOCK_OFFSET_US after its launch: not a queue (an idle GPU
        starts work within microseconds), more likely the GPU's clock offset from the CPU's."""
        return self.min_us >= CLOCK_OFFSET_US

    @property
    def text(self) -> str | None:
        """The note where it matters: a clock offset, or a queue worth 5% of the host idle."""
        if self.clock_offset_suspect:
            return (
                f"every launched GPU activity started at least {self.min_us / 1000:.2f} ms after its launch call ended "
                f"(median {self.median_us / 1000:.2f} ms, {self.activities} activities): the GPU's timestamps may be "
                f"offset from the CPU's, and {self.queued_in_host_idle_us / 1000:.2f} ms of the GPU idle counted as "
                "waiting for the host came after the work was launched"
            )
        if self.host_idle_us > 0 and self.queued_in_host_idle_us >= 0.05 * self.host_idle_us:
            share = self.queued_in_host_idle_us / self.host_idle_us
            return (
                f"{self.queued_in_host_idle_us / 1000:.2f} ms ({100 * share:.0f}%) of the GPU idle counted as waiting for "
                f"the host came over {LAUNCH_LATENCY_US:.0f} us after the next work's launch call had ended: launched work queued (launch to start: "
                f"median {self.median_us:.1f} us, p90 {self.p90_us:.1f} us, max {self.max_us / 1000:.2f} ms)"
            )
        return None


def launch_delay(
    *,
    gpu_start: np.ndarray,  # (n_gpu,) float64
    launch_end: np.ndarray,  # (n_gpu,) float64: the end of each activity's launch call, NaN unknown
    replayed: np.ndarray,  # (n_gpu,) bool: launched by a graph replay
    host_start: np.ndarray,  # (n_stretches,) float64: the host-idle stretches (merged, sorted)
    host_end: np.ndarray,  # (n_stretches,) float64
) -> LaunchDelay | None:
    known = ~np.isnan(launch_end) & ~replayed
    if not known.any():
        return None
    delay = gpu_start[known] - launch_end[known]
    first = int(np.argmin(gpu_start[known]))
    # The part of each host-idle stretch after its ending activity's launch call ended: of the
    # activities starting where the stretch ends, the earliest launch end (graph replays included).
    queued = 0.0
    if len(host_start) and len(gpu_start):
        order = np.argsort(gpu_start, kind="stable")
        s_sorted, le_sorted = gpu_start[order], np.r_[launch_end[order], np.nan]  # a sentinel past the end
        lo = np.searchsorted(s_sorted, host_end, side="left")
        hi = np.searchsorted(s_sorted, host_end, side="right")
        sel = hi > lo  # stretches that some activity ends (not the tail)
        if sel.any():
            # the stretches' groups [lo, hi) are disjoint and in order: one reduceat over lo, hi pairs
            bounds = np.column_stack([lo[sel], hi[sel]]).ravel()
            earliest = np.fmin.reduceat(le_sorted, bounds)[::2]
            start = np.maximum(host_start[sel], np.where(np.isnan(earliest), np.inf, earliest + LAUNCH_LATENCY_US))
            queued = float(np.clip(host_end[sel] - start, 0.0, None).sum())
    return LaunchDelay(
        activities=int(known.sum()),
        median_us=float(np.median(delay)),
        p90_us=float(np.percentile(delay, 90)),
        max_us=float(delay.max()),
        min_us=float(delay.min()),
        first_us=float(delay[first]),
        queued_in_host_idle_us=queued,
        host_idle_us=float((host_end - host_start).sum()),
    )
