"""Sampled Python stacks (py-spy) aligned to the trace and splitting the host idle (docs/analysis.md,
"Host time by Python frame"; docs/bundle-format.md, "pystacks").

The recording test runs a real program (tests/helpers/pystacks_program.py) under torch.profiler (CPU
activity) while a real py-spy samples it; the program writes when each call of its known slow
function began and ended (time.time_ns()). Kernels cannot run on a CPU-only machine, so one
`cudaLaunchKernel` and its kernel are added to the trace where the program logged each "launch":
the host-idle stretches are then the gaps between those kernels, and each step's slow function
lies in the stretch that ends at that step's kernel.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import require_module

from dbo_trace.analysis.host import python_frames as P
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.trace import pystacks as R
from dbo_trace.trace.errors import InputError

HERE = Path(__file__).parent.parent
RATE = 100
PERIOD_US = 1e6 / RATE


def _py_spy() -> str | None:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    return found


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle: the program's CPU trace with a kernel per step, and py-spy's samples of it."""
    require_module("torch")
    spy = _py_spy()
    if spy is None:
        if os.environ.get("DBO_TRACE_REQUIRE_RECORD_DEPS"):  # CI installs it with the test extra
            pytest.fail("py-spy is not installed, but DBO_TRACE_REQUIRE_RECORD_DEPS is set (see .ci/run)")
        pytest.skip("py-spy is not installed (pip install py-spy)")
    out = tmp_path_factory.mktemp("pystacks")
    run = out / "run"
    run.mkdir()
    prog = subprocess.Popen([sys.executable, str(HERE / "helpers" / "pystacks_program.py"), str(run), "1.5", "16"])
    try:
        started = time.time_ns()
        samples = out / "samples.json"
        sampler = subprocess.run(
            [spy, "record", "--pid", str(prog.pid), "--subprocesses", "--nonblocking", "--idle", "--threads", "--rate", str(RATE),
             "--format", "chrometrace", "-o", str(samples)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        prog.wait(timeout=300)
    if sampler.returncode != 0 or not samples.exists():
        text = sampler.stdout + sampler.stderr
        if "ermission" in text or "ptrace" in text.lower() or "root" in text.lower():
            pytest.skip(f"py-spy may not sample here (ptrace not permitted): {text.strip()[-200:]}")
        pytest.fail(f"py-spy failed: {text[-500:]}")
    assert prog.returncode == 0
    trace = json.loads((run / "trace.json").read_text())
    truth = json.loads((run / "truth.json").read_text())
    base = trace["baseTimeNanoseconds"]
    for i, step in enumerate(truth["steps"]):
        ts = (step["launch"] - base) / 1000
        trace["traceEvents"] += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": truth["pid"], "tid": truth["native"],
             "ts": ts, "dur": 5, "args": {"correlation": 1000 + i}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts + 20, "dur": 100,
             "args": {"correlation": 1000 + i, "stream": 7, "device": 0}},
        ]  # fmt: skip
    bundle = out / "bundle"
    (bundle / "traces").mkdir(parents=True)
    (bundle / "pystacks").mkdir()
    (bundle / "traces" / "trace.json").write_text(json.dumps(trace))
    shutil.copy(samples, bundle / "pystacks" / "main.json")
    (bundle / "truth.json").write_text(json.dumps(truth))
    manifest = {
        "format": "dbo-trace-bundle", "version": 1,
        "pystacks": [{"path": "pystacks/main.json", "role": "main", "pid": prog.pid, "rate_hz": RATE,
                      "started_unix_ns": started, "stopped_unix_ns": time.time_ns(), "exit_status": 0, "note": None}],
    }  # fmt: skip
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def _slow_spans(samples: R.StackSamples, offset_us: float) -> tuple[np.ndarray, np.ndarray]:
    """Where the samples show slow_function innermost-or-below, on the trace clock (plain reading
    of the tree)."""
    marked = np.array([f == "slow_function" for f, _, _ in samples.frames], bool)
    lo, hi = P._spans_with(samples, P._marked_nodes(samples, marked))
    return lo + offset_us, hi + offset_us


