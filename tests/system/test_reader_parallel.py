"""The reader's worker processes (trace/kineto/read.py, _SharedChunks) give what a sequential read gives,
and hand anything unusual back to the sequential reader: errors keep their exact text."""

import gzip
import json

import numpy as np
import pytest
from conftest import ROOT, sample_trace
from traces import read_trace

from dbo_trace.trace import kineto as k
from dbo_trace.trace.errors import InputError


def _same(a: k.RawTrace, b: k.RawTrace) -> None:
    assert a.names == b.names and a.metadata == b.metadata
    assert a.dropped == b.dropped and a.skipped_no_time == b.skipped_no_time
    for name in k.EventColumns.__dataclass_fields__:
        assert np.array_equal(getattr(a.events, name), getattr(b.events, name)), name


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(k, "PARALLEL_MIN_BYTES", 0)


def _shared(monkeypatch, path, **kwargs):
    """read_kineto with workers, failing if it fell back to the sequential read."""
    sequential = k._read

    def only_shared(path, progress, block, share=None):
        assert share is not None, "the shared read fell back to the sequential one"
        return sequential(path, progress, block, share)

    monkeypatch.setattr(k, "_read", only_shared)
    try:
        return k.read_kineto(path, **kwargs)
    finally:
        monkeypatch.setattr(k, "_read", sequential)


@pytest.mark.parametrize("variant", ["vllm-graphs-decode", "late", "overlap"])
def test_workers_read_what_one_process_reads(monkeypatch, variant):
    path = sample_trace(variant)
    _same(k.read_kineto(path, block=1 << 20), _shared(monkeypatch, path, block=1 << 20, workers=2))


PUBLIC = ROOT / "tests" / "data" / "public"


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("path", [sample_trace("overlap"), PUBLIC / "hta-training-16rank-nccl-graphs.json.gz"])
def test_processes_sharing_a_trace_merge_its_chunks_in_order(monkeypatch, path, workers):
    """Small blocks: hundreds of chunks, taken in turn by this process and each worker."""
    _same(k.read_kineto(path, block=4096), _shared(monkeypatch, path, block=4096, workers=workers))


@pytest.mark.parametrize(
    "name", ["hta-training-16rank-nccl-graphs.json.gz", "hta-rocm-mi250.json.gz", "kineto-2021-v100.json.gz"]
)
def test_workers_read_other_projects_traces_as_one_process_does(monkeypatch, name):
    """Traces this project did not write (HTA's and Kineto's test data, tests/data/README.md), in
    Kineto's layout, so that their chunks go to the workers."""
    path = PUBLIC / name
    assert k.FAST_BOUNDARIES[0] in gzip.decompress(path.read_bytes())
    _same(k.read_kineto(path, block=1 << 16), _shared(monkeypatch, path, block=1 << 16, workers=2))


def test_one_event_per_line_layout(monkeypatch, tmp_path):
    doc = read_trace(sample_trace("graph"))
    events = doc.pop("traceEvents")
    path = tmp_path / "lines.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n], " + json.dumps(doc)[1:])
    _same(k.read_kineto(path, block=4096), _shared(monkeypatch, path, block=4096, workers=2))


def test_a_bad_event_gives_the_sequential_error(tmp_path):
    """In Kineto's layout, so that the chunk holding it goes to a worker, fails there, and the file is
    read again sequentially."""
    doc = read_trace(sample_trace("graph"))
    events = doc.pop("traceEvents")
    events[len(events) // 2]["ts"] = "soon"
    path = tmp_path / "bad.json"
    laid_out = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    path.write_text('{"traceEvents": [\n' + laid_out + "\n], " + json.dumps(doc)[1:])
    assert k.FAST_BOUNDARIES[0] in path.read_bytes()
    with pytest.raises(InputError) as sequential:
        k.read_kineto(path, block=4096)
    with pytest.raises(InputError) as parallel:
        k.read_kineto(path, block=4096, workers=2)
    assert str(parallel.value) == str(sequential.value) and "wrong type" in str(parallel.value)


def test_pieces_are_cut_at_the_first_boundary_past_each_size():
    """_pieces against a regex: each piece ends at the first Kineto or one-per-line boundary at or
    past `size` bytes from its start, however far it is (gaps beyond the 64 kB looked at first)."""
    import re

    rng = np.random.default_rng(5)
    either = re.compile(rb"\n  \},\n  \{|\},\n\{")
    for trial in range(40):
        parts = []
        for _ in range(int(rng.integers(1, 30))):
            parts.append(b"x" * int(rng.choice([10, 500, 5000, 70000, 200000])))
            parts.append(k.FAST_BOUNDARIES[int(rng.integers(0, 2))] if trial % 3 else k.FAST_BOUNDARIES[0])
        buf = b"".join(parts) + b"y" * 100
        size = int(rng.choice([100, 4096, 1 << 16, 1 << 20]))
        want, start = [], 0
        while len(buf) - start > size and (m := either.search(buf, start + size)):
            close = m.start() + m.group().index(b"}") + 1
            want.append((start, close))
            start = m.end() - 1
        want.append((start, len(buf)))
        assert [(at, bytes(p)) for at, p in k._pieces(buf, size, len(buf))] == [(a, buf[a:b]) for a, b in want], trial
