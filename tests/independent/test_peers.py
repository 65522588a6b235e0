"""Across ranks: clocks aligned from what the traces have, collectives matched, each one's wait, the
waits summed per rank, the straggler threshold; figures against tests/references/peers_reference.py, a plain
computation from docs/analysis.md that shares no code with dbo_trace."""

import json

import pytest
from conftest import SAMPLES, report_json
from peers_reference import waits
from traces import rewrite_trace, write_trace

from dbo_trace.analysis.classify import CommRules

PUBLIC = SAMPLES.parent / "tests" / "data" / "public"
TWO_GPU = ("overlap", "serial", "graph", "hostbound")


def _traces(folder):
    return sorted((folder / "traces").glob("*.json.gz")) if (folder / "traces").is_dir() else sorted(folder.glob("*.json.gz"))


@pytest.fixture(scope="module")
def docs():
    return {m: report_json(str(SAMPLES / f"two-gpu-{m}")) for m in TWO_GPU}


@pytest.mark.parametrize("mode", TWO_GPU)
def test_waits_agree_with_the_independent_computation(docs, mode):
    doc = docs[mode]
    cross = doc["cross_rank"]
    assert cross["alignment"]["method"] == "baseTimeNanoseconds"
    ref, collectives = waits(_traces(SAMPLES / f"two-gpu-{mode}"), CommRules().regex().pattern)
    got = cross["waits"]
    assert len(got["operations"]) == len(collectives) > 0
    for rank, r in ref.items():
        mine = got["ranks"][str(rank)]
        assert mine["comm_us"] == pytest.approx(r["comm"], rel=1e-6)
        tolerance = 0.01 * r["comm"]  # within 1% of the rank's comm time
        assert abs(mine["wait_us"] - r["wait"]) <= tolerance
        assert abs(mine["transfer_us"] - r["transfer"]) <= tolerance
        for peer, us in r["waited_for"].items():
            assert abs(mine["waited_for_us"][str(peer)] - us) <= tolerance
        assert doc["ranks"][rank]["peer_wait"]["wait_us"] == mine["wait_us"]


def test_each_operation_wait_is_the_last_arrival_less_its_own_bounded_by_its_kernel(docs):
    for op in docs["overlap"]["cross_rank"]["waits"]["operations"]:
        arrivals = {r: v["arrival_us"] for r, v in op["ranks"].items()}
        last = max(arrivals.values())
        assert arrivals[str(op["last_rank"])] == last
        for v in op["ranks"].values():
            assert v["wait_us"] == pytest.approx(min(last - v["arrival_us"], v["kernel_us"]), abs=1e-3)
            assert v["transfer_us"] == pytest.approx(v["kernel_us"] - v["wait_us"], abs=2e-3)


def test_a_10_us_skew_is_not_a_straggler(docs):
    cross = docs["overlap"]["cross_rank"]
    assert cross["max_skew_us"] < 20
    assert cross["summary"].startswith("no straggler")
    assert cross["late_counts"] == {}
    assert cross["straggler_threshold_us"] >= 0.02 * cross["median_step_us"]


def test_overlap_names_who_waited_for_whom_and_where(docs):
    lines = docs["overlap"]["cross_rank"]["lines"]
    assert any(line.startswith("rank 1 waited") and "for rank 0" in line and "microbatch" in line for line in lines)
    assert any(line.startswith("arrived last by more than") for line in lines)
    reasons = docs["overlap"]["ranks"][1]["exposed_comm_reasons"]
    assert reasons["peer_us"] > 0
    # the reasons still add up to the exposed time
    assert sum(v for k, v in reasons.items() if k != "exposed_us") == pytest.approx(reasons["exposed_us"], abs=0.01)


def _to_epoch(doc):
    base = doc.pop("baseTimeNanoseconds") / 1000.0
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = e["ts"] + base


def _no_clock(doc, shift_us):
    doc.pop("baseTimeNanoseconds")
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = e["ts"] - 5.1e12 + shift_us


