"""The streaming Kineto reader against json.load, on real and hand-made traces."""

import gzip
import json

import numpy as np
import pytest
from conftest import VARIANTS, sample_trace
from traces import read_trace, write_trace

from dbo_trace.trace.kineto import read_kineto

CATS = {
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_runtime",
    "cuda_driver",
    "cpu_op",
    "user_annotation",
    "python_function",
}


def _expected(doc):
    return sorted((e["ts"], e["name"]) for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in CATS)


def _got(raw):
    return sorted(zip(raw.events.ts.tolist(), [raw.names[i] for i in raw.events.name]))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("block", [1 << 24, 4096, 97])
def test_matches_json_load(variant, block):
    path = sample_trace(variant)
    doc = read_trace(path)
    raw = read_kineto(path, block=block)
    assert _got(raw) == _expected(doc)
    assert raw.metadata["baseTimeNanoseconds"] == doc["baseTimeNanoseconds"]


def test_gzip_members_and_padding(tmp_path):
    """gzip's rules: concatenated members are one stream, zero padding after a member is skipped."""
    text = gzip.decompress(sample_trace("graph").read_bytes())
    cut = len(text) // 3
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(text[:cut]) + bytes(512) + gzip.compress(text[cut:], compresslevel=1) + bytes(7))
    raw = read_kineto(path, block=4096)
    assert _got(raw) == _expected(json.loads(text))


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """The reader with ISA-L's inflate (a dependency) and with zlib's, its fallback where isal is missing."""
    from dbo_trace.trace.kineto import blocks as kineto  # where the inflater is chosen

    if request.param == "zlib":
        monkeypatch.setattr(kineto, "isal_zlib", None)
    else:
        pytest.importorskip("isal")
    assert request.param in type(kineto._inflater()).__module__ + repr(type(kineto._inflater()))
    return request.param


def test_both_inflaters_read_members_and_padding_alike(tmp_path, inflater):
    text = gzip.decompress(sample_trace("overlap").read_bytes())
    cut = len(text) // 2
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(text[:cut], compresslevel=9) + bytes(3) + gzip.compress(text[cut:], compresslevel=1))
    for block in (97, 4096, 1 << 20):
        assert _got(read_kineto(path, block=block)) == _expected(json.loads(text))


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_both_inflaters_refuse_bad_gzip_in_one_line(tmp_path, inflater, damage):
    from dbo_trace.trace.errors import InputError

    data = bytearray(sample_trace("overlap").read_bytes())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    else:
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(range(64))
    path = tmp_path / f"{damage}.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="truncated or corrupt gzip") as caught:
        read_kineto(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize("style", ["minified", "indented"])
def test_other_json_layouts(tmp_path, style):
    doc = read_trace(sample_trace("graph"))
    path = write_trace(doc, tmp_path / "t.json", **({"separators": (",", ":")} if style == "minified" else {"indent": 4}))
    raw = read_kineto(path, block=1000)
    assert _got(raw) == _expected(doc)


def test_boundary_lookalikes_inside_strings_and_nested_args(tmp_path):
    """'},{' inside a name and inside nested args must not split an event."""
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": 'tricky"},{"name',
            "pid": 0,
            "tid": 7,
            "ts": 1.5,
            "dur": 2,
            "args": {"stream": 7, "correlation": 5},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op",
            "pid": 1,
            "tid": 1,
            "ts": 0.5,
            "dur": 1,
            "args": {"nested": [{"a": 1}, {"b": 2}], "External id": 3},
        },
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 9},
    ]
    path = write_trace({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 42}, tmp_path / "t.json")
    for block in (7, 64, 4096):
        raw = read_kineto(path, block=block)
        assert sorted(raw.names) == sorted(['tricky"},{"name', "op"])
        assert raw.metadata == {"schemaVersion": 1, "baseTimeNanoseconds": 42}
        k = raw.names.index('tricky"},{"name')
        i = int(np.flatnonzero(raw.events.name == k)[0])
        assert raw.events.correlation[i] == 5 and raw.events.stream[i] == 7


def test_events_without_timestamp_are_counted_not_fatal(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
    ]
    path = write_trace({"traceEvents": events}, tmp_path / "t.json")
    raw = read_kineto(path)
    assert len(raw.events.ts) == 1 and raw.skipped_no_time == 1


@pytest.mark.parametrize("block", [1 << 24, 4096, 97])
def test_a_tail_with_lists_of_objects_after_the_events(tmp_path, block):
    """Valid JSON may put deviceProperties (a list of objects, so a `}]`) after traceEvents; the
    reader must not take that `}]` for the array's end (found by the benchmark's tiled traces)."""
    doc = read_trace(sample_trace("graph"))
    events = doc.pop("traceEvents")
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": ' + json.dumps(events) + ", " + json.dumps(doc)[1:])
    raw = read_kineto(path, block=block)
    assert _got(raw) == _expected({"traceEvents": events})
    assert raw.metadata["deviceProperties"] == doc["deviceProperties"]