def test_the_clock_agrees_with_the_program(recording: Path) -> None:
    report = analyze_paths([recording], Options())
    rank = report.ranks[0]
    assert rank.host_stacks is not None, rank.notes
    clock = rank.host_stacks.window.clock
    assert clock.method == "profiler start, anchors" and clock.anchors == "step", clock
    assert clock.startup_us is not None and -P.SEARCH_EARLY_US <= clock.startup_us <= P.SEARCH_LATE_US
    truth = json.loads((recording / "truth.json").read_text())
    base = rank.detailed().timeline.base_time_ns
    assert base is not None
    samples = R.read_pystacks(recording / "pystacks" / "main.json")
    lo, hi = _slow_spans(samples, clock.offset_us)
    true_lo = np.array([s["slow"][0] for s in truth["steps"]]) / 1000 - base / 1000
    true_hi = np.array([s["slow"][1] for s in truth["steps"]]) / 1000 - base / 1000
    # Each sampled span's edges against the call it overlaps most: late by 0 .. one period, a
    # quarter period at the lower quartile, once aligned (the truth was not used to align: the `step`
    # anchors were). This machine is shared, so py-spy's samples jitter by several ms: within a period.
    late = []
    for a, b in zip(lo, hi):
        over = np.minimum(b, true_hi) - np.maximum(a, true_lo)
        j = int(np.argmax(over))
        if over[j] > 0:
            late += [a - true_lo[j], b - true_hi[j]]
    assert len(late) >= 10
    assert abs(float(np.percentile(late, 25)) - PERIOD_US / 4) <= PERIOD_US, (np.percentile(late, [10, 25, 50]), clock)


def test_the_slow_function_is_found_in_its_idle_stretch(recording: Path) -> None:
    report = analyze_paths([recording], Options())
    rank = report.ranks[0]
    assert rank.host_stacks is not None
    window = rank.host_stacks.window
    untraced = [r for r in window.rows if r.cause == "untraced"]
    assert untraced[0].project == "pystacks_program:slow_function", window.rows[:3]
    truth = json.loads((recording / "truth.json").read_text())
    base = rank.detailed().timeline.base_time_ns
    assert base is not None
    slow_us = sum((s["slow"][1] - s["slow"][0]) / 1000 for s in truth["steps"])
    # The slow function's time, as the samples saw it, is most of the time it ran.
    assert 0.6 * slow_us <= untraced[0].us <= 1.2 * slow_us, (untraced[0].us, slow_us)
    # Each step's slow call lies in the idle stretch that its own kernel ends: the stacks' pieces
    # named after it, per stretch, cover most of that call.
    d = rank.detailed()
    samples = R.read_pystacks(recording / "pystacks" / "main.json")
    frames = P.node_frames(samples)
    cut = P.stack_pieces(
        d.host_pieces, samples, frames, window.clock,
        P.thread_of_lane(samples, d.timeline.pid, np.unique(d.host_pieces.lane)),
    )  # fmt: skip
    slow = np.array([samples.frames[f][0] == "slow_function" if f >= 0 else False for f in cut.project.tolist()])
    kernel_start = np.sort(d.timeline.gpu.start)
    found = 0
    spills: list[float] = []
    cover: list[float] = []
    for i, step in enumerate(truth["steps"]):
        a, b = step["slow"][0] / 1000 - base / 1000, step["slow"][1] / 1000 - base / 1000
        stretch_lo = kernel_start[i - 1] + 100 if i else -np.inf
        stretch_hi = kernel_start[i]
        inside = slow & (cut.hi > stretch_lo) & (cut.lo < stretch_hi)
        named = float(np.clip(np.minimum(cut.hi[inside], b) - np.maximum(cut.lo[inside], a), 0, None).sum())
        found += named >= 0.5 * (b - a)
        cover.append(round(named / (b - a), 2))
        # Nothing of it spills past this stretch's kernel into the next stretch (until the next
        # call): the program waits GAP_S (60 ms) between the call's end and the launch, more than
        # the samples' lateness.
        steps = truth["steps"]
        until = steps[i + 1]["slow"][0] / 1000 - base / 1000 if i + 1 < len(steps) else stretch_hi + (b - a)
        after = slow & (cut.hi > stretch_hi) & (cut.lo < until)
        spills.append(float((np.minimum(cut.hi[after], until) - np.maximum(cut.lo[after], stretch_hi)).sum()))
    assert found >= 0.8 * len(truth["steps"]), (found, cover, window.clock)
    slow_us = sum((s["slow"][1] - s["slow"][0]) / 1000 for s in truth["steps"])
    assert sum(spills) <= 0.05 * slow_us, (spills, window.clock)