def test_epoch_ts_aligns_like_base_time(tmp_path, docs):
    for src in _traces(SAMPLES / "two-gpu-overlap"):
        rewrite_trace(src, tmp_path / src.name, _to_epoch)
    doc = report_json(str(tmp_path))
    cross = doc["cross_rank"]
    assert cross["alignment"]["method"] == "ts on the epoch clock"
    before = docs["overlap"]["cross_rank"]["waits"]["ranks"]
    for rank, r in cross["waits"]["ranks"].items():
        assert r["wait_us"] == pytest.approx(before[rank]["wait_us"], abs=0.5)


def test_without_a_clock_the_first_collective_anchors_the_ranks(tmp_path, docs):
    """Each rank's trace clock shifted by a different amount: the anchor puts them back together."""
    for i, src in enumerate(_traces(SAMPLES / "two-gpu-overlap")):
        rewrite_trace(src, tmp_path / src.name, lambda d, i=i: _no_clock(d, 1000.0 + 777_000.0 * i))
    doc = report_json(str(tmp_path))
    cross = doc["cross_rank"]
    assert cross["alignment"]["method"] == "first matched collective's end"
    assert any("first matched collective" in n for n in cross["notes"])
    # the anchor is the first collective's end: as good as those ends agree (13.5 us on this sample)
    before = docs["overlap"]["cross_rank"]["waits"]["ranks"]
    for rank, r in cross["waits"]["ranks"].items():
        assert abs(r["wait_us"] - before[rank]["wait_us"]) < 0.1 * before[rank]["comm_us"]


def test_sequences_that_disagree_are_refused_and_said(tmp_path):
    def other_collective(doc):
        n = 0
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and "nccl" in e["name"].lower():
                n += 1
                if n % 3 == 0:
                    e["args"]["Collective name"] = "all_reduce"

    src0, src1 = _traces(SAMPLES / "two-gpu-overlap")
    rewrite_trace(src0, tmp_path / src0.name, lambda d: None)
    rewrite_trace(src1, tmp_path / src1.name, other_collective)
    cross = report_json(str(tmp_path))["cross_rank"]
    assert cross["waits"] is None
    assert any("not matched" in n and "do not line up" in n for n in cross["notes"])


def test_public_sampled_job_on_the_epoch_clock():
    """Two ranks of HTA's 128-rank job: ts in epoch microseconds, no baseTimeNanoseconds. The ranks'
    SendRecv sequences on their first stream are not one sequence (other peers among the 128), and
    are refused; what matched agrees with the independent computation."""
    folder = PUBLIC / "hta-sampled-job"
    cross = report_json(str(folder))["cross_rank"]
    assert cross["alignment"]["method"] == "ts on the epoch clock"
    assert any(n.startswith("stream #0") and "not matched" in n for n in cross["notes"])
    ref, collectives = waits(_traces(folder), CommRules().regex().pattern)
    got = cross["waits"]
    assert len(got["operations"]) == len(collectives)
    for rank, r in ref.items():
        mine = got["ranks"][str(rank)]
        assert abs(mine["wait_us"] - r["wait"]) <= 0.01 * r["comm"]


def test_ranks_that_cannot_be_aligned_say_why(tmp_path):
    """No clock on either rank and no collective in common: a note, never a silent null."""
    src0, src1 = _traces(SAMPLES / "two-gpu-overlap")

    def strip(doc, shift):
        _no_clock(doc, shift)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel" and "nccl" in e["name"].lower())]

    rewrite_trace(src0, tmp_path / src0.name, lambda d: strip(d, 0.0))
    rewrite_trace(src1, tmp_path / src1.name, lambda d: strip(d, 5000.0))
    cross = report_json(str(tmp_path))["cross_rank"]
    assert cross is not None
    assert cross["alignment"]["method"] is None
    assert "not aligned" in cross["alignment"]["note"]
    assert cross["summary"].startswith("ranks not set side by side")


