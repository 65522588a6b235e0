"""`dbo-trace sweep`: arms x loads against the stand-in servers of tests/helpers/ on 127.0.0.1.

Each test checks what a user would: the exit code and its line, sweep.json's runs, each bundle's
manifest and files, what the stand-ins were asked (one server lifetime per arm: its profiler
started once per load), and that no process is left alive.
"""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import popen_interruptible, run_cli
from test_record import Server, _stop_all, alive
from test_record_peer import Pair


def sweep_argv(out: Path, command: list[str], *options: str) -> list[str]:
    return [
        sys.executable, "-m", "dbo_trace.cli", "sweep", "-o", str(out), "--grace", "30", "--startup-timeout", "180",
        "--num-prompts", "2", "--warmup-prompts", "0", *options, "--", *command,
    ]  # fmt: skip


def sweep(out: Path, command: list[str], *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_argv(out, command, *options), capture_output=True, text=True)


def state_of(out: Path) -> dict:
    return json.loads((out / "sweep.json").read_text())


def statuses(out: Path) -> dict[tuple[str, str], str]:
    return {(r["arm"], r["load"]): r["status"] for r in state_of(out)["runs"]}


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def test_a_two_arm_two_load_sweep_of_an_afd_pair(tmp_path):
    pair = Pair(tmp_path)
    pair.main.command.append("--no-plugins")
    out = tmp_path / "sweep"
    try:
        proc = sweep(
            out, pair.main.command, "--peer-command", shlex.join(pair.peer_command), "--dbo-ablation",
            "--concurrency", "1,2", "--repeats", "1",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        state = state_of(out)
        assert (state["format"], state["version"], state["repeats"], state["profile"]) == ("dbo-trace-sweep", 1, 1, True)
        assert state["arms"] == [{"name": "dbo-off", "args": []}, {"name": "dbo-on", "args": ["--enable-dbo"]}]
        assert state["loads"] == [
            {"name": "c1", "concurrency": 1, "num_prompts": 2, "input_len": 512, "output_len": 64},
            {"name": "c2", "concurrency": 2, "num_prompts": 2, "input_len": 512, "output_len": 64},
        ]
        assert state["peer_command"][:2] == pair.peer_command[:2]
        assert [(r["arm"], r["load"], r["bundle"], r["status"], r["reason"]) for r in state["runs"]] == [
            ("dbo-off", "c1", "dbo-off/c1", "complete", None), ("dbo-off", "c2", "dbo-off/c2", "complete", None),
            ("dbo-on", "c1", "dbo-on/c1", "complete", None), ("dbo-on", "c2", "dbo-on/c2", "complete", None),
        ]  # fmt: skip
        for arm in ("dbo-off", "dbo-on"):
            assert (out / arm / "server.log").is_file() and (out / arm / "peer" / "server.log").is_file()
            for load, concurrency in (("c1", 1), ("c2", 2)):
                m = manifest_of(out / arm / load)
                assert m["status"] == "complete" and m["sweep"] == {"arm": arm, "load": load}
                assert m["load"]["concurrency"] == concurrency and m["load"]["num_prompts"] == 2
                assert len(m["repeats"]) == 1 and m["repeats"][0]["completed"] == 2
                # This window's traces only, moved out of the servers' profiler folders.
                assert m["roles"]["attention"]["traces"] == ["traces/fake_rank0.pt.trace.json.gz"]
                assert m["roles"]["ffn"]["traces"] == ["peer/traces/ffn_rank0.pt.trace.json.gz"]
                assert m["peer"]["profile_start"]["ok"] and m["peer"]["profile_stop"]["ok"]
                # The arm's flags reached both roles' commands.
                dbo = "--enable-dbo" in m["roles"]["attention"]["command"], "--enable-dbo" in m["roles"]["ffn"]["command"]
                assert dbo == ((True, True) if arm == "dbo-on" else (False, False))
                assert set(m["gpu_sharing"]) >= {"shared_gpu", "mps"}
            assert not any((out / arm / "traces").iterdir()) and not any((out / arm / "peer" / "traces").iterdir())
        # One lifetime per arm: the last arm's servers were asked for two windows, one per load.
        assert pair.main.stats()["start_profile"] == 2 and pair.main.stats()["stop_profile"] == 2
        assert [c["start"] for c in pair.peer_stats()["profile_calls"]] == [True, False, True, False]
        assert "[dbo-on c2 +" in proc.stderr and "4 complete" in proc.stderr
        assert pair.all_stopped()
        # A bundle is a bundle: `report` reads one alone.
        shown = run_cli("report", str(out / "dbo-on" / "c2"))
        assert shown.returncode == 0, shown.stderr
    finally:
        pair.cleanup()


def test_a_server_that_dies_at_start_is_quoted_by_its_root_cause(tmp_path):
    """Issue 61: vLLM's engine core logs its root cause (a CUDA error) 40 lines above the wrapper's
    traceback, whose last line only says "See root cause above": the sweep's message quotes the root
    cause, which the log's last lines no longer hold."""
    server = Server(tmp_path, extra=("--no-plugins",))
    out = tmp_path / "sweep"
    try:
        proc = sweep(out, server.command, "--arm", "bad=--behaviour die-wrapped", "--concurrency", "1", "--repeats", "0")
        assert proc.returncode == 1, proc.stderr
        root = "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable (fake)"
        (run,) = state_of(out)["runs"]
        assert run["status"] == "failed" and f"its first error: {root}" in run["reason"]
        tail = run["reason"].split("its last lines:", 1)[1]
        assert root not in tail and "See root cause above" in tail  # the tail alone would not have said why
        assert f"its first error: {root}" in proc.stderr
        assert not any(alive(pid) for pid in server.pids())
    finally:
        _stop_all(*server.pids())


def test_an_arm_whose_server_does_not_start_fails_alone(tmp_path):
    server = Server(tmp_path, extra=("--no-plugins",))
    out = tmp_path / "sweep"
    try:
        proc = sweep(out, server.command, "--arm", "bad=--behaviour die", "--arm", "good=--note ok", "--concurrency", "1,2", "--repeats", "0")
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        line = next(line for line in proc.stderr.splitlines() if line.startswith("dbo-trace: [bad +") and "] FAILED: " in line)
        assert "exited with status 1" in line
        assert "OutOfMemoryError" in proc.stderr  # the log's tail
        state = state_of(out)
        assert statuses(out) == {("bad", "c1"): "failed", ("bad", "c2"): "failed", ("good", "c1"): "complete", ("good", "c2"): "complete"}
        assert all("OutOfMemoryError" in r["reason"] for r in state["runs"] if r["arm"] == "bad")
        assert not (out / "bad" / "c1").exists()
        assert manifest_of(out / "good" / "c2")["status"] == "complete"
        assert not any(alive(pid) for pid in server.pids())
    finally:
        _stop_all(*server.pids())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; `timeout`'s, on the device
def test_ctrl_c_keeps_finished_loads_and_resume_runs_only_the_rest(tmp_path, signum):
    server = Server(tmp_path, "slow", extra=("--no-plugins",))  # half a second a request
    out = tmp_path / "sweep"
    argv = sweep_argv(out, server.command, "--arm", "a=--note a", "--concurrency", "1,2,3", "--repeats", "1")
    proc = popen_interruptible(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if (out / "sweep.json").is_file() and statuses(out).get(("a", "c1")) == "complete":
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the first load never completed")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "--resume" in err
        after = statuses(out)
        assert after[("a", "c1")] == "complete"
        assert after[("a", "c2")] in ("incomplete", "pending") and after[("a", "c3")] == "pending"
        if after[("a", "c2")] == "incomplete":
            assert manifest_of(out / "a" / "c2")["status"] == "incomplete"
        kept = (out / "a" / "c1" / "manifest.json").read_bytes()
        assert not any(alive(pid) for pid in server.pids())
        first_requests = server.stats()["requests"]

        # Resume from sweep.json alone: only c2 and c3 run, in one new server lifetime; c1 is untouched.
        again = run_cli("sweep", "-o", str(out), "--resume")
        assert again.returncode == 0, again.stderr
        assert set(statuses(out).values()) == {"complete"}
        assert (out / "a" / "c1" / "manifest.json").read_bytes() == kept
        stats = server.stats()
        assert stats["start_profile"] == 2 and stats["requests"] == 2 * (2 + 2)  # two loads: a repeat and a window of 2 each
        assert first_requests >= 2
        assert (out / "a" / "previous" / "1" / "server.log").is_file()  # the first lifetime's log, set aside
        assert manifest_of(out / "a" / "c3")["load"]["concurrency"] == 3
        # Nothing left to run: a second resume starts no server.
        third = run_cli("sweep", "-o", str(out), "--resume")
        assert third.returncode == 0 and "nothing to run" in third.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_all(*server.pids())


def test_a_folder_that_is_not_this_sweep_is_refused_untouched(tmp_path):
    server = Server(tmp_path, extra=("--no-plugins",))
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    proc = sweep(foreign, server.command, "--arm", "a=--note a", "--concurrency", "1")
    assert proc.returncode == 2 and "not empty" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    # A sweep of another plan: refused, even with --resume; without --resume, a sweep is never added to.
    out = tmp_path / "sweep"
    try:
        first = sweep(out, server.command, "--arm", "a=--note a", "--concurrency", "1", "--repeats", "0", "--no-profile")
        assert first.returncode == 0, first.stderr
        before = (out / "sweep.json").read_bytes()
        other = sweep(out, server.command, "--arm", "a=--note a", "--concurrency", "1,2", "--repeats", "0", "--no-profile", "--resume")
        assert other.returncode == 2 and "another loads" in other.stderr
        again = sweep(out, server.command, "--arm", "a=--note a", "--concurrency", "1", "--repeats", "0", "--no-profile")
        assert again.returncode == 2 and "--resume" in again.stderr
        assert (out / "sweep.json").read_bytes() == before
        assert manifest_of(out / "a" / "c1")["status"] == "no_traces"  # --no-profile: the repeats alone
        assert statuses(out) == {("a", "c1"): "complete"}
    finally:
        _stop_all(*server.pids())


def test_an_arm_is_a_name_and_its_flags():
    from dbo_trace.commands.sweep import SweepRequest, arms_of, parse_arm
    from dbo_trace.errors import UsageError

    assert parse_arm("graphs=") == ("graphs", ())
    assert parse_arm("graphs-dbo=--enable-dbo --dbo-decode-token-threshold 2") == (
        "graphs-dbo", ("--enable-dbo", "--dbo-decode-token-threshold", "2"),
    )  # fmt: skip
    # The flags are split as a shell splits them: a JSON value is quoted inside (as --peer-command's are).
    assert parse_arm("""cg=--compilation-config '{"cudagraph_mode": "FULL"}'""") == ("cg", ("--compilation-config", '{"cudagraph_mode": "FULL"}'))
    for bad in ("--enable-dbo", "=x", "../up=x", "previous=x", "a b=x"):
        with pytest.raises(UsageError):
            parse_arm(bad)
    request = SweepRequest(out=Path("x"), arms=("eager=--enforce-eager",), dbo_ablation=True)
    assert arms_of(request) == [("dbo-off", ()), ("dbo-on", ("--enable-dbo",)), ("eager", ("--enforce-eager",))]
    with pytest.raises(UsageError, match="named twice"):
        arms_of(SweepRequest(out=Path("x"), arms=("dbo-on=--x",), dbo_ablation=True))


def test_each_load_is_timed_by_vllm_bench_serve_at_its_own_concurrency_or_by_the_builtin_load(tmp_path):
    import os

    from test_record import free_port
    from test_record_repeats import _fake_vllm

    bindir = _fake_vllm(tmp_path)
    log = tmp_path / "bench-argv.jsonl"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_VLLM_LOG": str(log)}
    server = Server(tmp_path)
    command = ["vllm", "serve", "fake-model", "--port", str(free_port()), "--no-plugins", "--stats", str(server.stats_file),
               "--pidfile", str(server.pidfile)]  # fmt: skip
    try:
        for tool, out in (("auto", tmp_path / "vllm-timed"), ("builtin", tmp_path / "builtin-timed")):
            argv = sweep_argv(out, command, "--arm", "a=", "--concurrency", "1,2", "--repeats", "2", "--no-profile", "--repeat-tool", tool)
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
            assert proc.returncode == 0, proc.stderr
            assert state_of(out)["repeat_tool"] == tool
            for load, concurrency in (("c1", 1), ("c2", 2)):
                m = manifest_of(out / "a" / load)
                assert [r["index"] for r in m["repeats"]] == [0, 1]
                if tool == "builtin":
                    assert {r["tool"] for r in m["repeats"]} == {"builtin"}
                    continue
                assert {r["tool"] for r in m["repeats"]} == {"vllm bench serve"}
                for rep in m["repeats"]:  # its saved result moved into this load's bundle, at the path the manifest names
                    assert rep["result"] == f"bench/repeat-{rep['index']}.json" and (out / "a" / load / rep["result"]).is_file()
                    flags = {rep["command"][j]: rep["command"][j + 1] for j in range(len(rep["command"]) - 1)}
                    assert flags["--max-concurrency"] == str(concurrency) and flags["--num-prompts"] == "2"
        calls = [json.loads(x) for x in log.read_text().splitlines()]
        assert len(calls) == 4  # two loads x two repeats, from the auto sweep only
        # Arms timed by different tools do not compare: adding one to the other sweep is refused.
        argv = sweep_argv(tmp_path / "builtin-timed", command, "--arm", "b=", "--concurrency", "1,2", "--repeats", "2", "--no-profile", "--resume")
        refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert refused.returncode == 2 and "another repeat_tool" in refused.stderr
    finally:
        _stop_all(*server.pids())


def test_a_malformed_sweep_json_is_refused_in_one_line(tmp_path):
    server = Server(tmp_path, extra=("--no-plugins",))
    out = tmp_path / "sweep"
    try:
        first = sweep(out, server.command, "--arm", "a=--note a", "--concurrency", "1", "--repeats", "0", "--no-profile")
        assert first.returncode == 0, first.stderr
        good = state_of(out)
        for broken in (
            {**good, "arms": [{"name": "../../escape", "args": []}]},
            {**good, "loads": [{**good["loads"][0], "concurrency": "many"}]},
            {**good, "runs": [{**good["runs"][0], "status": "done"}]},
            {**good, "runs": "all of them"},
        ):
            (out / "sweep.json").write_text(json.dumps(broken))
            proc = run_cli("sweep", "-o", str(out), "--resume")
            assert proc.returncode == 2 and "sweep.json" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "escape").exists()
    finally:
        _stop_all(*server.pids())


def test_a_server_that_dies_during_a_load_fails_it_and_skips_the_arms_later_loads(tmp_path):
    server = Server(tmp_path, "die-midrun", extra=("--no-plugins",))  # exits at its 4th request: c1's window
    out = tmp_path / "sweep"
    try:
        proc = sweep(out, server.command, "--arm", "a=--note a", "--concurrency", "1,2,3", "--repeats", "1")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        runs = {r["load"]: r for r in state_of(out)["runs"]}
        assert runs["c1"]["status"] == "failed" and "exited with status 3" in runs["c1"]["reason"]
        assert [(runs[x]["status"], runs[x]["reason"]) for x in ("c2", "c3")] == [
            ("skipped", "not run: the arm's servers stopped during c1"), ("skipped", "not run: the arm's servers stopped during c1"),
        ]  # fmt: skip
        m = manifest_of(out / "a" / "c1")
        assert m["status"] == "failed" and len(m["repeats"]) == 1  # its repeat ran and is kept
        assert not (out / "a" / "c2").exists()
        assert not any(alive(pid) for pid in server.pids())
    finally:
        _stop_all(*server.pids())


def test_the_help_lists_the_sweep_and_its_options_fit_80_columns():
    top = run_cli("--help")
    assert top.returncode == 0 and any(line.split()[:2] == ["sweep", "Record"] for line in top.stdout.splitlines())
    own = run_cli("sweep", "--help")
    assert own.returncode == 0
    for option in ("--arm", "--dbo-ablation", "--concurrency", "--num-prompts-per-slot", "--repeats", "--no-profile", "--peer-command", "--resume", "--repeat-tool"):
        assert option in own.stdout, option
    assert max(len(line) for line in own.stdout.splitlines()) <= 80


def _fake_mps(tmp_path: Path) -> tuple[dict, Path]:
    """An environment whose nvidia-cuda-mps-control is tests/helpers/fake_mps_control.py, and the folder
    of that stand-in's state (its calls, its clients)."""
    import os

    bin_dir, pipe = tmp_path / "bin", tmp_path / "mps"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-cuda-mps-control"
    helper = Path(__file__).resolve().parents[1] / "helpers" / "fake_mps_control.py"
    tool.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(helper))} \"$@\"\n")
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", CUDA_MPS_PIPE_DIRECTORY=str(pipe))
    return env, tmp_path / "mps-fake"


