"""`dbo-trace record --peer-command`: an AFD pair recorded as one run, against stand-ins on 127.0.0.1.

The peer is tests/helpers/fake_peer.py (the FFN server: no HTTP, an engine process that listens on
the AFD port and holds a Worker registered through record/control.py); the main server is
tests/helpers/fake_server.py with an attention role. Each test checks the order (the peer listens
before the main server starts), what each side was asked, the bundle's manifest, and that no process
of either server is left alive, whatever ended the run.
"""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, run_cli, sample_trace
from test_record import Server, _stop_all, alive, free_port, manifest_of, record, record_argv

FAKE_PEER = ROOT / "tests" / "helpers" / "fake_peer.py"


def afd(role: str, port: int) -> str:
    return json.dumps({"afd": {"role": role, "connector": "P2pNcclAFDConnector", "host": "127.0.0.1", "port": port,
                               "num_attention_ranks": 1, "num_ffn_ranks": 1}})  # fmt: skip


class Pair:
    """A stand-in FFN server (the peer) and a stand-in attention server, on one fresh AFD port."""

    def __init__(
        self, tmp: Path, peer_behaviour: str = "normal", main_behaviour: str = "normal", plugin: bool = False, discover: bool = False,
        ffn_loop: bool = False,
    ):  # fmt: skip
        self.port = free_port()
        (tmp / "main").mkdir()
        self.main = Server(tmp / "main", main_behaviour, extra=("--additional-config", afd("attention", self.port)))
        if not plugin:
            self.main.command.append("--no-plugins")
        self.peer_pidfile, self.peer_stats_file = tmp / "peer.pids", tmp / "peer.json"
        self.peer_command = [
            sys.executable, str(FAKE_PEER), "serve", "fake-model", "--additional-config", afd("ffn", self.port),
            "--behaviour", peer_behaviour, "--pidfile", str(self.peer_pidfile), "--stats", str(self.peer_stats_file),
            "--trace", str(sample_trace("overlap")), *(("--plugin",) if plugin else ()), *(("--discover",) if discover else ()),
            *(("--ffn-loop",) if ffn_loop else ()),
        ]  # fmt: skip

    def peer_pids(self) -> list[int]:
        return [int(x) for x in self.peer_pidfile.read_text().split()] if self.peer_pidfile.exists() else []

    def peer_stats(self) -> dict:
        return json.loads(self.peer_stats_file.read_text())

    def options(self, *more: str) -> tuple[str, ...]:
        return ("--peer-command", shlex.join(self.peer_command), "--num-prompts", "2", "--warmup-prompts", "0", *more)

    def all_stopped(self) -> bool:
        return not any(alive(pid) for pid in [*self.peer_pids(), *self.main.pids()])

    def failed(self, out: Path, proc) -> dict:
        """The run failed cleanly: its manifest says so, no traceback, nothing of either server left."""
        m = manifest_of(out)
        assert m["status"] == "failed" and "Traceback" not in proc.stderr, proc.stderr
        assert self.all_stopped()
        return m

    def cleanup(self) -> None:
        _stop_all(*self.peer_pids(), *self.main.pids())


def test_an_afd_pair_is_recorded_as_one_run(tmp_path):
    """The peer's Worker is found as the control thread finds vLLM's (an instance of
    vllm.v1.worker.gpu_worker.Worker among the live objects); the SIGTERM test's is kept by keep_worker."""
    pair = Pair(tmp_path, plugin=True, discover=True)
    pair.peer_command += ["--api-key", "sk-peer-planted-secret"]
    out = tmp_path / "bundle"
    try:
        proc = record(out, pair.main, *pair.options())
        assert proc.returncode == 0, proc.stderr
        assert "sk-peer-planted-secret" not in (out / "manifest.json").read_text() + proc.stderr + proc.stdout
        m = manifest_of(out)
        peer = pair.peer_stats()
        main = pair.main.stats()
        # The order: the peer's engine listened on the AFD port before the main server's process began.
        assert peer["listening_unix"] is not None and peer["listening_unix"] < main["started_unix"]
        assert m["times"]["peer_ready_after_s"] >= 0 and m["peer"]["ready_port"] == pair.port
        # Both roles, each with its own trace; the peer's in peer/traces, written at its profiler's stop.
        assert set(m["roles"]) == {"attention", "ffn"}
        assert m["roles"]["attention"]["traces"] == ["traces/fake_rank0.pt.trace.json.gz"]
        assert m["roles"]["ffn"]["traces"] == ["peer/traces/ffn_rank0.pt.trace.json.gz"]
        assert (m["roles"]["attention"]["peer"], m["roles"]["ffn"]["peer"]) == (False, True)
        assert "--profiler-config" in m["roles"]["ffn"]["command"] and m["roles"]["ffn"]["settings"]
        assert m["traces"] == ["traces/fake_rank0.pt.trace.json.gz"]  # the main server's, as before
        # The peer's Worker was asked to start, then to stop, once each, and acknowledged both.
        assert [c["start"] for c in peer["profile_calls"]] == [True, False]
        engine_pid = pair.peer_pids()[1]
        for key, action in (("profile_start", "start"), ("profile_stop", "stop")):
            sent = m["peer"][key]
            assert sent["action"] == action and sent["ok"] is True, sent
            assert [(a["pid"], a["ok"], a["workers"], a["error"]) for a in sent["acks"]] == [(engine_pid, True, 1, None)]
        ack = json.loads((out / "peer" / "acks" / f"{engine_pid}.json").read_text())
        assert ack["seq"] == 2 and ack["action"] == "stop"
        # The peer's Worker was profiling while the main server's profiled requests ran.
        start_call, stop_call = peer["profile_calls"]
        assert start_call["unix"] < stop_call["unix"] and main["profiled_requests"] == 2
        # The AFD block, the pair's GPU sharing, the peer's event log (its plugin wrote under peer/).
        assert m["afd"]["role"] == "attention" and m["afd"]["port"] == pair.port
        assert m["peer"]["afd"]["role"] == "ffn" and m["peer"]["role"] == "ffn"
        assert set(m["gpu_sharing"]) >= {"shared_gpu", "mps"}
        assert m["peer_events"] and all(p.startswith("peer/events/") for p in m["peer_events"])
        assert "additional-config" in json.dumps(m["settings"])
        # Stopped after the main server, and nothing of either left.
        assert m["peer"]["stop"]["signals"] == ["SIGINT"] and m["peer"]["exit_status"] == 0
        assert peer["signals"] == ["SIGINT"]
        assert pair.all_stopped()
        assert "AFD connector listening" in (out / "peer" / "server.log").read_text()
    finally:
        pair.cleanup()


