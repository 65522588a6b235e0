"""`dbo-trace record --repeats`: timed unprofiled repeats, with the built-in streamed load or `vllm
bench serve`, and py-spy over the profiled load; against stand-ins on 127.0.0.1.

The built-in repeat's figures are checked against tests/references/repeats_reference.py (written from the
definitions in bench.py's docstring, not from loadgen.py): exactly, where the chunks' times are
given, and within a few ms end to end, where tests/helpers/fake_server.py streams at known delays.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, sample_trace
from repeats_reference import fake_server_requests, reference_repeat
from test_record import Server, _stop_all, alive, free_port, manifest_of, record, record_argv

from dbo_trace.record import loadgen
from dbo_trace.record.bench import KEPT, RepeatPlan, bench_command
from dbo_trace.record.loadgen import LoadSpec

FIGURES = [f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p99")]


def test_the_builtin_repeats_summary_matches_the_reference_exactly(monkeypatch):
    """run_streaming_load's arithmetic, with each request's chunk times given (no network, no clock):
    uneven times, one request of one token (no TPOT), so every statistic differs from the others."""
    requests = [
        {"chunk_times_s": [0.120, 0.150, 0.210, 0.215, 0.300], "tokens": 5},
        {"chunk_times_s": [0.080, 0.081, 0.140], "tokens": 3},
        {"chunk_times_s": [0.333], "tokens": 1},
        {"chunk_times_s": [0.050, 0.090, 0.095, 0.400, 0.410, 0.470, 0.480], "tokens": 7},
    ]
    todo = iter(requests)

    def fake_stream(base_url, body, timeout_s):
        req = next(todo)
        times = req["chunk_times_s"]
        return times[0], times[-1], [b - a for a, b in zip(times, times[1:])], req["tokens"]

    monkeypatch.setattr(loadgen, "_stream_one", fake_stream)
    clock = iter([100.0, 102.5])  # the repeat's start and end on perf_counter
    monkeypatch.setattr(loadgen.time, "perf_counter", lambda: next(clock))
    got = loadgen.run_streaming_load("http://127.0.0.1:1", "m", LoadSpec(num_prompts=4, concurrency=1, input_len=2, output_len=8))
    ref = reference_repeat(requests, 2.5)
    assert got["duration_s"] == 2.5 and got["completed"] == 4 and got["failed"] == 0
    assert got["total_output_tokens"] == ref["total_output_tokens"] == 16
    assert got["output_throughput"] == pytest.approx(ref["output_throughput"], abs=1e-3)
    assert got["request_throughput"] == pytest.approx(ref["request_throughput"], abs=1e-3)
    for key in FIGURES:
        assert got[key] == pytest.approx(ref[key], abs=1e-3), key
    assert len({got[k] for k in FIGURES if k.endswith("_itl_ms")}) == 3  # mean, median, p99 all differ


def test_builtin_repeats_measure_a_stream_at_known_delays(tmp_path):
    """End to end: the stand-in streams each request's tokens at delays it documents (TTFT alternating
    80 and 160 ms, gaps of 30, 60 and 90 ms, one empty-text chunk, 300 ms before [DONE]); the
    manifest's repeats agree with the reference over those delays within a loaded machine's jitter."""
    first, gap, done = 0.08, 0.03, 0.3
    n, tokens = 4, 6
    server = Server(tmp_path, extra=("--stream-delays", f"{first},{gap},{done}", "--no-plugins"))
    out = tmp_path / "bundle"
    proc = record(out, server, "--repeats", "2", "--num-prompts", str(n), "--concurrency", "1",
                  "--output-len", str(tokens), "--input-len", "4", "--warmup-prompts", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["repeats_note"] is None and [r["index"] for r in m["repeats"]] == [0, 1]
    # The server numbers its streamed requests across repeats: repeat r saw requests r*n+1 .. r*n+n.
    everything = fake_server_requests(2 * n, tokens, first, gap)
    for r, rep in enumerate(m["repeats"]):
        reqs = everything[r * n : (r + 1) * n]
        expected_duration = sum(q["chunk_times_s"][-1] + done for q in reqs)  # one at a time, [DONE] included
        ref = reference_repeat(reqs, expected_duration)
        assert rep["tool"] == "builtin" and rep["completed"] == n and rep["failed"] == 0
        assert rep["total_output_tokens"] == n * tokens  # the empty-text chunk counts, as in vLLM's benchmark
        assert rep["duration_s"] == pytest.approx(expected_duration, rel=0.25)
        assert rep["output_throughput"] == pytest.approx(ref["output_throughput"], rel=0.25)
        for key in FIGURES:
            # A loaded machine oversleeps each of a request's sleeps by a few ms: the latency sums six of them.
            tolerance = 60.0 if "e2el" in key else 40.0 if key.startswith(("p99", "mean")) else 15.0
            assert rep[key] == pytest.approx(ref[key], abs=tolerance), (key, rep[key], ref[key])
        # The latency ends at the last chunk, not at [DONE] 300 ms later.
        assert rep["median_e2el_ms"] < ref["median_e2el_ms"] + done * 1000 / 2
    assert server.stats()["streamed"] == 2 * n


def _fake_vllm(tmp_path):
    """A `vllm` on PATH: `vllm serve` is the stand-in server, `vllm bench serve` tests/helpers/fake_vllm.py."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'helpers' / 'fake_vllm.py'} \"$@\"\n")
    exe.chmod(0o755)
    return bindir


