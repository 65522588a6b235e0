"""`dbo-trace record` against a stand-in server on 127.0.0.1 (tests/helpers/fake_server.py).

Each test checks what a user would: the exit code and message, the bundle's
manifest, what the server was actually sent, and that no process of the
server's group is left alive.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, sample_trace

FAKE = ROOT / "tests" / "helpers" / "fake_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie whose parent is gone is not running; /proc says so.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class Server:
    """One fake server's command line and the files it leaves."""

    def __init__(self, tmp: Path, behaviour: str = "normal", extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.pidfile, self.stats_file = tmp / "pids", tmp / "stats.json"
        self.command = [
            sys.executable,
            str(FAKE),
            "serve",
            "fake-model",
            "--port",
            str(self.port),
            "--behaviour",
            behaviour,
            "--pidfile",
            str(self.pidfile),
            "--stats",
            str(self.stats_file),
            "--trace",
            str(sample_trace("overlap")),
            *extra,
        ]

    def pids(self) -> list[int]:
        return [int(x) for x in self.pidfile.read_text().split()] if self.pidfile.exists() else []

    def stats(self) -> dict:
        return json.loads(self.stats_file.read_text())


def record_argv(out: Path, server: Server, *options: str) -> list[str]:
    """`dbo-trace record` against the server; later options override the defaults here.

    The default grace is long: a server that heeds SIGINT exits within it whatever the load, and
    only a test that means to escalate (a server ignoring SIGINT) waits, with its own --grace.
    With 3 s, CI's loaded two cores once took longer to end the stand-in server, and a normal
    run's stop read SIGINT, SIGTERM."""
    return [
        sys.executable,
        "-m",
        "dbo_trace.cli",
        "record",
        "--server",
        "-o",
        str(out),
        "--grace",
        "30",
        "--startup-timeout",
        "30",
        *options,
        "--",
        *server.command,
    ]


def record(out: Path, server: Server, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(record_argv(out, server, *options), capture_output=True, text=True)


def manifest_of(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_record_normal_run_writes_a_complete_bundle(tmp_path):
    server = Server(tmp_path)
    out = tmp_path / "bundle"
    proc = record(
        out,
        server,
        "--num-prompts",
        "6",
        "--concurrency",
        "2",
        "--warmup-prompts",
        "2",
        "--input-len",
        "32",
        "--output-len",
        "5",
        "--profile-steps",
        "7",
    )
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["status"] == "complete" and m["reason"] is None
    assert m["mode"] == "server" and m["model"] == "fake-model"
    stats = server.stats()
    # What the server saw: 2 warm-up + 6 profiled requests, all 32 tokens in and 5 out, one bracket.
    assert stats["requests"] == 8 and stats["profiled_requests"] == 6
    assert stats["prompt_lens"] == [32] * 8 and stats["max_tokens"] == [5] * 8
    assert (stats["start_profile"], stats["stop_profile"]) == (1, 1)
    config = stats["profiler_config"]
    assert config["profiler"] == "torch" and config["max_iterations"] == 7
    assert Path(config["torch_profiler_dir"]) == (out / "traces").resolve()
    assert m["load_result"]["completed"] == 6 and m["load_result"]["output_tokens"] == 30
    assert m["warmup"]["completed"] == 2
    assert m["traces"] == ["traces/fake_rank0.pt.trace.json.gz"]
    # The plugin loaded in the server: its event log and the counters written at its exit.
    assert len(m["events"]) == 1 and (out / m["events"][0]).read_text().startswith('{"format":"dbo-trace-events"')
    counters = list((out / "events").glob("*.counters.json"))
    assert len(counters) == 1 and json.loads(counters[0].read_text())["reason"] == "exit"
    assert m["stop"]["signals"] == ["SIGINT"] and stats["signals"] == ["SIGINT"]
    assert "server.log" == m["log"] and "serving fake-model" in (out / "server.log").read_text()
    assert not any(alive(pid) for pid in server.pids())
    assert f"dbo-trace report {out}" in proc.stderr
    report = run_cli("report", "--json", str(out))
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["ranks"][0]["steps"]


def test_record_server_that_dies_at_startup_fails_with_its_log_tail(tmp_path):
    server = Server(tmp_path, "die")
    out = tmp_path / "bundle"
    proc = record(out, server)
    assert proc.returncode == 1
    assert "exited with status 1 before it was healthy" in proc.stderr
    assert "CUDA out of memory (fake)" in proc.stderr
    m = manifest_of(out)
    assert m["status"] == "failed" and "CUDA out of memory" in m["reason"]
    assert "Traceback" not in proc.stderr


def test_record_server_that_never_gets_healthy_times_out_and_is_stopped(tmp_path):
    server = Server(tmp_path, "hang")
    out = tmp_path / "bundle"
    proc = record(out, server, "--startup-timeout", "3")
    assert proc.returncode == 1
    assert "not healthy" in proc.stderr and "--startup-timeout" in proc.stderr
    assert manifest_of(out)["status"] == "failed"
    assert server.pids() and not any(alive(pid) for pid in server.pids())


def test_record_escalates_to_sigterm_when_the_server_ignores_sigint(tmp_path):
    server = Server(tmp_path, "ignore-sigint")
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "2", "--warmup-prompts", "0", "--grace", "8")
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["stop"]["signals"] == ["SIGINT", "SIGTERM"]
    assert server.stats()["signals"] == ["SIGTERM"]
    assert not any(alive(pid) for pid in server.pids())


def test_record_server_dying_mid_load_fails_and_keeps_the_bundle(tmp_path):
    server = Server(tmp_path, "die-midrun")
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "20", "--concurrency", "1", "--warmup-prompts", "0")
    assert proc.returncode == 1
    assert "during the profiled load" in proc.stderr and "engine core died (fake)" in proc.stderr
    assert manifest_of(out)["status"] == "failed"
    assert not any(alive(pid) for pid in server.pids())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_record_interrupted_leaves_an_incomplete_bundle_and_no_process(tmp_path, sig):
    server = Server(tmp_path, "slow")
    out = tmp_path / "bundle"
    cmd = record_argv(out, server, "--num-prompts", "100", "--concurrency", "1", "--warmup-prompts", "0")
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "Profiler started" in log.read_text()):
        time.sleep(0.1)
    time.sleep(0.3)  # mid-load: the profiler is on
    rec.send_signal(sig)
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 130, err
    m = manifest_of(out)
    assert m["status"] == "incomplete" and "interrupted" in m["reason"]
    stats = server.stats()
    # The profile window was closed on the way out, so the server wrote its traces.
    assert stats["start_profile"] == 1 and stats["stop_profile"] == 1
    assert m["traces"] == ["traces/fake_rank0.pt.trace.json.gz"]
    assert not any(alive(pid) for pid in server.pids())
    assert "Traceback" not in err