def test_without_base_time_the_event_log_aligns_the_ranks(tmp_path, docs):
    """A bundle whose traces lost baseTimeNanoseconds (clocks shifted apart): the event logs'
    step_begin times (time.time_ns) paired with the traces' ProfilerStep ranges align them."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLES / "two-gpu-overlap", bundle)
    for i, trace in enumerate(_traces(bundle)):
        rewrite_trace(trace, trace, lambda d, i=i: _no_clock(d, 1000.0 + 777_000.0 * i))
    cross = report_json(str(bundle))["cross_rank"]
    assert cross["alignment"]["method"] == "event log time_ns"
    before = docs["overlap"]["cross_rank"]["waits"]["ranks"]
    for rank, r in cross["waits"]["ranks"].items():
        assert abs(r["wait_us"] - before[rank]["wait_us"]) <= 0.01 * before[rank]["comm_us"]


def _as_rank(doc, rank, world_size, late_us=0.0):
    """doc as `rank` of a `world_size` job; late_us: its NCCL kernels start that much later (ending
    where they did, as a late rank's do: the others wait for it), where they are long enough."""
    doc["distributedInfo"] = dict(doc["distributedInfo"], rank=rank, world_size=world_size)
    for e in doc["traceEvents"]:
        if late_us and e.get("cat") == "kernel" and "nccl" in e["name"].lower() and e["dur"] > 2 * late_us:
            e["ts"] += late_us
            e["dur"] -= late_us


def test_eight_ranks_with_one_late_rank_agree_with_the_independent_computation(tmp_path):
    """The two-GPU overlap ranks copied into an 8-rank job, rank 5 arriving 300 us late at its
    long collectives: the others wait for it, and each rank's waits agree with the plain computation."""
    src = _traces(SAMPLES / "two-gpu-overlap")
    paths = []
    for rank in range(8):
        path = tmp_path / f"rank{rank}.pt.trace.json.gz"
        rewrite_trace(src[rank % 2], path, lambda d, rank=rank: _as_rank(d, rank, 8, 300.0 if rank == 5 else 0.0))
        paths.append(path)
    cross = report_json(str(tmp_path))["cross_rank"]
    got = cross["waits"]["ranks"]
    ref, collectives = waits(paths, CommRules().regex().pattern)
    assert len(cross["waits"]["operations"]) == len(collectives) == 80
    for rank, r in ref.items():
        mine = got[str(rank)]
        assert abs(mine["wait_us"] - r["wait"]) <= 0.01 * r["comm"]
        for peer, us in r["waited_for"].items():
            assert abs(mine["waited_for_us"][str(peer)] - us) <= 0.01 * r["comm"]
    assert {r for r, v in got.items() if v["waited_for_us"]} == {str(r) for r in range(8)}
    assert sum(got["0"]["waited_for_us"].values()) == pytest.approx(got["0"]["wait_us"], abs=0.01)


def test_a_rank_whose_clock_is_off_is_refused_not_matched(tmp_path):
    """Rank 1's clock base 2 ms late: its kernels end 2 ms after everyone's, which no real collective
    does; its sequence is refused and a note says so (the clocks, not a straggler)."""
    src = _traces(SAMPLES / "two-gpu-overlap")
    for rank in range(2):

        def shifted(doc, rank=rank):
            if rank == 1:
                doc["baseTimeNanoseconds"] += 2_000_000

        rewrite_trace(src[rank], tmp_path / src[rank].name, shifted)
    cross = report_json(str(tmp_path))["cross_rank"]
    assert cross["waits"] is None
    assert any("rank 1's collectives not matched" in n for n in cross["notes"])


def test_perfetto_draws_every_rank_on_one_axis_with_its_waits(tmp_path, docs):
    from conftest import run_cli
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    out = tmp_path / "o.pftrace"
    assert run_cli("report", str(SAMPLES / "two-gpu-overlap"), "--perfetto", str(out)).returncode == 0
    trace = Trace.FromString(out.read_bytes())
    parent, names, process = {}, {}, {}
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            names[t.uuid] = t.process.process_name if t.HasField("process") else t.name
            parent[t.uuid] = t.parent_uuid if t.HasField("parent_uuid") else None
    for uuid in names:
        top = uuid
        while parent[top] is not None:
            top = parent[top]
        process[uuid] = names[top].split()[1]  # "rank N (file)"
    waited: dict[str, float] = {}
    first_comm: dict[str, float] = {}
    begin: dict[int, int] = {}
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            begin[ev.track_uuid] = p.timestamp
            if ev.name.startswith("ncclDevKernel"):
                rank = process[ev.track_uuid]
                first_comm[rank] = min(first_comm.get(rank, float("inf")), p.timestamp / 1000)
        elif names[ev.track_uuid].startswith("waiting for a peer rank"):
            rank = process[ev.track_uuid]
            waited[rank] = waited.get(rank, 0.0) + (p.timestamp - begin[ev.track_uuid]) / 1000
    cross = docs["overlap"]["cross_rank"]
    for rank, r in cross["waits"]["ranks"].items():
        assert waited[rank] == pytest.approx(r["wait_us"], abs=0.01 * len(cross["waits"]["operations"]))
    # the first collective's arrivals are as far apart in the picture as on the shared clock
    first = cross["waits"]["operations"][0]["ranks"]
    assert first_comm["1"] - first_comm["0"] == pytest.approx(first["1"]["arrival_us"] - first["0"]["arrival_us"], abs=0.01)


def test_the_ranks_picture_marks_each_ranks_waits_on_one_axis(tmp_path, docs):
    from conftest import run_cli

    from dbo_trace.render.pictures.ranks_view import ranks_step_view
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths

    report = analyze_paths([SAMPLES / "two-gpu-hostbound"], Options())
    doc = docs["hostbound"]
    for position in range(len(report.ranks[0].steps)):
        view = ranks_step_view(report, position)
        assert view.lanes == [
            "rank 0 CPU launches", "rank 0 compute", "rank 0 comm", "rank 1 CPU launches", "rank 1 compute", "rank 1 comm"
        ]  # fmt: skip
        for r in report.ranks:
            kernels = sum(1 for b in view.bars if b.lane.startswith(f"rank {r.rank} ") and b.kind != "launch")
            assert kernels == sum(1 for x in r.detailed().attribution.gpu_step if x == r.steps[position].index) > 0
            calls = sum(1 for b in view.bars if b.lane == f"rank {r.rank} CPU launches")
            assert calls == sum(1 for x in r.detailed().attribution.call_step if x == r.steps[position].index) > 0
            marked = sum(e - s for s, e, lane, _ in view.waits if lane == f"rank {r.rank} comm")
            by_step = doc["cross_rank"]["waits"]["ranks"][str(r.rank)]["by_step_us"].get(str(position), 0.0)
            assert marked == pytest.approx(by_step, abs=0.01)
        assert all(0 <= b.start <= b.end <= view.duration + 1e-6 for b in view.bars if b.kind != "launch")
    out = tmp_path / "ranks.png"
    proc = run_cli("report", str(SAMPLES / "two-gpu-hostbound"), "--timeline", str(out), "--all-ranks")
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "every rank" in proc.stderr
    lone = run_cli("report", str(SAMPLES / "two-gpu-hostbound"), "--all-ranks")
    assert lone.returncode == 2 and "--all-ranks draws every rank's step in --timeline" in lone.stderr


def _kernel(ts, **args):
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "pid": 0, "tid": 7, "ts": ts, "dur": 5.0, "args": args}