def _vllm_record(tmp_path, bench: str | None):
    bindir = _fake_vllm(tmp_path)
    port = free_port()
    out = tmp_path / "bundle"
    log = tmp_path / "bench-argv.jsonl"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_VLLM_LOG": str(log)}
    if bench:
        env["FAKE_VLLM_BENCH"] = bench
    server = Server(tmp_path)
    command = ["vllm", "serve", "fake-model", "--port", str(port), "--no-plugins", "--stats", str(server.stats_file),
               "--pidfile", str(server.pidfile), "--trace", str(sample_trace("overlap"))]  # fmt: skip
    argv = record_argv(out, server, "--repeats", "2", "--num-prompts", "3", "--concurrency", "2", "--input-len", "5",
                       "--output-len", "4", "--seed", "7", "--warmup-prompts", "0", "--trace-timeout", "20")  # fmt: skip
    argv = [a for a in argv if a != "--server"]
    argv = argv[: argv.index("--") + 1] + command
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    finally:
        _stop_all(*server.pids())
    lines = log.read_text().splitlines() if log.exists() else []
    return proc, out, [json.loads(x) for x in lines], server


def test_vllm_bench_serve_times_the_repeats_where_vllm_is_the_server(tmp_path):
    proc, out, calls, server = _vllm_record(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["repeats_note"] is None and len(m["repeats"]) == 2 and len(calls) == 2
    base = m["model"]
    for i, (rep, call) in enumerate(zip(m["repeats"], calls)):
        seed = 7 + i
        assert rep["tool"] == "vllm bench serve" and rep["index"] == i
        # The command a user would type, in the manifest: the same load, the repeat's own seed.
        assert rep["command"][1:] == call and rep["command"][0] == "vllm"
        flags = {call[j]: call[j + 1] for j in range(2, len(call) - 1)}  # each word and the one after it
        assert flags["--num-prompts"] == "3" and flags["--max-concurrency"] == "2" and flags["--seed"] == str(seed)
        assert flags["--random-input-len"] == "5" and flags["--random-output-len"] == "4"
        assert flags["--model"] == base and flags["--tokenizer"] == "fake-model" and "--ignore-eos" in call
        # Its saved result is in the bundle, and the manifest keeps vLLM's figures under its keys.
        saved = json.loads((out / rep["result"]).read_text())
        assert rep["result"] == f"bench/repeat-{i}.json"
        assert rep["duration_s"] == saved["duration"] == 10.0 + seed
        for key in KEPT:
            if key != "duration" and isinstance(saved.get(key), (int, float)):
                assert rep[key] == saved[key], key
        assert rep["median_tpot_ms"] == 20.5 + seed and rep["p99_itl_ms"] == pytest.approx(19.0 + seed + 9.9)
    # What the server saw: 2 x 3 from the benchmark, then 3 profiled.
    stats = json.loads(server.stats_file.read_text())
    assert stats["requests"] == 2 * 3 + 3 and stats["profiled_requests"] == 3


@pytest.mark.parametrize("bench", ["fail", "nofile"])
def test_a_failing_vllm_bench_falls_back_to_the_builtin_load_and_says_so(tmp_path, bench):
    proc, out, calls, server = _vllm_record(tmp_path, bench)
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert len(calls) == 1  # tried once; the rest timed by the built-in load
    assert [r["tool"] for r in m["repeats"]] == ["builtin", "builtin"]
    assert "`vllm bench serve` failed" in m["repeats_note"] and "bench/bench.log" in m["repeats_note"]
    assert "vllm bench serve` failed" in proc.stderr
    assert all(r["completed"] == 3 and r["median_tpot_ms"] is not None for r in m["repeats"])
    assert (out / "bench" / "bench.log").exists()
    if bench == "fail":
        assert "fake vllm bench serve failed" in (out / "bench" / "bench.log").read_text()


def test_bench_command_is_the_documented_one():
    plan = RepeatPlan(repeats=3, base_url="http://127.0.0.1:8000", model="m", tokenizer="org/tok", vllm="/x/vllm",
                      load=LoadSpec(num_prompts=64, concurrency=16, input_len=512, output_len=256, seed=0))  # fmt: skip
    argv = bench_command(plan, 2, __import__("pathlib").Path("/b/bench"))
    assert " ".join(argv) == (
        "/x/vllm bench serve --backend openai --base-url http://127.0.0.1:8000 --endpoint /v1/completions --model m "
        "--tokenizer org/tok --dataset-name random --random-input-len 512 --random-output-len 256 --num-prompts 64 "
        "--max-concurrency 16 --ignore-eos --seed 2 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 "
        "--save-result --result-dir /b/bench --result-filename repeat-2.json"
    )


def test_a_server_that_dies_during_the_repeats_ends_them_at_once(tmp_path):
    server = Server(tmp_path, "die-midrun", extra=("--no-plugins",))
    out = tmp_path / "bundle"
    proc = record(out, server, "--repeats", "3", "--num-prompts", "20", "--concurrency", "1", "--warmup-prompts", "0")
    assert proc.returncode == 1 and "during the timed repeats" in proc.stderr, proc.stderr
    assert manifest_of(out)["status"] == "failed" and "Traceback" not in proc.stderr
    assert not any(alive(pid) for pid in server.pids())


# -- py-spy -------------------------------------------------------------------------------------
def test_python_samples_are_in_the_bundle_where_py_spy_can_attach(tmp_path):
    if shutil.which("py-spy") is None:
        pytest.skip("py-spy is not installed here (pip install py-spy)")
    server = Server(tmp_path, "slow", extra=("--no-plugins",))
    out = tmp_path / "bundle"
    proc = record(out, server, "--python-samples", "--python-sample-rate", "50", "--num-prompts", "4", "--concurrency", "1",
                  "--warmup-prompts", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    (entry,) = m["pystacks"]
    if entry["path"] is None and entry["note"] and ("ptrace" in entry["note"].lower() or "permission" in entry["note"].lower()):
        pytest.skip(f"py-spy may not attach here: {entry['note']}")
    assert entry["note"] is None, entry
    assert entry["role"] == "main" and entry["pid"] == m["pid"] and entry["rate_hz"] == 50
    assert entry["started_unix_ns"] < entry["stopped_unix_ns"]
    assert entry["path"] == "pystacks/main.json"
    body = json.loads((out / entry["path"]).read_text())
    events = body["traceEvents"] if isinstance(body, dict) else body
    assert events and any(e.get("ph") == "B" for e in events)
    assert not any(alive(pid) for pid in server.pids())


def test_python_samples_off_leave_no_pystacks(tmp_path):
    server = Server(tmp_path, extra=("--no-plugins",))
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "1", "--warmup-prompts", "0")
    assert proc.returncode == 0, proc.stderr
    assert "pystacks" not in manifest_of(out) and not (out / "pystacks").exists()


def test_a_missing_py_spy_is_one_note_and_the_recording_goes_on(tmp_path):
    server = Server(tmp_path, extra=("--no-plugins",))
    out = tmp_path / "bundle"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + "/nonexistent"}
    if shutil.which("py-spy", path=env["PATH"]):
        pytest.skip("py-spy sits beside this Python: it cannot be hidden from PATH")
    argv = record_argv(out, server, "--python-samples", "--num-prompts", "1", "--warmup-prompts", "0")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    (entry,) = manifest_of(out)["pystacks"]
    assert entry["path"] is None and "py-spy is not installed" in entry["note"]
    assert "py-spy is not installed" in proc.stderr
