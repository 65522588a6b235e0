"""The shipped samples, recorded on an H200: verdicts by construction, numbers against tests/references/headline_reference.py."""

import pytest
from conftest import VARIANTS, manifest, report_json, sample_trace
from headline_reference import headline

EXPECTED_LABEL = {
    "serial": "not-overlapped",  # no yields inside the layers: comm waits for compute
    "overlap": "overlapped",
    "overlap-stock-profiler": "overlapped",
    "overlap-no-hooks": "overlapped",
    "graph": "overlapped",
    "hostbound": "host-bound",  # hundreds of ~1 us kernels per phase
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_verdict_by_construction(sample_reports, variant):
    assert sample_reports[variant]["verdict"]["label"] == EXPECTED_LABEL[variant]


@pytest.mark.parametrize("variant", VARIANTS)
def test_headline_numbers_match_independent_computation(sample_reports, variant):
    doc = sample_reports[variant]
    ref = headline(sample_trace(variant), r"spin_kernel")
    assert doc["comm"]["busy_us"] == pytest.approx(ref["comm"], rel=1e-6, abs=0.01)
    assert doc["comm"]["hidden_fraction"] == pytest.approx(ref["hidden"] / ref["comm"], abs=1e-4)
    assert doc["gpu"]["utilization"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-4)
    assert doc["host"]["idle_fraction"] == pytest.approx(ref["host_idle"] / ref["window"], abs=1e-4)
    if doc["steps_source"].startswith("ProfilerStep#"):  # the reference's steps; bundles' logs give their own
        assert doc["ranks"][0]["host_test"]["fraction"] == pytest.approx(ref["host_idle_in_steady"] / ref["in_steady"], abs=1e-4)
    assert doc["gpu"]["kernels"] == ref["kernels"]
    assert doc["comm"]["kernels"] == ref["comm_kernels"]
    assert doc["graphs"]["launches"] == ref["graph_launches"]
    assert doc["graphs"]["replayed_kernel_fraction"] == pytest.approx(ref["replayed"] / ref["kernels"], abs=1e-4)
    assert len(doc["steps"]) == ref["steps"] == manifest(variant)["workload"]["profiled_steps"]


@pytest.mark.parametrize("variant", ["serial", "overlap", "graph", "overlap-stock-profiler"])
def test_kernel_counts_and_round_trips_by_construction(sample_reports, variant):
    work = manifest(variant)["workload"]
    doc = sample_reports[variant]
    layers = work["layers"]
    for step in doc["steps"]:
        # Per layer and microbatch: two GEMMs and two comm kernels (dispatch, combine).
        assert step["gpu"]["kernels"] == 2 * layers * 4
        assert step["comm"]["kernels"] == 2 * layers * 2
    rt = doc["round_trips"]
    assert rt["layers"] == layers
    assert rt["per_layer"] == 2  # one round trip per microbatch per layer
    assert rt["per_step"] == 2 * layers


def test_serial_hides_nothing_and_overlap_hides_under_the_other_microbatch(sample_reports):
    serial, overlap = sample_reports["serial"], sample_reports["overlap"]
    assert serial["comm"]["hidden_fraction"] < 0.02
    assert serial["comm"]["hidden_under_other_ubatch_fraction"] < 0.02
    assert overlap["comm"]["hidden_fraction"] > 0.3
    # In DBO, what hides a microbatch's comm is the other microbatch's compute.
    assert overlap["comm"]["hidden_under_other_ubatch_fraction"] == pytest.approx(overlap["comm"]["hidden_fraction"], abs=0.02)


def test_graph_sample_replays_every_step(sample_reports):
    doc = sample_reports["graph"]
    steps = manifest("graph")["workload"]["profiled_steps"]
    assert doc["graphs"]["launches"] == steps
    assert doc["graphs"]["replayed_kernel_fraction"] == 1.0
    assert doc["graphs"]["steps_replayed"] == steps and doc["graphs"]["steps_eager"] == 0
    assert all(s["path"] == "graph_replay" and s["replayed"] for s in doc["steps"])
    assert sample_reports["overlap"]["graphs"]["launches"] == 0


def test_hostbound_sample_evidence(sample_reports):
    host = sample_reports["hostbound"]["host"]
    assert host["bound"] is True
    assert host["median_kernel_us"] < host["median_launch_us"]
    work = manifest("hostbound")["workload"]
    # tiny kernels per compute phase x 2 phases x layers x 2 microbatches, plus 2 comm per layer and microbatch
    per_step = work["tiny_kernels"] * 2 * work["layers"] * 2 + 2 * work["layers"] * 2
    assert host["launches"] == per_step * work["profiled_steps"]
    assert sample_reports["overlap"]["host"]["bound"] is False


def test_step_times_track_unprofiled_truth(sample_reports):
    """Profiled steps are slower than unprofiled ones, but the ordering serial > overlap > graph holds."""
    med = {v: sample_reports[v]["round_trips"]["step_us"] for v in ("serial", "overlap", "graph")}
    truth = {v: manifest(v)["workload"]["unprofiled_step_us"]["median"] for v in med}
    assert truth["serial"] > truth["overlap"] > truth["graph"]
    assert med["serial"] > med["overlap"] > med["graph"]


def test_plain_trace_without_bundle_needs_comm_pattern():
    trace = str(sample_trace("overlap-no-hooks"))
    # spin_kernel is emulated traffic: not communication by name, so the busy GPU is all work...
    plain = report_json(trace)["verdict"]
    assert plain["label"] == "gpu-bound" and "no_comm" in [r["kind"] for r in plain["reasons"]]
    assert "--comm-kernels" in next(r["text"] for r in plain["reasons"] if r["kind"] == "no_comm")
    # ...until the user says so.
    doc = report_json(trace, "--comm-kernels", "spin_kernel", "--layers", "4")
    assert doc["verdict"]["label"] == "overlapped"
    assert doc["ranks"][0]["steps_source"] == "ProfilerStep# annotations"
    assert doc["round_trips"]["per_layer"] == 2


def test_round_trip_source_says_where_counts_came_from(sample_reports):
    assert sample_reports["overlap"]["round_trips"]["source"] == "comm phases in the event log"
    assert sample_reports["graph"]["round_trips"]["source"].startswith("comm operations")
