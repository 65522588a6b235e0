"""The document's ground: its schema and version, the Struct every block is, and the vocabularies
(labels, reasons, kinds) its fields take, the analysis's own."""

from __future__ import annotations

from typing import Annotated

import msgspec

from dbo_trace.analysis.overlap.exposure import ExposureReason
from dbo_trace.analysis.overlap.layer_operations import Role
from dbo_trace.analysis.steps.stalls import StallCause
from dbo_trace.analysis.verdict.decision import Label as VerdictLabel
from dbo_trace.analysis.verdict.reasons import NextStepKind, QualifierKey, ReasonKind


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
# (hidden_fraction's basis: the two add up). 9: an AFD arm's overlap, pipeline and DBO prediction,
# the round trips' overlapped_share, a rank's contention.kernels_us. 10: a rank's clocks.lag_median_us
# and incomplete.activities (the analysis's blocks held as they are, issue 60). 11: the roles block the
# analysis's RolesInfo held, its GpuSharing in `sharing` (flat before) and the missing roles.
SCHEMA_VERSION = 11
READABLE_VERSIONS = (3, 4, 5, 6, 7, 8, 9, 10, 11)  # what a review archive's report may have been written with


class Struct(msgspec.Struct, forbid_unknown_fields=True):
    """Every block of the document: decoding refuses a key its type does not have. A version writes
    only its document's keys (a new key bumps it), so an unknown one in an archive is damage (--json
    of an archive writes its stored bytes, checked: an unknown key would be shown unchecked)."""


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# A whole number as an archive may hold it: within 64 bits (a hostile 5000-digit number could not
# be printed; a float holds it); msgspec checks it on decoding.
Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
# How many of something (kernels, launches, steps, calls): never below zero. A step's number counts from 1.
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Number = Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)]
# The vocabularies its fields take are the analysis's own types, imported (render/words maps each
# value to its words): why a comm operation was exposed, a verdict's label (the Enum: the document
# writes its value), its findings, a stall's cause, a comm operation's role in its layer, a reason's
# kind and a next step's (render/document/verdict.py adds the kinds an older version wrote).
Reason = ExposureReason
Label = VerdictLabel

__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "READABLE_VERSIONS", "Struct", "Int", "Count", "Number", "Reason", "Label", "StallCause",
    "Role", "QualifierKey", "ReasonKind", "NextStepKind",
]  # fmt: skip