def test_outputs_show_it(recording: Path) -> None:
    from dbo_trace.render import RENDERERS, RenderOptions

    report = analyze_paths([recording], Options())
    text = RENDERERS["terminal"].render(report, RenderOptions(width=120, host_stacks=True))
    assert "host idle by Python frame" in text and "pystacks_program:slow_function" in text
    doc = json.loads(RENDERERS["json"].render(report, RenderOptions()))
    rows = doc["ranks"][0]["host_stacks"]["window"]["rows"]
    assert rows and {"cause", "project", "library", "inner", "us", "share"} <= set(rows[0])
    md = RENDERERS["markdown"].render(report, RenderOptions())
    assert "`pystacks_program:slow_function`" in md


# ---- reading: a plain file, and bad ones -------------------------------------------------------------


def _event(ph: str, name: str, ts: int, tid: int = 7, filename: str = "/app/x.py", line: int = 1) -> dict:
    return {"args": {"filename": filename, "line": line}, "cat": "py-spy", "name": name, "ph": ph, "pid": 1, "tid": tid, "ts": ts}


def test_reads_the_stack_tree(tmp_path: Path) -> None:
    events = [
        _event("B", 'process 1:"python x.py"', 0, filename=""), _event("B", "thread (4242): MainThread", 0, filename=""),
        _event("B", "main", 0), _event("B", "_find_and_load", 10, filename="<frozen importlib._bootstrap>"),
        _event("E", "_find_and_load", 30, filename="<frozen importlib._bootstrap>"), _event("E", "main", 40),
        _event("E", "thread (4242): MainThread", 40, filename=""), _event("E", 'process 1:"python x.py"', 40, filename=""),
    ]  # fmt: skip
    path = tmp_path / "s.json"
    path.write_text(json.dumps(events))
    s = R.read_pystacks(path)
    assert s.native == {0: 4242} and s.thread_names == {0: "MainThread"}
    assert s.seg_start.tolist() == [0, 10, 30] and s.seg_end.tolist() == [10, 30, 40]
    f = P.node_frames(s)
    labels = [P.frame_label(*s.frames[i][:2]) if i >= 0 else None for i in f.project[s.seg_node].tolist()]
    entry = [P.frame_label(*s.frames[i][:2]) if i >= 0 else None for i in f.entry[s.seg_node].tolist()]
    assert labels == ["x:main"] * 3
    assert entry == [None, "importlib._bootstrap:_find_and_load", None]
    # gzip reads the same
    gz = tmp_path / "s.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert R.read_pystacks(gz).seg_end.tolist() == s.seg_end.tolist()


def test_frame_kinds() -> None:
    assert P.frame_kind("f", "/usr/lib/python3.11/importlib/__init__.py") == P.LIBRARY
    assert P.frame_kind("f", "/v/lib/python3.12/site-packages/torch/nn/modules/module.py") == P.LIBRARY
    assert P.frame_kind("f", "/v/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py") == P.PROJECT
    assert P.frame_kind("f", "/carry/afd_plugin/v1/worker/ubatch_wrapper.py") == P.PROJECT
    assert P.frame_kind("f", "/v/lib/python3.12/site-packages/dbo_trace/record/hooks.py") == P.LIBRARY
    assert P.frame_kind("f", "/home/me/train.py") == P.PROJECT
    assert P.frame_kind("thread (1): x", "") == P.META
    assert P.module_of("/v/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py") == "vllm.v1.worker.gpu_model_runner"


