"""Reading a few events' args back (trace/event_args.py): with the extents the first read kept, only
the chunks whose time span meets the window are decoded, and the answer is the whole pass's."""

import gzip
import shutil

import numpy as np
import pytest
from conftest import ROOT, sample_trace
from traces import write_trace

from dbo_trace.trace import kineto as k
from dbo_trace.trace.event_args import event_args
from dbo_trace.trace.timeline import build_timeline

PUBLIC = ROOT / "tests" / "data" / "public"
TRACES = [
    sample_trace("smhungry"),
    sample_trace("vllm-graphs-decode"),
    PUBLIC / "hta-rocm-mi250.json.gz",
    PUBLIC / "kineto-2020-array-resnet50.json.gz",  # the array layout
]


def windows(tl, count=6):
    """The spans of GPU activities spread through the trace: first, last and between."""
    picks = np.linspace(0, len(tl.gpu) - 1, count).astype(int)
    return [(float(tl.gpu.start[i]), float(tl.gpu.end[i]), i) for i in picks]


def key_of(tl, i):
    return (True, float(tl.gpu.start[i]), int(tl.gpu.correlation[i]))


def whole_pass(monkeypatch, path, window):
    with monkeypatch.context() as m:
        m.setattr("dbo_trace.trace.event_args._read_chunks", lambda *a: (_ for _ in ()).throw(ValueError("off")))
        return event_args(path, window)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
@pytest.mark.parametrize("block", [k.BLOCK, 1 << 14])
def test_the_chunks_that_meet_the_window_give_the_whole_passs_args(monkeypatch, path, block):
    tl = build_timeline(k.read_kineto(path, block=block), 0)
    assert tl.extents is not None and len(tl.extents)
    for lo, hi, i in windows(tl):
        expected = whole_pass(monkeypatch, path, (lo, hi))
        with monkeypatch.context() as m:  # no whole pass: the chunks alone must answer
            m.setattr(k, "_read", lambda *a, **kw: pytest.fail("read the whole file again"))
            got = event_args(path, (lo, hi), tl.extents)
        assert got == expected
        assert got.get(key_of(tl, i)), "the window's own activity has its args"


def test_chunks_of_a_trace_read_by_two_processes(monkeypatch):
    monkeypatch.setattr(k, "PARALLEL_MIN_BYTES", 0)
    path = sample_trace("smhungry")
    raw = k.read_kineto(path, block=1 << 14, workers=2)
    tl = build_timeline(raw, 0)
    assert len(tl.extents) > 10
    for lo, hi, i in windows(tl):
        assert event_args(path, (lo, hi), tl.extents) == whole_pass(monkeypatch, path, (lo, hi))


def test_a_trace_rewritten_since_it_was_read_is_read_again_whole(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    shutil.copy(sample_trace("smhungry"), path)
    tl = build_timeline(k.read_kineto(path, block=1 << 14), 0)
    lo, hi, _ = windows(tl)[-1]
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": lo, "dur": hi - lo, "args": {"grid": [2, 1, 1]}}
    write_trace({"traceEvents": [kernel]}, path)  # a shorter trace: the old chunks lie past its end
    assert len(gzip.decompress(path.read_bytes())) < tl.extents[-1, 1]
    got = event_args(path, (lo, hi), tl.extents)
    assert got == whole_pass(monkeypatch, path, (lo, hi)) == {(True, lo, -1): {"grid": [2, 1, 1]}}


def test_events_that_are_not_complete_are_read_past_as_the_first_read_does(tmp_path, monkeypatch):
    """A flow event with a ts of the wrong type: the first read passes it (kineto decodes by phase),
    and so does reading args back, with the extents or without (before, the whole pass refused the
    file, and a --perfetto export lost every event's args)."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 5.0,
              "args": {"correlation": 3, "grid": [4, 1, 1]}}  # fmt: skip
    flow = {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 0, "tid": 7, "ts": "10"}
    path = write_trace({"traceEvents": [flow, kernel, flow]}, tmp_path / "t.json.gz")
    tl = build_timeline(k.read_kineto(path), 0)
    expected = {(True, 10.0, 3): {"correlation": 3, "grid": [4, 1, 1]}}
    assert event_args(path, (11.0, 12.0), tl.extents) == whole_pass(monkeypatch, path, (11.0, 12.0)) == expected
    assert event_args(path) == expected
