"""A report opens each trace file once (issue 60): the SM evidence of crowded comm is computed from
the launch columns the first read kept (Timeline.launch), not from a second pass over the file, and
an Nsight export is told by the first bytes the reader's own open reads. Every way a file is opened
from Python is counted by path (builtins.open, io.open, os.open; sqlite3.connect for an export)
while the report is made, through the pipeline and through the command line in this process."""

import builtins
import gzip
import io
import json
import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, run_cli

from dbo_trace.analysis.model import Options
from dbo_trace.analysis.overlap.exposure import CROWDED
from dbo_trace.analysis.overlap.held import CAUSES
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.trace.load import discover

PUBLIC = ROOT / "tests" / "data" / "public"


@pytest.fixture
def opened(monkeypatch):
    """Per real path, how often it was opened (and, apart, connected to by SQLite) from now on."""
    counts: Counter = Counter()
    real_open, real_os_open, real_connect = builtins.open, os.open, sqlite3.connect

    def key(file):
        if isinstance(file, (str, bytes, os.PathLike)):
            return os.path.realpath(os.fsdecode(file))
        return None  # a file descriptor

    def spy_open(file, *args, **kwargs):
        counts[key(file)] += 1
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        counts[key(path)] += 1
        return real_os_open(path, *args, **kwargs)

    def spy_connect(database, *args, **kwargs):
        name = str(database)
        path = name[len("file:") :].split("?")[0] if name.startswith("file:") else name
        counts[("sqlite", os.path.realpath(path))] += 1
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    monkeypatch.setattr(sqlite3, "connect", spy_connect)
    monkeypatch.delenv("DBO_TRACE_WORKERS", raising=False)  # one process: every open is seen here
    return counts


def traces_of(sample: Path) -> list[str]:
    traces = [os.path.realpath(t) for t in discover([sample]).traces]
    assert traces
    return traces


# afd-pair-graphs-dbo: the pair (two traces, the FFN's cut to the attention's window and
# analysed again from the timeline in hand); two-gpu-overlap, overlap, smhungry: comm crowded, so
# the SM evidence is computed on every rank.
SAMPLES_READ = ["afd-pair-graphs-dbo", "two-gpu-overlap", "overlap", "smhungry"]


@pytest.mark.parametrize("name", SAMPLES_READ)
def test_the_pipeline_opens_each_trace_once(name, opened):
    traces = traces_of(SAMPLES / name)
    report = analyze_paths([SAMPLES / name], Options())
    assert {t: opened[t] for t in traces} == dict.fromkeys(traces, 1)
    if name != "afd-pair-graphs-dbo":
        assert all(r.sm_evidence is not None for r in report.ranks)


@pytest.mark.parametrize("name", ["afd-pair-graphs-dbo", "two-gpu-overlap"])
@pytest.mark.parametrize("output", [[], ["--json"], ["--markdown"]])
def test_the_command_opens_each_trace_once(name, output, opened):
    traces = traces_of(SAMPLES / name)
    proc = run_cli("report", *output, str(SAMPLES / name))
    assert proc.returncode == 0, proc.stderr
    assert {t: opened[t] for t in traces} == dict.fromkeys(traces, 1)


def test_an_nsys_export_is_told_by_the_open_that_reads_it(tmp_path, opened):
    """An export named like a trace is told by its SQLite header, read by the reader's own open (its
    first 16 bytes), then read by SQLite: no other opening."""
    export = shutil.copy(PUBLIC / "nsys-saxpy-mpi-cuda-rank0.sqlite", tmp_path / "rank0.json")
    opened.clear()  # the copy's own openings
    as_json = analyze_paths([Path(export)], Options())
    path = os.path.realpath(export)
    assert opened[path] == 1 and opened[("sqlite", path)] == 1
    as_sqlite = analyze_paths([PUBLIC / "nsys-saxpy-mpi-cuda-rank0.sqlite"], Options())
    assert [r.total.kernels for r in as_json.ranks] == [r.total.kernels for r in as_sqlite.ranks]


# The SM evidence as the code before issue 60 gave it (read back from the file by
# trace/event_args.py in app/pipeline.py's with_sm_evidence), recorded before the change: repr of
# each rank's RankAnalysis.sm_evidence.
_NVJET = (
    "holder=LaunchShape(name='nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT', grid=(2, 66, 1), block=(384, 1, 1), "
    "registers_per_thread=168, shared_memory=188636)"
)
_SPIN = (
    "comm=LaunchShape(name='at::cuda::(anonymous namespace)::spin_kernel(long)', grid=(1, 1, 1), block=(1, 1, 1), "
    "registers_per_thread=16, shared_memory=0)"
)
_NCCL = (
    "comm=LaunchShape(name='ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)', grid=(32, 1, 1), "
    "block=(640, 1, 1), registers_per_thread=96, shared_memory=103808)"
)
_NVJET_LEFT = "sms=132, per_sm=1, left_shared_memory=44836, left_registers=1024, left_threads=1664"
BEFORE = {
    "overlap": [f"SmEvidence({_NVJET}, {_SPIN}, held=34, {_NVJET_LEFT}, comm_fits=True, comm_sms=None, env_recorded=False)"],
    "two-gpu-overlap": [
        f"SmEvidence({_NVJET}, {_NCCL}, held=60, {_NVJET_LEFT}, comm_fits=False, comm_sms=None, env_recorded=True)",
        f"SmEvidence({_NVJET}, {_NCCL}, held=54, {_NVJET_LEFT}, comm_fits=False, comm_sms=None, env_recorded=True)",
    ],
    "smhungry": [
        "SmEvidence(holder=LaunchShape(name='void at::native::vectorized_elementwise_kernel<4, "
        "at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, "
        "std::array<char*, 2ul>)', grid=(524288, 1, 1), block=(128, 1, 1), registers_per_thread=32, shared_memory=0), "
        f"{_SPIN}, held=37, sms=132, per_sm=16, left_shared_memory=233472, left_registers=0, left_threads=0, "
        "comm_fits=False, comm_sms=None, env_recorded=True)"
    ],
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_sm_evidence_is_what_the_second_pass_gave(name):
    report = analyze_paths([SAMPLES / name], Options())
    assert [repr(r.sm_evidence) for r in report.ranks] == BEFORE[name]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_holders_launch_is_the_raw_events(name):
    """Each rank's holder and comm kernel, found in its raw JSON by the name and the start of its
    first crowded pair: their args are the evidence's shapes; the device's SMs its deviceProperties'."""
    report = analyze_paths([SAMPLES / name], Options())
    for r in report.ranks:
        x, d = r.sm_evidence, r.detailed()
        tl = d.timeline
        with gzip.open(tl.source, "rt") as fh:
            doc = json.load(fh)
        kernels = {(e["name"], e["ts"]): e["args"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
        crowded = [i for i in range(len(d.held)) if CAUSES[int(d.held.cause[i])] == CROWDED]
        first = next(i for i in crowded if tl.names[tl.gpu.name[d.held.holder[i]]] == x.holder.name)
        holder, comm = int(d.held.holder[first]), int(d.held.kernel[first])
        for shape, g in ((x.holder, holder), (x.comm, comm)):
            args = kernels[(shape.name, float(tl.gpu.start[g]))]
            assert (list(shape.grid), list(shape.block)) == (args["grid"], args["block"])
            assert (shape.registers_per_thread, shape.shared_memory) == (args["registers per thread"], args["shared memory"])
        device_id = kernels[(x.holder.name, float(tl.gpu.start[holder]))]["device"]
        assert x.sms == next(p["numSms"] for p in doc["deviceProperties"] if p["id"] == device_id)