def _refused(path: Path) -> str:
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(InputError) as err:
            R.read_pystacks(path)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.monotonic() - t0 < 120  # a bound no load reaches (refused in under a second); memory is the guard
    assert peak < 256 << 20, peak
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_bad_files_are_one_line(tmp_path: Path) -> None:
    cases = {
        "empty.json": b"",
        "object.json": b'{"traceEvents": []}',
        "types.json": json.dumps([{"ph": "B", "pid": "x", "tid": 1, "ts": 0, "name": "f"}]).encode(),
        "unbalanced.json": json.dumps([_event("E", "f", 0)]).encode(),
        "backwards.json": json.dumps([_event("B", "f", 10), _event("E", "f", 5)]).encode(),
        "notjson.json": b"[{" + b"x" * 100,
    }
    for name, body in cases.items():
        path = tmp_path / name
        path.write_bytes(body)
        _refused(path)
    deep = [_event("B", f"f{i}", 0) for i in range(R.MAX_DEPTH + 1)]
    (tmp_path / "deep.json").write_text(json.dumps(deep))
    assert "deeper" in _refused(tmp_path / "deep.json")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "regular file" in _refused(fifo)


def test_huge_and_cut_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file over the bound is refused before reading; so is one inflating past it.
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(R.MAX_FILE_BYTES + 1)
    assert "GiB" in _refused(big)
    monkeypatch.setattr(R, "MAX_FILE_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b"[" + b" " * (4 << 20) + b"]"))
    assert "inflate" in _refused(bomb)
    # An event with a huge string is refused, bounded.
    monkeypatch.setattr(R, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(R, "MAX_EVENT_BYTES", 1 << 20)
    huge = tmp_path / "huge.json"
    huge.write_bytes(b'[{"args":{"filename":"' + b"a" * (8 << 20) + b'"}}]')
    assert "over" in _refused(huge)
    # Cut short: the whole events before the cut are kept, with a warning.
    events = [_event("B", "main", 0), _event("B", "g", 10), _event("E", "g", 20), _event("E", "main", 30)]
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(events)[:-40])
    s = R.read_pystacks(cut)
    assert s.warnings and "end early" in s.warnings[0]
    assert s.seg_start.tolist() == [0, 10] and s.seg_end.tolist() == [10, 20]


def test_many_events_in_bounded_memory(tmp_path: Path) -> None:
    """200,000 events of two alternating stacks: a few MB of arrays, read in seconds."""
    path = tmp_path / "many.json"
    with open(path, "w") as f:
        f.write("[")
        f.write(",".join(json.dumps(_event("B" if i % 2 == 0 else "E", "f", i)) for i in range(200_000)))
        f.write("]")
    tracemalloc.start()
    t0 = time.monotonic()
    s = R.read_pystacks(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(s.node_parent) == 2 and len(s.seg_start) == 100_000
    assert time.monotonic() - t0 < 300 and peak < 200 << 20  # seconds here; the memory is the guard


def test_manifest_entries(tmp_path: Path) -> None:
    (tmp_path / "pystacks").mkdir()
    (tmp_path / "pystacks" / "a.json").write_text("[]")
    manifest = {"pystacks": [
        {"path": "pystacks/a.json", "role": "attention", "pid": 5, "rate_hz": 100, "started_unix_ns": 7},
        {"path": "../../etc/passwd"}, {"path": None, "note": "py-spy not permitted"}, "junk",
        {"path": "pystacks/missing.json"},
    ]}  # fmt: skip
    from dbo_trace.bundle import manifest_of, sample_entries

    entries, warnings = sample_entries(tmp_path, manifest_of({"version": 1, **manifest}))
    assert [(e.role, e.pid, e.rate_hz, e.started_unix_ns) for e in entries] == [("attention", 5, 100.0, 7)]
    assert len(warnings) == 4 and any("not permitted" in w for w in warnings)


def test_h200_recording(tmp_path: Path) -> None:
    """A real torch profiler trace (CPU and CUDA, an H200) and py-spy's samples of the same process
    (tests/data/h200-pystacks): `sleepy_host`, 5 ms of busy Python inside a `sleepy_host` range each
    step, is found where the trace records it."""
    data = HERE / "data" / "h200-pystacks"
    meta = json.loads((data / "aligned-meta.json").read_text())
    (tmp_path / "traces").mkdir()
    (tmp_path / "pystacks").mkdir()
    shutil.copy(data / "aligned-trace.json.gz", tmp_path / "traces" / "trace.json.gz")
    shutil.copy(data / "aligned-pyspy.json", tmp_path / "pystacks" / "main.json")
    entry = {"path": "pystacks/main.json", "pid": meta["pid"], "rate_hz": 100, "started_unix_ns": meta["started_unix_ns"]}
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "dbo-trace-bundle", "version": 1, "pystacks": [entry]}))
    rank = analyze_paths([tmp_path], Options()).ranks[0]
    assert rank.host_stacks is not None, rank.notes
    window = rank.host_stacks.window
    clock = window.clock
    assert clock.method == "profiler start, anchors" and clock.anchors == "sleepy_host"
    # py-spy's clock starts after started_unix_ns (it was spawned then): within the accuracy, not before
    assert clock.startup_us is not None and clock.accuracy_us is not None
    assert -3 * clock.accuracy_us <= clock.startup_us <= 200_000
    # The host idle inside the trace's sleepy_host ranges, from the host-idle pieces.
    d = rank.detailed()
    tl = d.timeline
    sel = np.array([tl.names[i] == "sleepy_host" for i in tl.cpu.name.tolist()])
    lo, hi = tl.cpu.start[sel], tl.cpu.end[sel]
    p = d.host_pieces
    inside = sum(float(np.clip(np.minimum(p.hi, b) - np.maximum(p.lo, a), 0, None).sum()) for a, b in zip(lo, hi))
    found = sum(r.us for r in window.rows if (r.project or "").endswith(":sleepy_host"))
    # Samples at 100 Hz of 5 ms calls: most of the ranges' host idle carries the function's frame.
    assert inside > 0 and 0.5 * inside <= found <= 1.5 * inside, (found, inside, window.rows[:5])
    assert window.rows[0].project == "pyspy_overhead:sleepy_host"


