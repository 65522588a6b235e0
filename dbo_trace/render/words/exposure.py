"""Why comm was exposed, in words: each reason of analysis/overlap/exposure.py as a table's short
label and as a summary's sentence (the analysis hands over the reasons, never their words)."""

from __future__ import annotations

from dbo_trace.analysis.overlap.exposure import CROWDED, HELD, HOST, LATE_RECORD, NOTHING, PEER, UNKNOWN, WAITING

REASON_SHORT = {
    PEER: "waiting for a peer rank",
    LATE_RECORD: "held back: late event record",
    CROWDED: "held back: no free SMs",
    HELD: "held back by other ubatch",
    HOST: "host (not launched)",
    WAITING: "waiting on a dependency",
    NOTHING: "nothing left in the step",
    UNKNOWN: "unknown",
}
REASON_TEXT = {
    PEER: "the comm kernel was waiting for a peer rank to arrive at the same collective",
    LATE_RECORD: "the comm waited on an event recorded after the other microbatch's compute was queued (late record)",
    CROWDED: "the comm was ready but could not start until the other microbatch's compute freed the SMs",
    HELD: "the comm was ready but started only when the other microbatch's compute ended (record with CUDA sync "
    "events to tell a late event record from an SM-hungry kernel)",
    HOST: "the other microbatch's compute had not been launched (host)",
    WAITING: "compute was queued but waited on a stream or event dependency",
    NOTHING: "no compute was left in the step to overlap (imbalance or the step's end)",
    UNKNOWN: "the compute's launch is not in the trace",
}
# Without microbatches the compute that could hide a stretch is any compute (not the other
# microbatch's): the reasons that name the other microbatch say so instead.
REASON_TEXT_NO_UBATCH = {
    **REASON_TEXT,
    HOST: "the next compute had not been launched (host)",
}
