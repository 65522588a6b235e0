"""The plugin's live counters, summarised per process: is DBO engaging on this traffic, without a
profiler. Pure: the counters files' bodies in (and the previous sample, for rates), rows out.

Counter names (dbo_trace/record/hooks.py): `steps.<path>` per UBatchWrapper call and its path,
`graph_capture/<MODE>/<tokens>` and `graph_replay/<MODE>/<tokens>` per CUDAGraphWrapper call,
`ubatch.yields`, `ubatch.<N>.wait_us` (time microbatch N's thread waited for its turn),
`step_us.<path>` (the time in the steps of each path; counters written before it lack it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dbo_trace import bundle as fmt
from dbo_trace.analysis.steps.microbatched import step_microbatched
from dbo_trace.serve_args import whole_number

# The steps whose microbatch threads ran Python, so yielded and waited: a graph replay runs none
# (the yields and waits were recorded into the graph at its capture).
YIELDING_PATHS = (fmt.PATH_EAGER, fmt.PATH_GRAPH_CAPTURE)


@dataclass(frozen=True)
class LiveRow:
    pid: int
    steps: int
    steps_per_s: float | None  # since the previous sample
    microbatched_share: float | None
    path_counts: dict[str, int]
    graph_replays: dict[str, int]  # runtime mode -> CUDAGraphWrapper replays
    graph_captures: int
    yields_per_step: float | None  # per microbatched step that ran its threads (eager or capturing)
    wait_ms_per_step: dict[int, float] = field(default_factory=dict)  # microbatch -> ms waited per such step
    age_s: float | None = None  # how old the counters are
    hooks_enabled: bool = True
    microbatched_replays: int = 0  # UBatchWrapper's own graph replays (its steps on the graph_replay path)
    yielding_steps: int = 0  # the steps yields and waits are counted over (eager or capturing microbatched)
    # the mean time of those steps, ms: each microbatch's wait is a part of it (counters with step_us only)
    yielding_step_ms: float | None = None

    @property
    def replays(self) -> int:
        """Every graph replay counted: CUDAGraphWrapper's per mode and UBatchWrapper's."""
        return sum(self.graph_replays.values()) + self.microbatched_replays


def _counts(body: dict[str, Any]) -> dict[str, int]:
    """A body's counters that are finite numbers, as whole numbers (a counters file is input)."""
    raw = body.get("counters")
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def live_row(
    body: dict[str, Any], previous: dict[str, Any] | None = None, interval_s: float | None = None, age_s: float | None = None
) -> LiveRow:
    counters = _counts(body)
    paths = {k.split(".", 1)[1]: v for k, v in counters.items() if k.startswith("steps.")}
    steps = sum(paths.values())
    microbatched = sum(n for p, n in paths.items() if step_microbatched(p))
    yielding = sum(paths.get(p, 0) for p in YIELDING_PATHS)
    replays: dict[str, int] = {}
    captures = 0
    for key, value in counters.items():
        kind, _, rest = key.partition("/")
        if kind == fmt.EV_GRAPH_REPLAY:
            mode = rest.split("/", 1)[0]
            replays[mode] = replays.get(mode, 0) + value
        elif kind == fmt.EV_GRAPH_CAPTURE:
            captures += value
    waits = {}
    for key, value in counters.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "ubatch" and parts[2] == "wait_us" and yielding and (ubatch := whole_number(parts[1])) is not None:
            waits[ubatch] = value / 1000.0 / yielding
    step_us = [counters[f"step_us.{p}"] for p in YIELDING_PATHS if paths.get(p) and f"step_us.{p}" in counters]
    timed = len(step_us) == sum(1 for p in YIELDING_PATHS if paths.get(p))  # every yielding path's time known
    rate = None
    if previous is not None and interval_s:
        before = sum(v for k, v in _counts(previous).items() if k.startswith("steps."))
        rate = max(0, steps - before) / interval_s
    return LiveRow(
        pid=pid if type(pid := body.get("pid")) is int else -1,
        steps=steps,
        steps_per_s=rate,
        microbatched_share=microbatched / steps if steps else None,
        path_counts=dict(sorted(paths.items())),
        graph_replays=dict(sorted(replays.items())),
        graph_captures=captures,
        yields_per_step=counters.get("ubatch.yields", 0) / yielding if yielding else None,
        wait_ms_per_step=dict(sorted(waits.items())),
        age_s=age_s,
        hooks_enabled=bool(body.get("hooks_enabled", True)),
        microbatched_replays=paths.get(fmt.PATH_GRAPH_REPLAY, 0),
        yielding_steps=yielding,
        yielding_step_ms=sum(step_us) / 1000.0 / yielding if yielding and timed else None,
    )
