"""--perfetto is at least as rich as its source: every kernel, copy and CUDA call keeps the source's
args (grid, block, registers, bytes, correlation id, stream, ...), and each launch call has a flow to
each piece of GPU work it launched. Checked by decoding the protobuf (the perfetto package's trace
processor needs a download, unavailable offline) against the raw trace read with json.load alone."""

import json
from collections import defaultdict

import pytest
import headline_reference as ref
from conftest import SAMPLES, run_cli

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_CATS = ("cuda_runtime", "cuda_driver")


def decoded(path):
    """Slice begins as (track, ts ns, name) -> args, and flows as id -> (out slice, in slice)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(path.read_bytes())
    slices, flow_out, flow_in = {}, {}, {}
    for p in trace.packet:
        ev = p.track_event
        if not p.HasField("track_event") or ev.type != TrackEvent.TYPE_SLICE_BEGIN:
            continue
        key = (p.timestamp, ev.name)
        args = {}
        for a in ev.debug_annotations:
            kind = a.WhichOneof("value")
            args[a.name] = getattr(a, kind)
        slices.setdefault(key, []).append(args)
        for f in ev.flow_ids:
            assert f not in flow_out, "a flow id used twice"
            flow_out[f] = key
        for f in ev.terminating_flow_ids:
            assert f not in flow_in
            flow_in[f] = key
    assert set(flow_out) == set(flow_in), "every flow starts and ends"
    return slices, {f: (flow_out[f], flow_in[f]) for f in flow_out}


def ns(ts):
    return int(round(ts * 1000))


def as_written(value):
    """An arg as the export writes it: lists (grid, block) as JSON text."""
    return json.dumps(value, separators=(", ", ": ")) if isinstance(value, (list, dict)) else value


@pytest.mark.parametrize("variant", ["overlap", "graph", "two-gpu-overlap", "vllm-graphs-decode"])
def test_every_event_keeps_its_source_args_and_each_launch_flows_to_its_work(tmp_path, variant):
    out = tmp_path / "o.pftrace"
    proc = run_cli("report", str(SAMPLES / variant), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    slices, flows = decoded(out)
    expected_flows = 0
    found_flows = defaultdict(set)
    for start, end in flows.values():
        found_flows[start].add(end)
    for trace in sorted((SAMPLES / variant / "traces").glob("*.json*")):
        events = [e for e in ref.load(trace)["traceEvents"] if e.get("ph") == "X" and "ts" in e]
        gpu = [e for e in events if e.get("cat") in GPU_CATS]
        calls = [e for e in events if e.get("cat") in CALL_CATS]
        assert gpu and calls
        for e in gpu + calls:
            (args,) = [a for a in slices[(ns(e["ts"]), e["name"])] if a.get("correlation") == e["args"].get("correlation", -1)]
            for key, value in e.get("args", {}).items():
                assert args[key] == pytest.approx(as_written(value)), (e["name"], key)
        launched_by = {}
        for c in calls:
            launched_by.setdefault(c["args"].get("correlation"), c)
        for e in gpu:
            call = launched_by.get(e["args"].get("correlation"))
            if call is not None:
                expected_flows += 1
                assert (ns(e["ts"]), e["name"]) in found_flows[(ns(call["ts"]), call["name"])], e["name"]
        if variant in ("overlap", "graph"):
            assert any("grid" in a and "block" in a for a in (x for v in slices.values() for x in v))
    assert len(flows) == expected_flows > 0


def test_a_window_keeps_the_args_and_flows_of_the_events_in_it(tmp_path):
    """archive's window.pftrace: only a few steps, each event still with its args and flows."""
    from conftest import sample_trace

    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.render.pictures.perfetto import write_perfetto

    report = analyze_paths([SAMPLES / "overlap"], Options())
    step = report.ranks[0].steps[2]
    out = tmp_path / "w.pftrace"
    out.write_bytes(write_perfetto(report, {0: (step.start_us, step.end_us)}))
    slices, flows = decoded(out)
    events = [e for e in ref.load(sample_trace("overlap"))["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    inside = [
        e for e in events if e.get("cat") in GPU_CATS + CALL_CATS and e["ts"] < step.end_us and e["ts"] + e["dur"] > step.start_us
    ]
    kernels = [e for e in inside if e["cat"] == "kernel"]
    assert kernels
    for e in kernels:
        (args,) = slices[(ns(e["ts"]), e["name"])]
        assert args["grid"] == as_written(e["args"]["grid"]) and args["correlation"] == e["args"]["correlation"]
    calls = {e["args"]["correlation"] for e in inside if e["cat"] in CALL_CATS}
    linked = [e for e in inside if e["cat"] in GPU_CATS and e["args"].get("correlation") in calls]
    assert len(flows) == len(linked) > 0