def test_the_reader_keeps_a_collectives_args_and_shrugs_off_odd_ones(tmp_path):
    from dbo_trace.trace import kineto

    events = [
        _kernel(1.0, stream=7, correlation=1, **{"Collective name": "all_reduce", "Process Group Name": "3"}),
        _kernel(2.0, stream=7, correlation=2, **{"In msg nelems": 1024, "Seq": 12, "Collective name": "all_reduce"}),
        _kernel(3.0, stream=7, correlation=3, **{"Collective name": 5, "In msg nelems": "many", "Seq": -4}),
        _kernel(4.0, stream=7, correlation=4),
    ]
    path = tmp_path / "t.json"
    write_trace({"traceEvents": events}, path)
    raw = kineto.read_kineto(path)
    e = raw.events
    assert [raw.names[i] if i >= 0 else None for i in e.collective] == ["all_reduce", "all_reduce", None, None]
    assert [raw.names[i] if i >= 0 else None for i in e.group] == ["3", None, None, None]
    assert e.nelems.tolist() == [-1, 1024, -1, -1] and e.seq.tolist() == [-1, 12, -1, -1]
    # a worker's chunk merged into the reading process's columns: the names re-interned
    first, second = kineto._Columns(), kineto._Columns()
    first.add(kineto._decode_events(json.dumps(events[3:]).encode()))
    second.add(kineto._decode_events(json.dumps(events[:3]).encode()))
    first.merge(second)
    merged, names = first.finish()
    assert [names[i] if i >= 0 else None for i in merged.collective] == [None, "all_reduce", "all_reduce", None]
    assert [names[i] if i >= 0 else None for i in merged.group] == [None, "3", None, None]