def test_an_ffn_with_its_own_loop_and_a_frozen_heap_is_profiled_on_its_loop(tmp_path):
    """The FFN as it behaves on the GPU (tests/helpers/fake_peer.py --ffn-loop): its Worker sits in a
    frozen heap, its loop always has a receive in flight, and the profiler's start and stop wait for
    that receive. Each runs on the loop at the top of an iteration, which a small request that the
    recorder sends through the attention server makes: the start before the window opens, the stop
    after the load."""
    pair = Pair(tmp_path, plugin=True, ffn_loop=True)
    out = tmp_path / "bundle"
    try:
        proc = record(out, pair.main, *pair.options("--num-prompts", "4", "--trace-timeout", "60"))
        assert proc.returncode == 0, proc.stderr
        m = manifest_of(out)
        peer = pair.peer_stats()
        engine_pid = pair.peer_pids()[1]
        calls = peer["profile_calls"]
        assert [(c["start"], c["on_loop"]) for c in calls] == [(True, True), (False, True)]
        assert all(c["waited_s"] < 1.0 for c in calls)  # at the loop's top nothing was in flight
        for key, action in (("profile_start", "start"), ("profile_stop", "stop")):
            sent = m["peer"][key]
            assert sent["ok"] is True, sent
            assert [(a["pid"], a["state"], a["where"], a["workers"]) for a in sent["acks"]] == [(engine_pid, "done", "loop", 1)]
        assert m["peer"]["nudge_requests"] >= 2  # neither came while traffic flowed
        assert m["roles"]["ffn"]["traces"] == ["peer/traces/ffn_rank0.pt.trace.json.gz"]
        # The FFN was profiling before the attention side's window opened, and until its load ended.
        assert calls[0]["unix"] < calls[1]["unix"] and pair.main.stats()["profiled_requests"] == 4
        assert calls[0]["unix"] < pair.main.stats()["start_profile_unix"]
        assert peer["steps"] >= 4 + m["peer"]["nudge_requests"]
        assert pair.all_stopped()
    finally:
        pair.cleanup()


def test_the_peer_is_stopped_when_the_main_server_dies(tmp_path):
    pair = Pair(tmp_path, main_behaviour="die-midrun")
    out = tmp_path / "bundle"
    try:
        proc = record(out, pair.main, *pair.options("--num-prompts", "20", "--concurrency", "1"))
        assert proc.returncode == 1 and "engine core died (fake)" in proc.stderr, proc.stderr
        m = manifest_of(out)
        assert m["status"] == "failed" and m["peer"]["exit_status"] is not None
        assert pair.peer_pids() and pair.all_stopped()
        # It was profiling when the main server died: it was told to stop (its trace is kept) before it was stopped.
        assert [c["start"] for c in pair.peer_stats()["profile_calls"]] == [True, False]
        assert m["roles"]["ffn"]["traces"] == ["peer/traces/ffn_rank0.pt.trace.json.gz"]
        assert "Traceback" not in proc.stderr
    finally:
        pair.cleanup()