def test_absent_and_odd_fields_in_one_chunk(tmp_path):
    """Every way a field may be absent or odd, side by side in one chunk (the columns are taken a
    whole chunk at a time, with a slower path for odd values): each event lands as written here."""
    base = {"ph": "X", "pid": 1, "tid": 2, "ts": 10.0, "dur": 1.0}
    events = [
        dict(base, cat="cpu_op", name="no ts", ts=None),  # null ts: skipped, counted
        dict(base, cat="cpu_op", name="missing ts", ts=...),  # absent ts: the same
        dict(base, cat="cpu_op", name="cpu no dur", dur=...),  # a CPU range without dur: an instant, 0
        dict(base, cat="kernel", name="kernel no dur", dur=...),  # GPU activity without dur: dropped
        dict(base, cat="kernel", name="string ids", pid="12", tid="stream 7", args={"stream": "0x1f"}),
        dict(base, cat="kernel", name="null args", args=None),
        dict(base, cat="kernel", name="huge id", args={"correlation": 1 << 70}),
        dict(base, cat="kernel", name="plain", args={"correlation": 5, "stream": 7}),
    ]
    path = write_trace({"traceEvents": [{k: v for k, v in e.items() if v is not ...} for e in events]}, tmp_path / "t.json")
    raw = read_kineto(path)
    assert raw.skipped_no_time == 2
    assert raw.dropped == {"GPU activity or CUDA call without a duration": 1}
    got = {
        raw.names[n]: (int(p), int(t), float(d), int(c), int(s))
        for n, p, t, d, c, s in zip(
            raw.events.name, raw.events.pid, raw.events.tid, raw.events.dur, raw.events.correlation, raw.events.stream
        )
    }
    assert got == {
        "cpu no dur": (1, 2, 0.0, -1, -1),
        "string ids": (12, 7, 1.0, -1, 31),
        "null args": (1, 2, 1.0, -1, -1),
        "huge id": (1, 2, 1.0, -1, -1),
        "plain": (1, 2, 1.0, 5, 7),
    }


@pytest.mark.parametrize("odd", [None, {"ph": "Z", "name": "a phase no format has"}, {"name": "no phase at all"}])
def test_events_of_every_phase_and_an_unknown_one_in_one_chunk(tmp_path, odd):
    """A chunk is decoded by phase (the complete events' fields only); one with a phase the Trace
    Event Format does not have, or none, is decoded again the general way: the same columns."""
    x = {"ph": "X", "pid": 1, "tid": 2, "dur": 1.0}
    events = [dict(x, cat="kernel", name="k", ts=1.0, args={"correlation": 3, "stream": 7})]
    for i, phase in enumerate("B E i I C b n e s t f P N O D M V v R c ( )".split()):
        events.append({"ph": phase, "cat": "kernel", "name": f"not complete {phase}", "pid": 1, "tid": 2, "ts": 2.0 + i})
    events += [dict(x, cat="overhead", name="not kept", ts=30.0), dict(x, cat="cpu_op", name="op", ts=31.0)]
    if odd is not None:
        events.insert(5, odd)
    doc = {"traceEvents": events}
    raw = read_kineto(write_trace(doc, tmp_path / "t.json"))
    assert _got(raw) == _expected(doc) == [(1.0, "k"), (31.0, "op")]
    assert raw.events.correlation.tolist() == [3, -1] and raw.events.stream.tolist() == [7, -1]


def test_fields_of_events_that_are_not_complete_are_not_type_checked(tmp_path):
    """Only complete events are decoded field by field: a metadata, flow or instant event with a field
    of the wrong type no longer refuses the trace (nothing reads them); a complete one still does."""
    x = {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 2, "ts": 1.0, "dur": 1.0}
    odd = [
        {"ph": "M", "name": 5, "pid": 1, "args": {"name": "x"}},
        {"ph": "f", "cat": "ac2g", "name": "flow", "id": 1, "ts": "late", "pid": 1, "tid": 2},
        {"ph": "i", "name": "mark", "ts": 2.0, "args": [1, 2]},
        {"ph": "s", "cat": 7, "name": "flow", "id": 1, "ts": 3.0, "pid": 1.5, "tid": 2, "args": {"correlation": "c"}},
    ]
    clean = read_kineto(write_trace({"traceEvents": [x]}, tmp_path / "clean.json"))
    raw = read_kineto(write_trace({"traceEvents": [odd[0], x, *odd[1:]]}, tmp_path / "odd.json"))
    assert _got(raw) == _got(clean) == [(1.0, "k")]
    from dbo_trace.trace.errors import InputError

    with pytest.raises(InputError, match="has a `name` of the wrong type"):
        read_kineto(write_trace({"traceEvents": [dict(x, name=5), *odd]}, tmp_path / "bad.json"))
