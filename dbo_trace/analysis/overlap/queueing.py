"""A GPU that runs behind: how long launched work waited before it started (docs/analysis.md,
"Launch-to-start delay").

An idle GPU gap whose ending activity was launched after the gap began is the host's, up to 20 us
after that launch call **ended**; the rest of the gap was not the host: the work was launched and
waited (a queue in the driver or the runtime behind earlier work, or GPU timestamps offset from the
CPU's). The partition (analysis/accounting.py) counts that rest as other idle; this module measures
it and the launch-to-start delay of every launched activity, and says when the GPU ran behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.host.gpu_clock import ClockBounds

CLOCK_OFFSET_US = 1000.0  # every activity started at least this long after its launch call ended: suspect the clocks
BEHIND_SHARE = 0.05  # of the window, queued: the GPU running behind is a finding of the run
QUEUED_NOTE_SHARE = 0.05  # of the GPU idle after a late launch, queued: a rank's note


@dataclass(frozen=True, kw_only=True)
class LaunchDelayFigures:
    """Launch call end to activity start, over the launched activities (graph replays' kernels apart:
    they start in the graph's own order): the figures (the document holds them, render/document/host.py)."""

    activities: int
    median_us: float
    p90_us: float
    max_us: float
    min_us: float
    first_us: float  # the first launched activity's (the lead-in a queue or an offset shows in)
    queued_in_host_idle_us: float  # GPU idle after the ending work's launch call's end + LAUNCH_LATENCY_US (not host idle)
    # min_us >= CLOCK_OFFSET_US: no activity started sooner after its launch: not a queue (an idle GPU
    # starts work within microseconds), more likely the GPU's clock offset from the CPU's
    clock_offset_suspect: bool
    host_idle_us: float  # the host-idle bucket, without it
    last_us: float  # the last launched activity's
    window_us: float  # the rank's window


@dataclass(frozen=True, kw_only=True)
class LaunchDelay(LaunchDelayFigures):
    """The figures and the rank's clocks beside them (what tells a queue from an offset)."""

    clocks: ClockBounds | None = None  # what the events say of the GPU's clock

    @property
    def running_behind(self) -> bool:
        """Launched work waited in GPU idle for at least BEHIND_SHARE of the window."""
        return self.window_us > 0 and self.queued_in_host_idle_us >= BEHIND_SHARE * self.window_us

    @property
    def queued_share(self) -> float | None:
        """The queued part of the GPU idle that followed a late launch (host idle and queued together)."""
        idle = self.host_idle_us + self.queued_in_host_idle_us
        return self.queued_in_host_idle_us / idle if idle > 0 else None

    @property
    def noted(self) -> bool:
        """A rank's note where it matters: a clock offset, or a queue worth QUEUED_NOTE_SHARE of that idle."""
        if self.clock_offset_suspect:
            return True
        idle = self.host_idle_us + self.queued_in_host_idle_us
        return idle > 0 and self.queued_in_host_idle_us >= QUEUED_NOTE_SHARE * idle


def launch_delay(
    *,
    gpu_start: np.ndarray,  # (n_gpu,) float64
    launch_end: np.ndarray,  # (n_gpu,) float64: the end of each activity's launch call, NaN unknown
    replayed: np.ndarray,  # (n_gpu,) bool: launched by a graph replay
    queued_start: np.ndarray,  # (n_queued,) float64: the partition's queued parts of host-caused gaps
    queued_end: np.ndarray,  # (n_queued,) float64
    host_idle_us: float,  # the host-idle bucket over the window
    window_us: float,
    clocks: ClockBounds | None = None,  # what the events say of the GPU's clock
) -> LaunchDelay | None:
    known = ~np.isnan(launch_end) & ~replayed
    if not known.any():
        return None
    delay = gpu_start[known] - launch_end[known]
    first = int(np.argmin(gpu_start[known]))
    last = int(np.argmax(gpu_start[known]))
    least = float(delay.min())
    return LaunchDelay(
        activities=int(known.sum()),
        median_us=float(np.median(delay)),
        p90_us=float(np.percentile(delay, 90)),
        max_us=float(delay.max()),
        min_us=least,
        first_us=float(delay[first]),
        queued_in_host_idle_us=float((queued_end - queued_start).sum()),
        clock_offset_suspect=least >= CLOCK_OFFSET_US,
        host_idle_us=host_idle_us,
        last_us=float(delay[last]),
        window_us=window_us,
        clocks=clocks,
    )
