"""The three kinds of what a verdict says besides its label, as base types: a reason, a headline's
finding (qualifier) and a next step. Their subclasses, each with its figures, are verdict/reasons.py's;
the overlap model (verdict/evidence_types.py OverlapModel) answers in them. A leaf."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

# The kinds, each one class's: the document writes them as they are (render/document/verdict.py).
ReasonKind = Literal[
    "time_slicing", "running_behind", "graph_capture", "stalls", "host_idle", "expensive_calls", "launch",
    "profiled_threads", "profiler_overhead", "gpu_busy", "no_comm", "comm_overlap", "afd_round_trips",
    "afd_step_round_trips", "long_graph_launches", "graph_replays", "criterion", "afd_criterion",
]  # fmt: skip
QualifierKey = Literal[
    "graph_capture", "host_bound", "gpu_bound", "late_record", "peer_wait", "round_trip", "did_not_pay", "crowded",
    "exposed_comm",
]  # fmt: skip
NextStepKind = Literal[
    "profile_after_startup", "start_mps", "yield_op_cost", "enable_graphs", "host_cause", "gpu_bottleneck",
    "nothing_to_overlap", "ffn_server", "late_record", "straggler", "measure_pays", "crowded", "did_not_pay",
    "overlap_missing", "one_microbatch", "overlap_works",
]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Reason:
    """One reason of a verdict: its kind, its figures (the fields of its class) and whether a share
    decided the label within BORDERLINE of its line."""

    kind: ClassVar[ReasonKind]
    borderline: bool = False


@dataclass(frozen=True, kw_only=True)
class Qualifier:
    """The dominant finding the headline names in brackets: its key and its figures."""

    key: ClassVar[QualifierKey]


@dataclass(frozen=True, kw_only=True)
class NextStep:
    """The one action the verdict's evidence supports, with the figures it follows from."""

    kind: ClassVar[NextStepKind]