def _with_group_name(folder, name):
    """two-gpu-overlap in folder, rank 1's process group named name (rank 0's kept)."""

    def named(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and "Process Group Name" in e.get("args", {}):
                e["args"]["Process Group Name"] = name

    src0, src1 = _traces(SAMPLES / "two-gpu-overlap")
    rewrite_trace(src0, folder / src0.name, lambda d: None)
    rewrite_trace(src1, folder / src1.name, named)
    return folder


def test_a_process_group_name_from_the_trace_stays_inert(tmp_path):
    """A hostile group name (markup, an escape sequence) reaches the notes printable and escaped."""
    from conftest import run_cli

    proc = run_cli("report", str(_with_group_name(tmp_path, "[bold red]pg\x1b[31m")))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert "note: group [bold red]pg?[31m is on" in proc.stdout
    cross = report_json(str(tmp_path))["cross_rank"]
    assert any(n.startswith("group 0 is on rank 0 only") for n in cross["notes"])


def test_two_separate_runs_on_epoch_ts_are_refused(tmp_path):
    """Traces with epoch ts and no baseTimeNanoseconds are checked for being one run too."""
    src0, src1 = _traces(SAMPLES / "two-gpu-overlap")
    rewrite_trace(src0, tmp_path / src0.name, _to_epoch)

    def an_hour_later(doc):
        _to_epoch(doc)
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] += 3600e6

    rewrite_trace(src1, tmp_path / src1.name, an_hour_later)
    from conftest import run_cli

    proc = run_cli("report", str(tmp_path))
    assert proc.returncode == 2 and "not ranks of one run" in proc.stderr


def test_markdown_shows_the_cross_rank_notes_inert(tmp_path):
    from conftest import run_cli

    md = run_cli("report", str(_with_group_name(tmp_path, "<img src=x>[a](b)*c*")), "--markdown").stdout
    assert "- note: group \\<img src=x>\\[a\\](b)\\*c\\* is on rank 1 only" in md  # render/safe.py's escapes
    assert "<img" not in md.replace("\\<", "")  # only escaped


def test_the_rank_and_microbatch_that_held_the_others_back(docs):
    waits = docs["overlap"]["cross_rank"]["waits"]
    most = waits["held_back_most"]
    assert (most["rank"], most["ubatch"]) == (0, 1)
    by_ubatch = {g["ubatch"]: g for g in waits["ubatches"]}
    assert (
        most["caused_us"]
        == by_ubatch[1]["caused_us"]["0"]
        == max(us for g in waits["ubatches"] for us in g["caused_us"].values())
    )
    for rank, r in waits["ranks"].items():  # a rank's caused waits are its microbatches' together
        assert r["caused_us"] == pytest.approx(sum(g["caused_us"].get(rank, 0.0) for g in waits["ubatches"]), abs=0.01)
    line = [x for x in docs["overlap"]["cross_rank"]["lines"] if x.startswith("held the others back most")]
    assert line == ["held the others back most: rank 0's microbatch 1, last above the threshold at 9 of its 40 "
                    "collectives, the others waiting 12.45 ms for it there"]  # fmt: skip
