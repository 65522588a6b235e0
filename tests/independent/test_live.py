"""The live view's arithmetic on real counters (samples/recorded-overlap: 19 eager microbatched steps
of 4 layers, and samples/vllm-graphs-decode: vLLM 0.26's engine core with graph replays)."""

import json

from conftest import SAMPLES

from dbo_trace import bundle as fmt
from dbo_trace.analysis.live import live_row


def counters(sample):
    found = fmt.read_counters(SAMPLES / sample)
    return [body for _, body, _ in found]


def test_a_dbo_run_is_all_microbatched_with_eight_yields_per_layer():
    (body,) = counters("recorded-overlap")
    row = live_row(body)
    assert row.steps == 19 and row.microbatched_share == 1.0
    assert row.yields_per_step == 8 * 4
    earlier = json.loads(json.dumps(body))
    earlier["counters"]["steps.eager_microbatched"] = 9
    assert live_row(body, earlier, interval_s=2.0).steps_per_s == 5.0


def test_a_graph_run_counts_replays_per_mode_in_the_engine_core():
    rows = [live_row(b) for b in counters("vllm-graphs-decode")]
    engine = [r for r in rows if r.graph_replays]
    assert len(engine) == 1
    (body,) = [b for b in counters("vllm-graphs-decode") if live_row(b).graph_replays]
    want = {}
    for key, value in body["counters"].items():
        if key.startswith("graph_replay/"):
            mode = key.split("/")[1]
            want[mode] = want.get(mode, 0) + value
    assert engine[0].graph_replays == want and engine[0].steps == 0  # no DBO: no UBatchWrapper steps