def test_a_peer_that_dies_mid_run_fails_the_recording_and_stops_the_main_server(tmp_path):
    """The FFN server exits once its profiler started: the main server of a real pair would wait for it
    forever, so the load ends at once, the run fails naming the peer, and the main server is stopped."""
    pair = Pair(tmp_path, peer_behaviour="die-on-start", main_behaviour="slow")
    out = tmp_path / "bundle"
    try:
        t0 = time.monotonic()
        proc = record(out, pair.main, *pair.options("--num-prompts", "1000", "--concurrency", "1"))
        assert time.monotonic() - t0 < 300  # 1,000 slow requests would take 500 s; stopped at once, it takes seconds
        assert proc.returncode == 1, proc.stderr
        assert "the ffn server exited with status 3 during the recording" in proc.stderr, proc.stderr
        assert pair.failed(out, proc)["peer"]["exit_status"] == 3
    finally:
        pair.cleanup()


def test_sigterm_to_record_stops_both_servers_and_closes_both_windows(tmp_path):
    pair = Pair(tmp_path, main_behaviour="slow")
    out = tmp_path / "bundle"
    rec = subprocess.Popen(
        record_argv(out, pair.main, *pair.options("--num-prompts", "100", "--concurrency", "1")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        log = out / "server.log"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (log.exists() and "Profiler started" in log.read_text()):
            time.sleep(0.1)
        time.sleep(0.3)
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=90)
        assert rec.returncode == 130, err
        m = manifest_of(out)
        assert m["status"] == "incomplete" and "SIGTERM" in m["reason"]
        # Both profile windows were closed on the way out: both traces are in the bundle.
        assert m["roles"]["attention"]["traces"] and m["roles"]["ffn"]["traces"]
        assert m["peer"]["profile_stop"]["ok"] is True
        assert pair.all_stopped() and "Traceback" not in err
    finally:
        if rec.poll() is None:
            rec.kill()
        pair.cleanup()


def test_a_peer_that_never_listens_times_out_in_one_line(tmp_path):
    pair = Pair(tmp_path, peer_behaviour="never-listen")
    out = tmp_path / "bundle"
    try:
        proc = record(out, pair.main, *pair.options("--startup-timeout", "3"))
        assert proc.returncode == 1
        first = next(line for line in proc.stderr.splitlines() if "error:" in line)
        assert f"the peer server did not listen on port {pair.port} after 3 s" in first and "--startup-timeout" in first
        pair.failed(out, proc)
        assert not pair.main.pids()  # the main server never started
    finally:
        pair.cleanup()


def test_a_peer_that_dies_at_start_is_said_with_its_last_lines(tmp_path):
    pair = Pair(tmp_path, peer_behaviour="die-at-start")
    out = tmp_path / "bundle"
    proc = record(out, pair.main, *pair.options())
    assert proc.returncode == 1
    assert "the peer server exited with status 2 before it listened" in proc.stderr
    assert "the FFN server failed to start (fake)" in proc.stderr and "Traceback" not in proc.stderr
    assert manifest_of(out)["status"] == "failed" and not pair.main.pids()


def test_a_port_held_by_another_process_is_refused_at_once(tmp_path):
    """A listener on the AFD port that is not the peer's (an FFN server left from the last arm): the
    main server would connect to it; the run stops at once saying so."""
    import socket

    pair = Pair(tmp_path, peer_behaviour="never-listen")
    holder = socket.socket()
    holder.bind(("127.0.0.1", pair.port))
    holder.listen(1)
    out = tmp_path / "bundle"
    try:
        t0 = time.monotonic()
        proc = record(out, pair.main, *pair.options("--startup-timeout", "900"))
        assert time.monotonic() - t0 < 300  # refused at once, not at the startup deadline
        assert proc.returncode == 1 and f"port {pair.port} is held by a process outside the peer server" in proc.stderr
        assert pair.all_stopped()
    finally:
        holder.close()
        pair.cleanup()


def _usage_error(tmp_path, *options: str) -> str:
    out = tmp_path / "bundle"
    proc = run_cli("record", "--server", "-o", str(out), *options, "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dbo-trace: error: "), proc.stderr
    assert not out.exists()  # nothing made, nothing started
    return lines[0]


def test_a_peer_without_an_afd_port_needs_peer_ready_port(tmp_path):
    line = _usage_error(tmp_path, "--peer-command", f"{sys.executable} -c pass")
    assert "names no AFD port" in line and "--peer-ready-port" in line


def test_an_unparsable_peer_command_is_one_line(tmp_path):
    line = _usage_error(tmp_path, "--peer-command", "vllm serve 'unclosed")
    assert "--peer-command" in line and "quote it" in line
    line = _usage_error(tmp_path, "--peer-command", "   ")
    assert "--peer-command is empty" in line


def test_a_peer_command_with_a_broken_profiler_config_makes_nothing(tmp_path):
    pair = Pair(tmp_path)
    pair.peer_command += ["--profiler-config", "{not json"]
    out = tmp_path / "bundle"
    proc = record(out, pair.main, *pair.options())
    assert proc.returncode == 2 and "not a JSON object" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists() and not pair.peer_pids() and not pair.main.pids()
