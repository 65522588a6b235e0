"""Shapes real traces take that the demo's do not: work launched before the profiler started, ROCm's
string streams and hip* calls, symmetric-memory collectives, collectives of several kernels."""

import numpy as np
import pytest
from conftest import ROOT, SAMPLES, report_json, run_cli
from traces import CALL_CATEGORIES, GPU_CATEGORIES, events_of, read_trace, rewrite_trace, write_trace

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.overlap.operations import operation_ids
from dbo_trace.analysis.rank_analysis import operations_per_step

PUBLIC = ROOT / "tests" / "data" / "public"


def test_work_launched_before_the_profiler_is_in_no_step(tmp_path):
    """Drop the launch calls of the first decode step's kernels, as if the profiler had started after
    them: those kernels must not land in whichever step their GPU time falls into."""
    (src,) = (SAMPLES / "vllm-graphs-decode" / "traces").glob("*.json.gz")
    before = report_json(str(src))
    first = before["steps"][0]
    doc = read_trace(src)
    t0, t1 = first["start_us"], first["start_us"] + first["step_us"]
    calls = [e for e in events_of(doc, *CALL_CATEGORIES) if "correlation" in e.get("args", {}) and t0 <= e["ts"] <= t1]
    dropped = {e["args"]["correlation"] for e in calls}
    lowest_kept = min(
        e["args"]["correlation"] for e in events_of(doc, *CALL_CATEGORIES) if "correlation" in e.get("args", {}) and e["ts"] > t1
    )
    assert max(dropped) < lowest_kept  # they are the earliest launches: as if before the profiler

    def profiled(e):  # what a profiler started at t1 would have seen on the CPU side
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            return e.get("args", {}).get("correlation") not in dropped
        if e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            return e["ts"] + e.get("dur", 0) >= t1
        return True

    doc["traceEvents"] = [e for e in doc["traceEvents"] if profiled(e)]
    orphans = sum(1 for e in events_of(doc, *GPU_CATEGORIES) if e["args"].get("correlation") in dropped)
    path = write_trace(doc, tmp_path / "late-start.pt.trace.json.gz")
    after = report_json(str(path))
    assert orphans > 0
    assert sum(s["gpu"]["kernels"] for s in after["steps"]) == sum(s["gpu"]["kernels"] for s in before["steps"][1:])
    assert any(f"{orphans} GPU activities were launched before the profiler started" in n for n in after["ranks"][0]["notes"])


def test_rocm_string_streams_and_hip_graph_launches(tmp_path):
    """ROCm writes args.stream as a string and launches graphs with hipGraphLaunch."""
    src = PUBLIC / "hta-rocm-mi250.json.gz"
    plain = report_json(str(src))

    def as_rocm(doc):
        for e in doc["traceEvents"]:
            if isinstance(e.get("args", {}).get("stream"), int):
                e["args"]["stream"] = hex(e["args"]["stream"])
        launch = next(e for e in doc["traceEvents"] if e.get("name") == "hipLaunchKernel")
        launch["name"] = "hipGraphLaunch"

    doc = report_json(str(rewrite_trace(src, tmp_path / "rocm.json.gz", as_rocm)))
    assert doc["gpu"]["kernels"] == plain["gpu"]["kernels"] and doc["gpu"]["busy_us"] == plain["gpu"]["busy_us"]
    assert doc["graphs"]["launches"] == 1 and doc["graphs"]["replayed_kernels"] == 1
    assert doc["host"]["launches"] == plain["host"]["launches"] - 1


@pytest.mark.parametrize(
    "name",
    [
        "void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 4>(float*, unsigned long)",
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(...)",
        "two_shot_all_reduce_kernel",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "rcclGenericKernel",
        "void deep_ep::intranode::notify_dispatch<8>(...)",
    ],
)
def test_communication_families(name):
    assert c.kernel_kinds([name], np.array([0]), np.array([False]), np.array([0]), c.CommRules())[0] == c.COMM


def test_gemm_is_not_communication():
    name = "nvjet_sm90_tst_256x16_64x6_2x1_v_bz_TNT"
    assert c.kernel_kinds([name], np.array([0]), np.array([False]), np.array([0]), c.CommRules())[0] == c.COMPUTE


def test_a_collective_of_two_kernels_is_one_operation():
    """DeepEP launches notify_dispatch then dispatch: one dispatch. Compute between two comm kernels
    separates operations; two threads (microbatches) count apart; graph-replayed kernels share one
    launch and are ordered by when they ran."""
    # one step: thread 1 launches notify, dispatch, gemm, combine; thread 2 the same; a replay of [comm, gemm, comm].
    is_comm = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1], bool)
    lane = np.array([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3])
    launch = np.array([1, 2, 3, 4, 1.5, 2.5, 3.5, 4.5, 9, 9, 9])
    start = np.array([10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 22.0])
    step = np.zeros(11, np.int64)
    ops = operations_per_step(operation_ids(step=step, lane=lane, launch_start=launch, start=start, is_comm=is_comm), step, 1)
    assert ops.tolist() == [2 + 2 + 2]


def test_comm_kernels_only_replaces_the_built_in_set():
    trace = str(PUBLIC / "hta-training-2rank-nccl.json.gz")
    built_in = report_json(trace)
    assert built_in["comm"]["kernels"] > 0
    only = report_json(trace, "--comm-kernels-only", "Broadcast")
    assert 0 < only["comm"]["kernels"] < built_in["comm"]["kernels"]
    assert run_cli("report", trace, "--comm-kernels", "x", "--comm-kernels-only", "y").returncode == 2