def test_top_reads_hostile_counters_files_in_bounded_time(tmp_path):
    """A counters folder is written by whatever runs there: a symlink to /dev/zero, a FIFO, a list,
    numbers out of range, deep nesting and markup or control sequences in names are read in
    bounded time and memory (regular files of at most a few MB, opened without blocking), skipped
    or shown inert; the real process beside them is still shown."""
    import os
    import re
    import subprocess
    import sys

    (real,) = (SAMPLES / "recorded-overlap" / "events").glob("*.counters.json")
    body = json.loads(real.read_text())
    (tmp_path / "a-1.counters.json").write_text(json.dumps(body))
    os.symlink("/dev/zero", tmp_path / "b-2.counters.json")
    os.mkfifo(tmp_path / "c-3.counters.json")
    (tmp_path / "d-4.counters.json").write_text("[1, 2]")
    (tmp_path / "e-5.counters.json").write_text(json.dumps({**body, "pid": 5, "counters": "many"}))
    infinite = json.dumps({**body, "pid": 6}).replace('"steps.eager_microbatched": 19', '"steps.eager_microbatched": 1e400')
    (tmp_path / "f-6.counters.json").write_text(infinite)
    (tmp_path / "g-7.counters.json").write_text('{"format": "dbo-trace-counters", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    hostile = {**body, "pid": "[/x]", "counters": {"steps.[/x][link=http://e/]a\x1b]52;c;eA==\x07": 3, "steps.ok": 2}}
    (tmp_path / "h-8.counters.json").write_text(json.dumps(hostile))
    proc = subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "top", "--once", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", proc.stdout)
    text = " ".join(proc.stdout.split())  # the table may wrap a cell
    assert "573" in text and "eager_microbatched 19" in text  # the real process
    assert "[/x][link=http://e/]a\\x1b]52;c;eA==" in text  # shown as written (the cell may be cut), inert


def test_the_live_table_fits_the_terminal_and_keeps_each_figure_whole():
    """Before: the table was drawn at least 140 columns wide (125 on an 80-column terminal). Now it is
    laid out as every terminal table is: at 80 columns no line is longer, and the figures that stay
    are whole; a wide terminal shows every column."""
    from dbo_trace.render.live import HEADER, live_cells, live_table

    rows = [live_row(b) for b in counters("vllm-graphs-decode") + counters("recorded-overlap")]
    for width in (80, 100, 200):
        lines = live_table(rows, "dbo-trace top samples/x", width).plain.splitlines()
        assert max(len(line) for line in lines) <= width, width
        shown = "\n".join(lines)
        for r in rows:
            assert str(r.pid) in shown and f"  {r.steps}  " in shown.replace("\n", " ")
    wide = live_table(rows, "t", 200).plain
    assert all(h in wide for h in HEADER) and all(c in wide for r in rows for c in live_cells(r))


def test_an_afd_graph_run_shows_its_microbatched_replays_and_per_step_figures_over_the_steps_that_yield():
    """samples/afd-graphs-dbo: UBatchWrapper replays its own full graph (423 steps on the graph_replay
    path), so no CUDAGraphWrapper counter holds them; a replay runs no Python, so it neither yields
    nor waits: yields and waits are per eager or capturing step."""
    from dbo_trace.render.live import HEADER, live_cells

    path = next((SAMPLES / "afd-graphs-dbo" / "events").glob("*-1067.counters.json"))
    raw = json.loads(path.read_text())["counters"]  # the file itself, read here with json alone
    (row,) = [live_row(b) for b in counters("afd-graphs-dbo") if b["pid"] == 1067]
    replays = raw["steps.graph_replay"]
    yielding = raw["steps.eager_microbatched"] + raw["steps.graph_capture"]
    cells = dict(zip(HEADER, live_cells(row)))
    assert cells["graph replays"] == f"microbatched {replays} (captures 3)" and replays == 423
    assert row.yields_per_step == raw["ubatch.yields"] / yielding == 54.0
    assert row.wait_ms_per_step == {u: raw[f"ubatch.{u}.wait_us"] / 1000 / yielding for u in (0, 1)}


def test_top_waits_per_step_are_the_event_logs_waits_over_the_steps_that_ran_the_threads():
    """Against the raw event log of samples/afd-graphs-dbo (not the counters): each microbatch's
    wait (ub_wait to ub_run, yield to resume, per thread) summed, over the steps whose threads ran
    (eager and capturing: 32 of 461; a replay runs no Python). ub1's 921 ms a step is a mean over
    those 32 steps, and their mean time (the steps' begin to end in the log) is longer: the first
    step (compile) waited 26 s of its 26.5 s. The cell says what the mean is over."""
    from dbo_trace.render.live import HEADER, live_cells

    (log,) = (SAMPLES / "afd-graphs-dbo" / "events").glob("*-1067.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    waiting, waited = {}, {0: 0, 1: 0}
    begun, step_ns, paths = {}, {}, {}
    for t, kind, tid, _, ub, step, detail in events:
        if kind in ("ub_wait", "yield"):
            waiting[tid] = t
        elif kind in ("ub_run", "resume"):
            waited[ub] += t - waiting.pop(tid)
        elif kind == "step_begin":
            begun[step], paths[step] = t, detail["path"]
        elif kind == "step_end":
            step_ns[step] = t - begun[step]
    ran = [s for s, p in paths.items() if p in ("eager_microbatched", "graph_capture")]
    assert len(ran) == 32 and len(paths) == 461
    (row,) = [live_row(b) for b in counters("afd-graphs-dbo") if b["pid"] == 1067]
    assert row.yielding_steps == len(ran)
    for ub in (0, 1):
        # the counters take a monotonic clock, the log time_ns, each read a few us apart: 0.2%
        assert abs(row.wait_ms_per_step[ub] / (waited[ub] / 1e6 / len(ran)) - 1) < 0.002
    mean_step_ms = sum(step_ns[s] for s in ran) / 1e6 / len(ran)
    assert max(row.wait_ms_per_step.values()) < mean_step_ms  # 921 < 1032: each wait is part of its step
    assert row.yielding_step_ms is None  # recorded before step_us: the cell cannot say the step time
    # the basis beside the waits (issue 61: "ub1 921.28 ms, 32 steps" read as impossible beside 10 ms steps)
    assert dict(zip(HEADER, live_cells(row)))["wait/step per ubatch"] == (
        "ub0 93.84, ub1 921.28 ms a step, over its 32 eager or capturing steps (their time not in these counters; "
        "a replay runs no thread)"
    )


def test_counters_hold_the_time_in_steps_so_each_wait_is_shown_against_its_steps(tmp_path):
    """The plugin's hooks (record/hooks.py) count the time in each path's steps (step_us.<path>):
    a microbatch's wait happens inside its step, so its mean is never above the steps' mean time."""
    import time

    from dbo_trace.record.events import EventLog
    from dbo_trace.record.hooks import Instrumentation
    from dbo_trace.render.live import HEADER, live_cells

    ins = Instrumentation(EventLog(tmp_path))
    for _ in range(3):
        ins.step_begin("eager_microbatched", [4, 4])
        ins.ub_wait(1)
        time.sleep(0.01)
        ins.ub_run(1)
        ins.cpu_yield(1)
        time.sleep(0.005)
        ins.cpu_resume(1)
        time.sleep(0.005)
        ins.step_end()
    body = {"pid": 1, "counters": dict(ins.counters)}
    row = live_row(body)
    assert body["counters"]["step_us.eager_microbatched"] >= 3 * 20_000
    assert row.yielding_steps == 3 and row.yielding_step_ms is not None
    assert 15 <= row.wait_ms_per_step[1] <= row.yielding_step_ms
    cell = dict(zip(HEADER, live_cells(row)))["wait/step per ubatch"]
    wait, step = row.wait_ms_per_step[1], row.yielding_step_ms
    assert cell == f"ub1 {wait:.2f} of {step:.2f} ms a step, over its 3 eager or capturing steps"