def test_frames_agree_with_a_plain_reading() -> None:
    """samples/afd-graphs-dbo (the AFD plugin on an H200, py-spy beside the profiler): the time of
    every (cause, innermost project function) over the host-idle pieces, against
    tests/references/pystacks_reference.py (json.load and the docs' rules), within 0.1% of the host idle."""
    from conftest import SAMPLES
    from pystacks_reference import natives_of, project_time

    bundle = SAMPLES / "afd-graphs-dbo"
    rank = analyze_paths([bundle], Options()).ranks[0]
    assert rank.host_stacks is not None
    d = rank.detailed()
    clock = rank.host_stacks.window.clock
    entry = json.loads((bundle / "manifest.json").read_text())["pystacks"][0]
    path = bundle / entry["path"]
    p = d.host_pieces
    from dbo_trace.analysis.host.host_time import CAUSES

    pieces = list(zip(p.lo.tolist(), p.hi.tolist(), [CAUSES[c] for c in p.cause.tolist()], p.lane.tolist()))
    want = project_time(path, d.timeline.pid, clock.offset_us, pieces, natives_of(bundle))
    samples = R.read_pystacks(path)
    lanes = P.thread_of_lane(samples, d.timeline.pid, np.unique(p.lane), P.log_natives([], [g.header for g in _logs(bundle)]))
    cut = P.stack_pieces(p, samples, P.node_frames(samples), clock, lanes)
    got: dict[tuple[str, str | None], float] = {}
    for lo, hi, cause, project in zip(cut.lo.tolist(), cut.hi.tolist(), cut.cause.tolist(), cut.project.tolist()):
        key = (CAUSES[cause], samples.frames[project][0] if project >= 0 else None)
        got[key] = got.get(key, 0.0) + hi - lo
    tolerance = 0.001 * rank.host_stacks.window.host_idle_us
    assert want and set(want) == set(got)
    assert all(abs(want[k] - got[k]) <= tolerance for k in want), sorted(want.items(), key=lambda x: -x[1])[:5]
    assert abs(sum(want.values()) - rank.host_stacks.window.sampled_us) <= tolerance


