"""The document's ground: its schema and version, the Struct every block is, and the vocabularies
(labels, reasons, kinds) its fields take."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from dbo_trace.analysis.verdict.decision import Label as VerdictLabel


SCHEMA = "dbo-trace-report"
# 3: verdict.headline, verdict.qualifier, verdict.findings; steps' number; host_causes, kernel_summary,
# cpu_ranges, step_us spread. 4: a rank's attribution block without ubatch_source and step_source
# (the rank's microbatch_source and steps_source hold them). 5: a step's step_us is its period (its
# share of the wall clock), its window apart (window_us); stalls; figures and verdicts over the
# steady state; a rank's host_stacks (only with sampled Python stacks); a rank's dbo_ledger,
# comm_layers, sm_evidence and the run's what_if. 6: every verdict's reasons as {kind, borderline,
# text} and its next_step; the labels graph-capture and gpu-bound, the findings graph_capture and gpu_bound.
# 7: the reason profiler_overhead, the next step ffn_server, the round trip's late_us. 8: the label
# single-batch, the finding exposed_comm, the next step measure_pays (dbo_cannot_pay gone), a run's and
# a rank's verdict.pays; a comm operation's and a layer's exposed_fraction
# (hidden_fraction's basis: the two add up)
SCHEMA_VERSION = 9
READABLE_VERSIONS = (3, 4, 5, 6, 7, 8, 9)  # what a review archive's report may have been written with


class Struct(msgspec.Struct, forbid_unknown_fields=True):
    """Every block of the document: decoding refuses a key its type does not have. A version writes
    only its document's keys (a new key bumps it), so an unknown one in an archive is damage, and
    kept it would vanish from the --json that shows the stored document."""


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# A whole number as an archive may hold it: within 64 bits (a hostile 5000-digit number could not
# be printed; a float holds it); msgspec checks it on decoding.
Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
# How many of something (kernels, launches, steps, calls): never below zero. A step's number counts from 1.
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Number = Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)]
# Why a comm operation was exposed (render/words/exposure.py's REASON_SHORT keys, analysis/overlap/exposure.py's REASONS; a test keeps them equal).
Reason = Literal["peer", "late_record", "crowded", "held", "host", "waiting", "nothing", "unknown"]
# A verdict's label and its findings (analysis.verdict.LABELS and QUALIFIERS; a test keeps them equal).
Label = Literal[
    "graph-capture", "host-bound", "gpu-bound", "no-communication", "overlapped", "single-batch", "not-overlapped"
]
# The document's value of each analysis.verdict.Label (a test keeps each the Enum's own value).
LABEL_VALUE: dict[VerdictLabel, Label] = {
    VerdictLabel.GRAPH_CAPTURE: "graph-capture", VerdictLabel.HOST_BOUND: "host-bound",
    VerdictLabel.GPU_BOUND: "gpu-bound", VerdictLabel.NO_COMMUNICATION: "no-communication",
    VerdictLabel.OVERLAPPED: "overlapped", VerdictLabel.SINGLE_BATCH: "single-batch",
    VerdictLabel.NOT_OVERLAPPED: "not-overlapped",
}  # fmt: skip
StallCause = Literal["compile", "graph capture", "outlier"]  # analysis/steps/stalls.py
# A comm operation's role in its layer (analysis.ledger's DISPATCH ... ROUND_TRIP).
Role = Literal["dispatch", "combine", "send", "recv", "round trip"]
QualifierKey = Literal[
    "graph_capture", "host_bound", "gpu_bound", "late_record", "peer_wait", "round_trip", "did_not_pay", "crowded",
    "exposed_comm",
]
# A reason's kind and a next step's (the kinds of analysis.verdict's Reason and NextStep classes, and
# the kinds an older version wrote that analysis no longer has, RETIRED_KINDS; a test keeps them equal).
RETIRED_KINDS = ("dbo_cannot_pay",)  # version 8 replaced it by measure_pays
ReasonKind = Literal[
    "time_slicing", "running_behind", "graph_capture", "stalls", "host_idle", "expensive_calls", "launch", "profiled_threads", "profiler_overhead", "gpu_busy", "no_comm",
    "comm_overlap", "afd_round_trips", "afd_step_round_trips", "long_graph_launches", "graph_replays", "criterion",
    "afd_criterion",
]  # fmt: skip
NextStepKind = Literal[
    "profile_after_startup", "start_mps", "yield_op_cost", "enable_graphs", "host_cause", "gpu_bottleneck",
    "nothing_to_overlap", "ffn_server", "late_record", "straggler", "dbo_cannot_pay", "measure_pays", "crowded", "did_not_pay",
    "overlap_missing", "one_microbatch", "overlap_works",
]  # fmt: skip
