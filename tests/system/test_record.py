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
from conftest import ROOT, popen_interruptible, run_cli, sample_trace

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

    def __init__(
        self, tmp: Path, behaviour: str = "normal", extra: tuple[str, ...] = (), trace: bool = True, model: str = "fake-model"
    ):
        self.port = free_port()
        self.pidfile, self.stats_file = tmp / "pids", tmp / "stats.json"
        self.command = [
            sys.executable,
            str(FAKE),
            "serve",
            model,
            "--port",
            str(self.port),
            "--behaviour",
            behaviour,
            "--pidfile",
            str(self.pidfile),
            "--stats",
            str(self.stats_file),
            *(("--trace", str(sample_trace("overlap"))) if trace else ()),
            *extra,
        ]

    def pids(self) -> list[int]:
        return [int(x) for x in self.pidfile.read_text().split()] if self.pidfile.exists() else []

    def stats(self) -> dict:
        return json.loads(self.stats_file.read_text())


def record_argv(out: Path, server: Server, *options: str, quick: bool = True) -> list[str]:
    """`dbo-trace record` against the server; later options override the defaults here.

    quick: no timed repeats and no py-spy (`--repeats 0 --no-python-samples`), for the tests about
    something else (the defaults, three repeats of the load and py-spy over the profiled load, would
    quadruple their requests and attach a sampler to every stand-in).

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
        "180",  # the plugin's import of vLLM took 40 s on a machine loaded 6x over
        *(("--repeats", "0", "--no-python-samples") if quick else ()),
        *options,
        "--",
        *server.command,
    ]


def record(out: Path, server: Server, *options: str, quick: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(record_argv(out, server, *options, quick=quick), capture_output=True, text=True)


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
        "--no-python-samples",
        quick=False,
    )
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["status"] == "complete" and m["reason"] is None
    assert m["mode"] == "server" and m["model"] == "fake-model"
    stats = server.stats()
    # What the server saw: 2 warm-up, the default 3 timed repeats of 6 (streamed, the profiler off)
    # and 6 profiled requests, all 32 tokens in and 5 out, one bracket.
    assert stats["requests"] == 2 + 3 * 6 + 6 and stats["profiled_requests"] == 6 and stats["streamed"] == 3 * 6
    assert stats["prompt_lens"] == [32] * 26 and stats["max_tokens"] == [5] * 26
    assert [r["tool"] for r in m["repeats"]] == ["builtin"] * 3 and m["repeats_note"] is None
    assert [(r["index"], r["completed"], r["failed"], r["total_output_tokens"]) for r in m["repeats"]] == [(i, 6, 0, 30) for i in range(3)]
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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGQUIT])
def test_record_interrupted_leaves_an_incomplete_bundle_and_no_process(tmp_path, sig):
    """SIGQUIT too: its default (a core dump) left the server's group running and the manifest at "recording"."""
    server = Server(tmp_path, "slow")
    out = tmp_path / "bundle"
    cmd = record_argv(out, server, "--num-prompts", "100", "--concurrency", "1", "--warmup-prompts", "0")
    rec = popen_interruptible(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "server.log"
    deadline = time.monotonic() + 180  # the plugin alone took 40 s to load on a loaded machine
    while time.monotonic() < deadline and not (log.exists() and "Profiler started" in log.read_text()):
        time.sleep(0.1)
    time.sleep(0.3)  # mid-load: the profiler is on
    rec.send_signal(sig)
    try:
        _, err = rec.communicate(timeout=60)
    finally:
        if rec.poll() is None:
            rec.kill()
        if rec.returncode != 130:  # record died: leave no server behind a failed test
            _stop_all(*server.pids())
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


def test_a_google_key_printed_by_the_program_is_masked_in_the_reason_and_on_the_terminal(tmp_path):
    """Issue 38: a Google API key (AIza and 35 more, 39 characters) printed by the recorded program,
    in the ways a program prints one: bare, in a repr after an escaped newline, glued to a name."""
    key = "AIzaSyPLANTEDkey-0123456789_abcdefghijk"
    assert len(key) == 39
    program = f"print({key!r}); print(repr('maps:\\n' + {key!r})); print('KEY_' + {key!r}); raise SystemExit(2)"
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", program)
    assert proc.returncode == 1 and "exited with status 2" in proc.stderr
    reason = manifest_of(out)["reason"]
    assert reason.count("<redacted>") == 3, reason
    for text in (reason, (out / "manifest.json").read_text(), proc.stderr, proc.stdout):
        assert "PLANTEDkey" not in text and "0123456789_abcdefghijk" not in text, text


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
    assert time.monotonic() - t0 < 300  # the deadline holds (15 s); a probe that waited out the trickle never ends
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
    """A run with no trace is not "complete": nothing in it for `report` (status no_traces, exit 1)."""
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", "pass")
    assert proc.returncode == 1
    assert "the program wrote no traces" in proc.stderr and "$DBO_TRACE_TRACES" in proc.stderr
    m = manifest_of(out)
    assert m["status"] == "no_traces" and "$DBO_TRACE_TRACES" in m["reason"] and m["traces"] == []


# -- who answers, and what status a run ends in (issue 24: items 4, 8, 9, 10) -------------------------
def _wait_answering(port: int, timeout_s: float = 60.0) -> None:
    """Until something accepts connections on 127.0.0.1:port (a stand-in server takes seconds to start
    on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing answered on port {port} within {timeout_s} s")


def _stop_all(*pids: int) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_server_that_writes_no_traces_is_not_complete(tmp_path):
    server = Server(tmp_path, trace=False)
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "2", "--warmup-prompts", "0", "--trace-timeout", "3")
    assert proc.returncode == 1, proc.stderr
    m = manifest_of(out)
    assert m["status"] == "no_traces" and m["traces"] == [] and "wrote no trace" in m["reason"]
    assert "wrote no trace" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(alive(pid) for pid in server.pids())


def test_record_refuses_a_port_that_something_already_answers(tmp_path):
    """Another process serves the port: record says so in one line, exit 2, and makes nothing (before,
    it recorded the other server: "complete", exit 0, its model, no traces)."""
    foreign = Server(tmp_path / "foreign", model="foreign-model", trace=False)
    (tmp_path / "foreign").mkdir()
    other = subprocess.Popen(foreign.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_answering(foreign.port)
        ours = Server(tmp_path)
        ours.port = foreign.port
        ours.command[ours.command.index("--port") + 1] = str(foreign.port)
        out = tmp_path / "bundle"
        proc = record(out, ours, "--num-prompts", "1", "--warmup-prompts", "0", "--trace-timeout", "3")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("dbo-trace: error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert f"127.0.0.1:{foreign.port} is already in use" in proc.stderr and "--port" in proc.stderr
        assert not out.exists() and not ours.pidfile.exists()  # nothing made, nothing started
        assert other.poll() is None  # the other server is left alone
    finally:
        other.kill()
        other.wait()


def test_a_health_answer_from_outside_the_servers_tree_is_refused(tmp_path):
    """The port was free at start, but another process answers /health (the recorded command never
    listens): the listener is not the server's or a descendant's, so the run fails (before, it went on
    and recorded the other server)."""
    port = free_port()
    foreign = Server(tmp_path / "foreign", model="foreign-model", trace=False)
    (tmp_path / "foreign").mkdir()
    foreign.command[foreign.command.index("--port") + 1] = str(port)
    out = tmp_path / "bundle"
    argv = [
        *record_argv(
            out, Server(tmp_path), "--url", f"http://127.0.0.1:{port}", "--trace-timeout", "3", "--startup-timeout", "90"
        ),
    ]
    argv = argv[: argv.index("--") + 1] + [sys.executable, "-c", "import time; time.sleep(120)"]
    rec = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    other = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "server.log").exists():  # past record's port check
            time.sleep(0.05)
        other = subprocess.Popen(foreign.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, err = rec.communicate(timeout=120)
    finally:
        if rec.poll() is None:
            rec.kill()
        if other is not None:
            other.kill()
            other.wait()
    assert rec.returncode == 1, err
    assert "outside the server's process tree" in err and f"port {port}" in err and "Traceback" not in err
    m = manifest_of(out)
    assert m["status"] == "failed" and "model" not in m and "outside the server's process tree" in m["reason"]


def test_the_port_listener_of_the_recorded_server_is_verified(tmp_path):
    """The normal path: the listening socket belongs to the server, and the manifest says it was checked."""
    server = Server(tmp_path)
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "1", "--warmup-prompts", "0")
    assert proc.returncode == 0, proc.stderr
    assert manifest_of(out)["listener_verified"] is True


def _patched_record(out: Path, patch: str, *command: str) -> subprocess.CompletedProcess:
    """record (program mode) in a Python whose recorder has `patch` applied first."""
    script = (
        "import sys\n"
        "from dbo_trace import cli\n"
        "from dbo_trace.record import recorder\n"
        f"{patch}\n"
        f"sys.argv = ['dbo-trace', 'record', '-o', {str(out)!r}, '--grace', '5', '--', *{list(command)!r}]\n"
        "cli.run()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_an_internal_error_leaves_a_failed_manifest_and_no_process(tmp_path):
    """A bug while the program runs: the manifest says failed (it started as complete before, and said
    so), the program is stopped, the CLI prints its one internal-error line, exit 3."""
    pidfile = tmp_path / "program.pid"
    program = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    patch = (
        "import os, time\n"
        "def broken(child, ui):\n"  # once the program runs, a bug
        f"    while not os.path.exists({str(pidfile)!r}) and time.sleep(0.05) is None: pass\n"
        "    raise RuntimeError('planted bug')\n"
        "recorder._wait_program = broken\n"
    )
    out = tmp_path / "bundle"
    proc = _patched_record(out, patch, sys.executable, "-c", program)
    pid = int(pidfile.read_text())
    try:
        assert proc.returncode == 3, proc.stderr
        assert "internal error: RuntimeError: planted bug" in proc.stderr and "Traceback" not in proc.stderr
        m = manifest_of(out)
        assert m["status"] == "failed" and "RuntimeError: planted bug" in m["reason"]
        assert not alive(pid)
    finally:
        _stop_all(pid)


def test_a_counter_that_is_not_a_number_does_not_break_the_final_manifest(tmp_path):
    """A counters file with "many", null and a list among its values (before: the final write crashed,
    exit 3, and the manifest stayed "recording"): the numbers are summed, the rest left out."""
    program = (
        "import json, os, shutil, sys\n"
        "shutil.copy(sys.argv[1], os.path.join(os.environ['DBO_TRACE_TRACES'], 'rank0.pt.trace.json.gz'))\n"
        "body = {'format': 'dbo-trace-counters', 'version': 1, 'pid': 1, 'reason': 'exit',\n"
        "        'counters': {'steps.eager_microbatched': 5, 'ubatch.yields': 'many', 'x': None, 'y': [1], 'z': True}}\n"
        "events = os.path.join(os.environ['DBO_TRACE_DIR'], 'events')\n"
        "open(os.path.join(events, 'h-1.counters.json'), 'w').write(json.dumps(body))\n"
    )
    out = tmp_path / "bundle"
    proc = run_cli("record", "-o", str(out), "--", sys.executable, "-c", program, str(sample_trace("overlap")))
    assert proc.returncode == 0, proc.stderr
    m = manifest_of(out)
    assert m["status"] == "complete" and m["counters"] == {"steps.eager_microbatched": 5}


def test_a_models_reply_nested_past_the_parser_fails_cleanly(tmp_path):
    """/v1/models nested 100,000 deep (before: exit 3 and a manifest saying "complete")."""
    server = Server(tmp_path, behaviour="deep-models")
    out = tmp_path / "bundle"
    proc = record(out, server, "--num-prompts", "1", "--warmup-prompts", "0", "--grace", "5")
    assert proc.returncode == 1, proc.stderr
    assert "named no model" in proc.stderr and "Traceback" not in proc.stderr
    assert manifest_of(out)["status"] == "failed"
    assert not any(alive(pid) for pid in server.pids())


def test_a_second_record_into_the_same_folder_is_refused(tmp_path):
    """Two records into one folder at once both passed the emptiness check, then wrote into it together.
    The second here skips the CLI's check (as when both check at the same moment): the folder's claim
    (its manifest created exclusively) refuses it in one line, and the first's bundle is untouched."""
    out = tmp_path / "bundle"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dbo_trace.cli",
            "record",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "program.log").exists():
            time.sleep(0.05)
        before = (out / "manifest.json").read_text()
        second = _patched_record(
            out,
            "from dbo_trace.commands import common; common.refuse_nonempty = lambda out: None",
            sys.executable,
            "-c",
            "print('second')",
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith("dbo-trace: error: ") and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert "another recording is writing there" in second.stderr
        assert (out / "manifest.json").read_text() == before and "second" not in (out / "program.log").read_text()
        first.send_signal(signal.SIGTERM)  # the first goes on alone; ended here, not waited for
        first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130 and manifest_of(out)["status"] == "incomplete"


def test_record_claims_a_folder_once_against_a_simultaneous_start(tmp_path):
    """The claim itself, twice at once on the same empty folder: exactly one wins."""
    import threading

    from dbo_trace.record.recorder import Refused, claim_folder

    for attempt in range(20):
        out = tmp_path / f"b{attempt}"
        results: list[str] = []
        barrier = threading.Barrier(2)

        def claim(out: Path, results: list[str], barrier: threading.Barrier) -> None:
            barrier.wait()
            try:
                claim_folder(out)
                results.append("won")
            except Refused:
                results.append("refused")

        threads = [threading.Thread(target=claim, args=(out, results, barrier)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["refused", "won"], results


def _shapes():
    from test_record_parts import SECRET_SHAPES

    return SECRET_SHAPES


def test_secret_shapes_in_a_failed_servers_last_lines_are_masked(tmp_path):
    """The failure path: the server's last lines hold every shape (from a variable record does not
    learn values from), and reach the manifest's reason and the terminal masked."""
    shapes = _shapes()
    server = Server(tmp_path, behaviour="die-shapes", extra=("--no-plugins",))
    out = tmp_path / "bundle"
    env = {**os.environ, "LEAK_LINES": "\n".join(text for text, _ in shapes)}
    proc = subprocess.run(record_argv(out, server), capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stderr
    text = (out / "manifest.json").read_text()
    assert "last lines" in json.loads(text)["reason"] and "<redacted>" in json.loads(text)["reason"]
    for _, secrets in shapes:
        for secret in secrets:
            assert secret not in text, secret
            assert secret not in proc.stderr and secret not in proc.stdout, secret


def test_secret_shapes_in_a_complete_recordings_command_and_environment_are_masked(tmp_path):
    """The success path: every shape in the command line (as one argument each) and in a recorded
    variable; the manifest (command, user_command, env) and the terminal hold none of them."""
    shapes = _shapes()
    notes = [item for text, _ in shapes for item in ("--note", text)]
    server = Server(tmp_path, extra=tuple(notes))
    out = tmp_path / "bundle"
    env = {**os.environ, "VLLM_PLANTED_NOTE": " ; ".join(text for text, _ in shapes)}
    argv = record_argv(out, server, "--num-prompts", "1", "--warmup-prompts", "0")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (out / "manifest.json").read_text()
    m = json.loads(text)
    assert m["status"] == "complete" and "VLLM_PLANTED_NOTE" in m["env"]
    for _, secrets in shapes:
        for secret in secrets:
            assert secret not in text, secret
            assert secret not in proc.stderr and secret not in proc.stdout, secret