def _logs(bundle: Path) -> list:
    from dbo_trace.trace.eventlog import read_event_log

    return [read_event_log(p) for p in sorted((bundle / "events").glob("*.jsonl"))]


def test_perfetto_has_the_sampled_stacks(tmp_path: Path) -> None:
    from conftest import SAMPLES

    from dbo_trace.render import RENDERERS, RenderOptions

    report = analyze_paths([SAMPLES / "afd-graphs-dbo"], Options())
    stacks = report.ranks[0].host_stacks
    assert stacks is not None and stacks.tracks
    track = stacks.tracks[0]
    assert len(track.lo) == len(track.names) and (track.hi > track.lo).all() and (track.lo[1:] >= track.hi[:-1]).all()
    data = RENDERERS["perfetto"].render(report, RenderOptions())
    assert isinstance(data, bytes) and b"Python stacks (py-spy)" in data and track.names[0].encode() in data


def test_each_steps_frame_is_its_most_sampled_one() -> None:
    """Per step, the project frame holding most of its sampled host idle (grouped sums, one sort),
    against a plain loop over the same pieces, on the AFD recording."""
    from conftest import SAMPLES

    from dbo_trace.analysis.host.python_frames import frame_label, node_frames, stack_pieces, step_frames, thread_of_lane

    bundle = SAMPLES / "afd-graphs-dbo"
    report = analyze_paths([bundle], Options())
    rank = report.ranks[0]
    assert rank.host_stacks is not None
    d = rank.detailed()
    (samples_file,) = [p for p in (bundle / "pystacks").glob("attention.json")]
    s = R.read_pystacks(samples_file)
    clock = rank.host_stacks.window.clock
    lanes = np.unique(np.r_[d.timeline.calls.lane, d.timeline.cpu.lane, d.host_pieces.lane]).astype(np.int64)
    cut = stack_pieces(d.host_pieces, s, node_frames(s), clock, thread_of_lane(s, d.timeline.pid, lanes, {}))
    lo = np.array([st.start_us for st in rank.steps])
    hi = np.array([st.end_us for st in rank.steps])
    labels = [frame_label(f, p) for f, p, _ in s.frames]
    for k, frame in enumerate(step_frames(cut, s, lo, hi)):
        totals: dict[int, float] = {}
        for a, b, proj in zip(cut.lo.tolist(), cut.hi.tolist(), cut.project.tolist()):
            t = min(b, hi[k]) - max(a, lo[k])
            if t > 0:
                totals[proj] = totals.get(proj, 0.0) + t
        best = max(totals, key=lambda p: (totals[p], -p))
        assert frame.project == (labels[best] if best >= 0 else None)
        assert frame.us == pytest.approx(totals[best]) and frame.sampled_us == pytest.approx(sum(totals.values()))
        assert rank.steps[k].host_frame == frame  # and the report carries it on the step


def test_host_stacks_without_samples_says_so():
    """--host-stacks on a recording without py-spy samples: the report as without it, and one line on
    stderr saying there is no table to print (it printed nothing at all)."""
    from conftest import SAMPLES, run_cli

    plain = run_cli("report", str(SAMPLES / "overlap"))
    asked = run_cli("report", "--host-stacks", str(SAMPLES / "overlap"))
    assert asked.returncode == 0 and asked.stdout == plain.stdout
    assert "--host-stacks: no rank has sampled Python stacks" in asked.stderr
    assert "--host-stacks" not in run_cli("report", "--host-stacks", str(SAMPLES / "afd-eager")).stderr