def test_with_mps_each_arm_gets_a_fresh_daemon_after_the_last_arms_clients_left(tmp_path):
    """Issue 61: under one MPS daemon the second arm's FFN server failed with "busy or unavailable"
    right after the first arm's servers stopped. With --mps the sweep starts its own daemon, and
    between arms quits it and starts it afresh (as a new sweep call did), then the arm runs."""
    server = Server(tmp_path, extra=("--no-plugins",))
    env, pipe = _fake_mps(tmp_path)
    out = tmp_path / "sweep"
    try:
        proc = subprocess.run(
            sweep_argv(out, server.command, "--arm", "a=--note a", "--arm", "b=--note b", "--concurrency", "1", "--repeats", "0", "--mps"),
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert statuses(out) == {("a", "c1"): "complete", ("b", "c1"): "complete"}
        calls = [c for c in (pipe / "calls").read_text().split("\n") if c and not c.startswith("get_")]
        assert calls == ["-d", "quit", "-d", "quit"]  # started, afresh between the arms, stopped at the end
        assert "started afresh" in proc.stderr
        assert not any(alive(pid) for pid in server.pids())
    finally:
        _stop_all(*server.pids())


def test_an_mps_daemon_the_sweep_did_not_start_is_left_alone_and_a_stuck_client_names_the_fix(tmp_path):
    """Without --mps a running daemon is used as it is: never quit. An earlier client that never
    leaves keeps the next arm from starting, and the line says how to restart the daemon."""
    from dbo_trace.record.environment import Probe, wait_ready

    env, pipe = _fake_mps(tmp_path)
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    (pipe / "clients").write_text("777")
    notes: list[str] = []
    said = wait_ready(env, notes.append, None, timeout_s=1.0, probe=lambda e: Probe(False, "CUDA_ERROR_DEVICE_UNAVAILABLE 46"))
    assert said is not None and "CUDA_ERROR_DEVICE_UNAVAILABLE" in said and "echo quit | nvidia-cuda-mps-control" in said
    assert notes and "1 MPS client(s)" in notes[0]
    assert "quit" not in (pipe / "calls").read_text()
    (pipe / "clients").write_text("")  # the client left; the GPU takes one on the second probe
    answers = iter([Probe(False, "CUDA_ERROR_DEVICE_UNAVAILABLE 46"), Probe(True, "")])
    assert wait_ready(env, notes.append, None, timeout_s=30.0, probe=lambda e: next(answers)) is None


def test_the_gpu_probe_runs_the_driver_or_says_there_is_none():
    """The probe's own process, here: a CUDA context made (a GPU machine) or no driver (CI's)."""
    import os

    from dbo_trace.record.environment import probe_gpu

    probe = probe_gpu(os.environ)
    assert probe.ready is True or (probe.ready is None and "libcuda" in probe.said), probe
