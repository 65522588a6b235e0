"""Each GPU activity's launch as the readers keep it (Timeline.launch, issue 60): Kineto's args grid,
block, registers per thread, shared memory and device, and an Nsight export's kernel columns, -1
where absent; the row -1 where the grid or the block is not 1 to 3 whole numbers in (0, 2**31)."""

import shutil
import sqlite3

import numpy as np
import pytest
from conftest import ROOT, SAMPLES, sample_trace
from traces import write_trace

from dbo_trace.trace.event_args import event_args
from dbo_trace.trace.load import read_timelines

PUBLIC = ROOT / "tests" / "data" / "public"
END = 1 << 31


def expected(args: dict | None) -> tuple:
    """(grid, block, registers, shared memory, device) as the columns keep them, from an event's args."""

    def dims(v):
        if type(v) is list and 0 < len(v) <= 3 and all(type(x) is int and 0 < x < END for x in v):
            return list(v) + [0] * (3 - len(v))
        return None

    def whole(v):
        return v if type(v) is int and 0 <= v < END else -1

    args = args or {}
    grid, block = dims(args.get("grid")), dims(args.get("block"))
    if grid is None or block is None:
        return [-1] * 3, [-1] * 3, -1, -1, -1
    return grid, block, whole(args.get("registers per thread")), whole(args.get("shared memory")), whole(args.get("device"))


def rows(tl) -> list[tuple]:
    launch = tl.launch_args()
    return [
        (
            launch.grid[g].tolist(),
            launch.block[g].tolist(),
            *(int(a[g]) for a in (launch.registers, launch.shared_memory, launch.device)),
        )
        for g in range(len(tl.gpu))
    ]


@pytest.mark.parametrize(
    "trace",
    [
        sample_trace("smhungry"),
        *sorted((SAMPLES / "two-gpu-overlap" / "traces").glob("*.json.gz")),
        sample_trace("vllm-graphs-decode"),
        PUBLIC / "hta-rocm-mi250.json.gz",
    ],
    ids=lambda p: p.name[:24],
)
def test_the_columns_are_each_kernels_args(trace):
    """Against the args read back from the file (trace/event_args.py, a pass of its own), per GPU activity."""
    (tl,) = read_timelines(trace, 0)
    args = event_args(trace)
    want = [expected(args.get((True, float(tl.gpu.start[g]), int(tl.gpu.correlation[g])))) for g in range(len(tl.gpu))]
    assert rows(tl) == want
    # the samples' kernels have their launch; HTA's ROCm trace writes none (its rows are -1, as compared above)
    assert (tl.launch_args().grid[~tl.gpu_is_copy, 0] > 0).any() == ("rocm" not in trace.name)
    assert (tl.launch_args().grid[tl.gpu_is_copy] == -1).all()  # copies have none


ODD = [
    ({"grid": [2, 66, 1], "block": [384, 1, 1], "registers per thread": 168, "shared memory": 188636, "device": 0}, None),
    ({"grid": [4], "block": [128, 2], "registers per thread": 0, "shared memory": 0, "device": 3}, None),  # padded
    ({"grid": [0, 1, 1], "block": [1, 1, 1]}, None),  # a dimension of 0
    ({"grid": [True, 1, 1], "block": [1, 1, 1]}, None),  # a bool is no dimension
    ({"grid": [1.5, 1, 1], "block": [1, 1, 1]}, None),
    ({"grid": [END, 1, 1], "block": [1, 1, 1]}, None),
    ({"grid": [1, 1, 1, 1], "block": [1, 1, 1]}, None),  # more than 3
    ({"grid": "1,1,1", "block": [1, 1, 1]}, None),
    ({"grid": [1, 1, 1]}, None),  # no block
    ({"grid": [8, 1, 1], "block": [32, 1, 1], "registers per thread": "32", "shared memory": -5, "device": "0"}, None),
    ({"grid": [8, 1, 1], "block": [32, 1, 1], "registers per thread": 1 << 70, "shared memory": END, "device": False}, None),
    ({}, None),
    (None, "gpu_memcpy"),
]


@pytest.mark.parametrize("one_chunk", [True, False])
def test_odd_launch_args(tmp_path, one_chunk):
    """What the reader keeps of launch args of every odd kind, in C (a chunk of Kineto's lists of three
    ints) or one by one (a chunk with any other); a chunk of many kernels or one at a time."""
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {}}]
    for i, (args, cat) in enumerate(ODD):
        event = {"ph": "X", "cat": cat or "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10.0 * (i + 1), "dur": 5}
        event["args"] = {"correlation": i + 1, "stream": 7, **(args or {})}
        events.append(event)
    path = write_trace({"traceEvents": events}, tmp_path / "odd.json", indent=None if one_chunk else 1)
    (tl,) = read_timelines(path, 0)
    assert rows(tl) == [expected(args) for args, _ in ODD]
    assert (rows(tl)[0], rows(tl)[1]) == (([2, 66, 1], [384, 1, 1], 168, 188636, 0), ([4, 0, 0], [128, 2, 0], 0, 0, 3))


def test_a_chunk_of_valid_launches_is_taken_whole(tmp_path):
    """Kineto's lists of three ints, many at once (the fast path), with an out-of-range row among them."""
    events = []
    for i in range(200):
        grid = [END + 1, 1, 1] if i == 99 else [i + 1, 2, 1]
        args = {
            "correlation": i,
            "stream": 7,
            "grid": grid,
            "block": [64, 1, 1],
            "registers per thread": i,
            "shared memory": 4 * i,
        }
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": float(i), "dur": 0.5, "args": args})
    (tl,) = read_timelines(write_trace({"traceEvents": events}, tmp_path / "many.json.gz"), 0)
    want = [expected(e["args"]) for e in events]
    assert rows(tl) == want and want[99][0] == [-1, -1, -1] and want[100] == ([101, 2, 1], [64, 1, 1], 100, 400, -1)


def test_an_nsys_exports_kernel_columns(tmp_path):
    """gridX..blockZ, registersPerThread, static + dynamic shared memory and deviceId, per kernel in
    the timeline's order; -1 where a value is not a whole number; copies none."""
    path = shutil.copy(PUBLIC / "nsys-saxpy-mpi-cuda-rank0.sqlite", tmp_path / "saxpy.sqlite")
    db = sqlite3.connect(path)
    db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set dynamicSharedMemory = 48, deviceId = 1 where rowid = 1")
    db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set registersPerThread = 'many' where rowid = 2")
    db.commit()
    raw = db.execute(
        "select start, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
        "staticSharedMemory + dynamicSharedMemory, deviceId from CUPTI_ACTIVITY_KIND_KERNEL where end >= start"
    ).fetchall()
    db.close()
    (tl,) = read_timelines(path, 0)
    by_kernel = {
        (s / 1000.0, c): (list(r[:3]), list(r[3:6]), r[6] if isinstance(r[6], int) else -1, r[7], r[8]) for s, c, *r in raw
    }
    got = rows(tl)
    kernels = [g for g in range(len(tl.gpu)) if not tl.gpu_is_copy[g]]
    assert len(kernels) == len(raw)
    assert [got[g] for g in kernels] == [by_kernel[(float(tl.gpu.start[g]), int(tl.gpu.correlation[g]))] for g in kernels]
    assert ([2, 1, 1], [512, 1, 1], 26, 48, 1) in got and any(r[2] == -1 and r[0][0] > 0 for r in got)
    assert all(got[g] == ([-1] * 3, [-1] * 3, -1, -1, -1) for g in np.flatnonzero(tl.gpu_is_copy).tolist())
