"""Cases an adversarial review of the wait/transfer split and the innermost operator found, each on a
small hand-made trace whose answer is known by construction."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import run_cli


def _cpu_ops_trace(folder: Path, ops_of_step) -> Path:
    """Four 1 ms steps: two kernels launched 20 us and 450 us in, the host busy in CPU operators
    between them (ops_of_step(step start) -> [(name, ts, dur)])."""
    folder.mkdir(parents=True, exist_ok=True)
    events, corr = [], 0
    for i in range(4):
        t0 = 10_000 + i * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t0, "dur": 990})
        for name, ts, dur in ops_of_step(t0):
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})
        for off in (20, 450):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + off,
                           "dur": 3, "args": {"correlation": corr}})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + off + 5, "dur": 50,
                           "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
    path = folder / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.mark.parametrize(
    "ops",
    [
        # siblings whose end and start overlap by a hair, as float microseconds at epoch scale do
        lambda t0: [("aten::first", t0 + 100, 100.001), ("aten::second", t0 + 200, 200.0)],
        # a child that outlives its parent
        lambda t0: [("aten::parent", t0 + 100, 200.0), ("aten::child", t0 + 250, 150.0)],
    ],
    ids=["siblings overlapping", "child outliving its parent"],
)
def test_cpu_operator_time_is_kept_whatever_the_nesting(tmp_path: Path, ops) -> None:
    """The host idle from 100 to 400 us of each step is in CPU operators: 4 x 300 us. Cutting it by
    the innermost operator must lose none of it to `untraced`."""
    doc = json.loads(run_cli("report", "--json", str(_cpu_ops_trace(tmp_path / "t", ops))).stdout)
    causes = doc["host_causes"]
    assert causes["causes"]["cpu_ops"]["us"] == pytest.approx(1200.0, abs=0.01)
    assert sum(x["us"] for x in causes["cpu_ops_innermost"]) == pytest.approx(1200.0, abs=0.01)
    assert sum(x["us"] for x in causes["cpu_ops"]) == pytest.approx(1200.0, abs=0.01)


def _two_ranks(folder: Path) -> Path:
    """Two ranks, four 1 ms steps; each microbatch's collective runs on two process groups at once,
    and rank 0 arrives 80 us early at each: its kernels overlap each other and wait 80 us."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        early = rank == 0
        a = (100, 100) if early else (180, 20)
        b = (480, 20) if early else (400, 100)
        kernels = [("comp", 7, 10, 80, None), ("comp", 7, 220, 150, None), ("comm", 20, *a, "1"), ("comm", 21, *a, "2"),
                   ("comp", 7, 510, 200, None), ("comp", 7, 720, 100, None), ("comm", 20, *b, "3"), ("comm", 21, *b, "4"),
                   ("comp", 7, 850, 50, None), ("comp", 7, 910, 50, None)]  # fmt: skip
        events, corr = [], 0
        for i in range(4):
            t0 = 10_000.0 + i * 1000
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t0, "dur": 990})
            for kind, stream, off, dur, group in kernels:
                corr += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": t0 + 1 + corr * 0.01, "dur": 0.5, "args": {"correlation": corr}})  # fmt: skip
                args = {"correlation": corr, "device": rank, "stream": stream}
                name = "gemm_kernel"
                if kind == "comm":
                    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    args |= {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
                             "dtype": "Float", "Process Group Name": group, "Process Group Ranks": "[0, 1]"}  # fmt: skip
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": stream, "ts": t0 + off, "dur": dur,
                               "args": args})  # fmt: skip
        doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
               "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}, "traceEvents": events}  # fmt: skip
        with gzip.open(folder / f"rank{rank}.pt.trace.json.gz", "wt") as f:
            json.dump(doc, f)
    return folder


def test_overlapping_comm_kernels_never_make_a_negative_transfer(tmp_path: Path) -> None:
    """Rank 0's two concurrent kernels wait the same 80 us: counted once, the round trip's comm (its
    covered time) is 80 us of waiting and the rest transfer, never below zero; the split's four
    parts add up to the covered comm time."""
    doc = json.loads(run_cli("report", "--json", str(_two_ranks(tmp_path / "ranks"))).stdout)
    for rank in doc["ranks"]:
        rt, p = rank["round_trips"], rank["peer_wait"]
        assert rt["transfer_per_round_trip_us"] >= 0 and rt["wait_per_round_trip_us"] >= 0
        assert rt["wait_per_round_trip_us"] <= rt["comm_per_round_trip_us"] + 1e-6
        parts = p["hidden_wait_us"] + p["hidden_transfer_us"] + p["exposed_wait_us"] + p["exposed_transfer_us"]
        assert parts == pytest.approx(rank["comm"]["busy_us"], abs=0.01)
    for rank in doc["ranks"]:
        # each rank arrives 80 us early at one of its two collectives a step (rank 0 at the first, rank 1
        # at the second), on two groups at once: 80 us a step covered, though the kernels wait 160
        p = rank["peer_wait"]
        assert p["hidden_wait_us"] + p["exposed_wait_us"] == pytest.approx(4 * 80, abs=0.01)
        assert p["wait_us"] == pytest.approx(4 * 2 * 80, abs=0.01)  # summed per kernel, as documented