def test_record_refuses_a_non_empty_out_and_changes_nothing(tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2
    assert proc.stderr.startswith("dbo-trace: error: ") and "not empty" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "keep"


def test_record_manifest_holds_no_secret(tmp_path):
    server = Server(tmp_path, extra=("--api-key", "sk-planted-secret"))
    out = tmp_path / "bundle"
    env = {**os.environ, "HF_TOKEN": "hf_planted_secret", "VLLM_TEST_URL": "http://user:pw-planted@host/x"}
    argv = record_argv(out, server, "--num-prompts", "1", "--warmup-prompts", "0")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (out / "manifest.json").read_text()
    for secret in ("sk-planted-secret", "hf_planted_secret", "pw-planted"):
        assert secret not in text
    m = json.loads(text)
    assert m["env"]["HF_TOKEN"] == "<redacted>"
    assert m["command"][m["command"].index("--api-key") + 1] == "<redacted>"


def test_a_failed_recording_leaks_no_secret_to_the_manifest_or_the_terminal(tmp_path):
    """The failure path copies the server's last lines and error bodies: every planted secret must be
    masked there, by its shape or because the run's own secret values are known."""
    key = "abc123planted-argv-key"
    server = Server(tmp_path, behaviour="die-leaky", extra=("--api-key", key))
    out = tmp_path / "bundle"
    secrets = {
        "HF_TOKEN": "hf_plantedtokenvalue123456",
        "HF_HUB_PASS": "planted-hub-pass-99",
        "MY_BEARER": "plantedbearer0987654321",
        "MODEL_URL": "https://bob:p@ss-planted@models.example/m",
    }
    env = {**os.environ, **secrets}
    proc = subprocess.run(record_argv(out, server), capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    text = (out / "manifest.json").read_text()
    assert "last lines" in json.loads(text)["reason"]  # the tail is there, masked
    planted = [key, "plantedtokenvalue", "planted-hub-pass-99", "plantedbearer0987654321", "p@ss-planted", "ss-planted"]
    for secret in planted:
        assert secret not in text, secret
        assert secret not in proc.stderr and secret not in proc.stdout, secret


def test_record_program_mode_runs_the_command_with_the_plugin_environment(tmp_path):
    out = tmp_path / "bundle"
    program = (
        "import os, shutil, sys\n"
        "shutil.copy(sys.argv[1], os.path.join(os.environ['DBO_TRACE_TRACES'], 'rank0.pt.trace.json.gz'))\n"
        "from dbo_trace.record.plugin import register; register()\n"
    )
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", program, str(sample_trace("overlap")))
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["mode"] == "program" and m["status"] == "complete" and m["exit_status"] == 0
    assert m["traces"] == ["traces/rank0.pt.trace.json.gz"] and len(m["events"]) == 1


def test_record_program_failure_is_reported_with_its_exit_status(tmp_path):
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", "print('boom here'); raise SystemExit(4)")
    assert proc.returncode == 1
    assert "exited with status 4" in proc.stderr and "boom here" in proc.stderr
    assert manifest_of(out)["status"] == "failed"


def test_record_a_missing_program_is_one_clear_line(tmp_path):
    proc = run_cli("record", "-o", str(tmp_path / "b"), "--", "no-such-program-xyz")
    assert proc.returncode == 1
    assert "no-such-program-xyz: cannot start" in proc.stderr and "Traceback" not in proc.stderr


def test_a_trickling_health_endpoint_does_not_hold_the_startup_deadline(tmp_path):
    """/health sends a header line a second forever: --startup-timeout is a wall-clock deadline, and
    a reply cut at a probe's deadline (after its status line, before the end of its headers) is not
    healthy. The stand-in starts without the plugin (loading it took 4-15 s on a loaded machine, and a
    server not yet listening never trickled: the test passed on a broken check), the deadline leaves
    it ample time to start, and its log shows it was serving during the wait."""
    server = Server(tmp_path, behaviour="trickle-health", extra=("--no-plugins",))
    out = tmp_path / "bundle"
    t0 = time.monotonic()
    proc = record(out, server, "--startup-timeout", "15", "--grace", "1")
    assert time.monotonic() - t0 < 90
    assert proc.returncode == 1 and "not healthy" in proc.stderr, proc.stderr
    assert "INFO serving fake-model" in (out / "server.log").read_text()  # it trickled, it did not just start late
    assert manifest_of(out)["status"] == "failed"


def test_a_garbage_health_status_line_is_not_healthy(tmp_path):
    server = Server(tmp_path, behaviour="garbage-health")
    out = tmp_path / "bundle"
    proc = record(out, server, "--startup-timeout", "3", "--grace", "1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert manifest_of(out)["status"] == "failed"


@pytest.mark.parametrize("behaviour", ["short-reply", "huge-tokens"])
def test_broken_completion_replies_end_the_load_instead_of_hanging(tmp_path, behaviour):
    """A reply cut short of its Content-Length, or completion_tokens 1e999: counted, never a dead worker."""
    server = Server(tmp_path, behaviour=behaviour)
    out = tmp_path / "bundle"
    proc = subprocess.run(
        record_argv(out, server, "--num-prompts", "3", "--warmup-prompts", "0", "--grace", "1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr
    m = manifest_of(out)
    assert m["status"] in ("complete", "failed")
    assert m["load_result"]["sent"] == 3
    if behaviour == "short-reply":
        assert proc.returncode == 1 and m["load_result"]["failed"] == 3
    else:
        assert m["load_result"]["completed"] == 3 and m["load_result"]["output_tokens"] == 3 * 64


def test_a_folder_name_with_markup_prints_as_itself(tmp_path):
    out = tmp_path / "b[/]x"
    program = (
        "import os, shutil, sys\nshutil.copy(sys.argv[1], os.path.join(os.environ['DBO_TRACE_TRACES'], 'r.pt.trace.json.gz'))\n"
    )
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", program, str(sample_trace("overlap")))
    assert proc.returncode == 0, proc.stderr
    assert "b[/]x" in proc.stderr


def test_a_grandchild_that_leaves_the_group_is_stopped_and_said(tmp_path):
    """A program whose child calls setsid() and outlives it: record tracks descendants and stops it."""
    pidfile = tmp_path / "grandchild.pid"
    program = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(3.0)\n"  # time for record to see its descendant, even on a stalled machine
    )
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--grace", "1", "--", sys.executable, "-c", program)
    grandchild = int(pidfile.read_text())
    try:
        assert not alive(grandchild), "the setsid grandchild outlived the recording"
        m = manifest_of(out)
        assert grandchild in m["stop"]["outside_group"] and m["stop"]["survivors"] == []
        assert "left the group" in proc.stderr
    finally:
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_a_full_disk_at_the_end_still_leaves_a_final_manifest(tmp_path):
    """The final manifest write fails (ENOSPC): record says so in one line, exits 1 (not a crash),
    and the manifest on disk ends in a final state, not 'recording'."""
    out = tmp_path / "bundle"
    script = (
        "import errno, sys\n"
        "from dbo_trace import cli\n"
        "from dbo_trace.record import recorder\n"
        "real = recorder._finish_manifest\n"
        "def full(*a, **k):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "recorder._finish_manifest = full\n"
        f"sys.argv = ['dbo-trace', 'record', '-o', {str(out)!r}, '--', sys.executable, '-c', 'pass']\n"
        "cli.run()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
    m = manifest_of(out)
    assert m["status"] == "failed" and "could not write the manifest" in m["reason"]


def test_a_program_that_wrote_no_traces_is_told_how_programs_write_them(tmp_path):
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", "pass")
    assert proc.returncode == 0
    assert "the program wrote no traces" in proc.stderr and "$DBO_TRACE_TRACES" in proc.stderr
