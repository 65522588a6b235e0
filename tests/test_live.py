"""The live view's arithmetic on real counters (samples/recorded-overlap: 19 eager microbatched steps
of 4 layers, and samples/vllm-graphs-decode: vLLM 0.26's engine core with graph replays)."""

import json

from conftest import SAMPLES

from dbo_trace import bundle as fmt
from dbo_trace.analysis.live import live_row


def counters(sample):
    found = fmt.read_counters(SAMPLES / sample)
    return [body for _, body, _ in found]


def test_a_dbo_run_is_all_microbatched_with_eight_yields_per_layer():
    (body,) = counters("recorded-overlap")
    row = live_row(body)
    assert row.steps == 19 and row.microbatched_share == 1.0
    assert row.yields_per_step == 8 * 4
    earlier = json.loads(json.dumps(body))
    earlier["counters"]["steps.eager_microbatched"] = 9
    assert live_row(body, earlier, interval_s=2.0).steps_per_s == 5.0


def test_a_graph_run_counts_replays_per_mode_in_the_engine_core():
    rows = [live_row(b) for b in counters("vllm-graphs-decode")]
    engine = [r for r in rows if r.graph_replays]
    assert len(engine) == 1
    (body,) = [b for b in counters("vllm-graphs-decode") if live_row(b).graph_replays]
    want = {}
    for key, value in body["counters"].items():
        if key.startswith("graph_replay/"):
            mode = key.split("/")[1]
            want[mode] = want.get(mode, 0) + value
    assert engine[0].graph_replays == want and engine[0].steps == 0  # no DBO: no UBatchWrapper steps
