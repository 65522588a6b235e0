"""Whether DBO ran: two microbatches per step, decided here and nowhere else (docs/analysis.md,
"Notes"). Every other module asks these functions, or reads the answer a type carries
(`RankDetail.microbatched`, `RankAnalysis.dbo_ran`, `Report.dbo_ran`, `Evidence.dbo_ran`).

The evidence, best first: the attribution gave the kernels their microbatches (analysis/steps/
attribution.py: its source is not SOURCE_NONE); an AFD attention rank's round trips told two by
DBO's send and receive order (SOURCE_ROUND_TRIPS); an FFN server serves its attention rank's
(SOURCE_SERVED); the event log says a step took a microbatched path (a full-graph replay is
microbatched although its kernels cannot be told apart). Leaf: the recording format only."""

from __future__ import annotations

from collections.abc import Iterable

from dbo_trace import bundle as fmt

SOURCE_NONE = "none"  # the attribution's source where no kernel has a microbatch
# An AFD attention rank whose kernels have no microbatch of their own, but whose round trips DBO's
# send and receive order gave two (analysis/afd/round_trips.py): its steps were microbatched.
SOURCE_ROUND_TRIPS = "the AFD round trips' kernel order (DBO's sends and receives)"
# An AFD FFN rank runs no microbatch of its own: it serves its attention rank's, where that has two.
SOURCE_SERVED = "its attention rank's (the FFN serves both microbatches)"
# Where the microbatches came from other than the kernels' own attribution.
_BESIDE_THE_KERNELS = frozenset((SOURCE_NONE, SOURCE_ROUND_TRIPS, SOURCE_SERVED))

# The event log's step paths (the UBatchWrapper's) that ran two microbatches.
MICROBATCHED_PATHS = (fmt.PATH_EAGER, fmt.PATH_GRAPH_CAPTURE, fmt.PATH_GRAPH_REPLAY)


def step_microbatched(path: str | None) -> bool:
    """The event log says the step took a microbatched path (eager, capturing or replaying)."""
    return path in MICROBATCHED_PATHS


def steps_microbatched(paths: Iterable[str | None]) -> bool:
    """Some step took a microbatched path."""
    return any(step_microbatched(p) for p in paths)


def source_microbatched(source: str) -> bool:
    """A rank's microbatch source (RankAnalysis.attribution) names two microbatches: its kernels', its
    round trips' or the attention rank's it serves."""
    return source != SOURCE_NONE


def kernels_microbatched(source: str) -> bool:
    """The kernels carry microbatches of their own (the attribution found them): the figures per
    microbatch (under the other microbatch, held-back comm, overlap cost) were measured with them."""
    return source not in _BESIDE_THE_KERNELS


def rank_microbatched(source: str, paths: Iterable[str | None] = (), afd_microbatched: bool = False) -> bool:
    """DBO ran on a rank: its microbatch source, a step's path or its round trips say two microbatches."""
    return source_microbatched(source) or steps_microbatched(paths) or afd_microbatched


def microbatch_source(kernel_source: str, afd_microbatched: bool) -> str:
    """Where a rank's microbatches came from, one fact for every figure: the attribution's, else an
    AFD attention rank's round trips where they told two microbatches (a graph replay's kernels
    have no launching thread of their own, but DBO's send and receive order tells them)."""
    return SOURCE_ROUND_TRIPS if not source_microbatched(kernel_source) and afd_microbatched else kernel_source


def served_source(source: str) -> str:
    """An FFN server's source where the attention rank it serves ran two microbatches."""
    return source if source_microbatched(source) else SOURCE_SERVED
