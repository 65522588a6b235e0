"""samples/recorded-overlap: recorded on the H200 by `dbo-trace demo` through `dbo-trace record`, the plugin
and vLLM 0.33's own UBatchContext. What is true of it follows from how the demo runs a mode."""

import json

from conftest import SAMPLES, report_json

BUNDLE = SAMPLES / "recorded-overlap"
WARMUP, TIMED, PROFILED = 3, 10, 5  # demo worker: warm-up steps, unprofiled timed steps, profiled (+1 profiler warm-up)
LAYERS, YIELDS_PER_LAYER = 4, 4


def test_the_recording_is_complete_and_says_how_it_was_made():
    m = json.loads((BUNDLE / "manifest.json").read_text())
    assert m["status"] == "complete" and m["mode"] == "program" and m["exit_status"] == 0
    assert m["created_by"] == "dbo-trace demo" and m["workload"]["ubatching"] == "vLLM 0.33.0"
    assert m["gpus"]["names"] == ["NVIDIA H200"]
    assert m["traces"] == [t for t in m["traces"] if t.startswith("traces/rank0.")] and len(m["events"]) == 1


def test_counters_count_every_step_and_yield_the_worker_ran():
    m = json.loads((BUNDLE / "manifest.json").read_text())
    steps = WARMUP + TIMED + PROFILED + 1
    assert m["counters"] == {"steps.eager_microbatched": steps, "ubatch.yields": steps * 2 * LAYERS * YIELDS_PER_LAYER}


def test_report_attributes_from_the_event_log_and_sees_the_overlap():
    doc = report_json(str(BUNDLE))
    rank = doc["ranks"][0]
    assert rank["microbatch_source"] == rank["steps_source"] == "event log"
    assert rank["attribution"] == {"profile_all_threads": True}
    assert doc["verdict"]["label"] == "overlapped" and len(doc["steps"]) == PROFILED
    assert all(s["path"] == "eager_microbatched" and s["comm_ops"] == 2 * 2 * LAYERS for s in doc["steps"])
    # Every comm kernel ran under the *other* microbatch's compute, if under any.
    assert doc["comm"]["hidden_under_other_ubatch_us"] == doc["comm"]["hidden_us"] > 0
