"""`dbo-trace top` piped or redirected writes plain lines as each refresh comes (not a live table
that shows nothing until killed), and without a folder reads $DBO_TRACE_DIR. The expected figures
come from the counters file itself (json.load)."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import SAMPLES, popen_interruptible, run_cli, unwrapped

RECORDED = SAMPLES / "recorded-overlap"


def records(text: str) -> list[str]:
    """The plain output's records: a line that starts with a space continues the one before (each
    record is wrapped to the width, 80 where piped)."""
    return unwrapped(text, " ")


def counters_of(folder):
    (path,) = sorted((folder / "events").glob("*.counters.json"))
    return json.loads(path.read_text())


def recording_in_progress(tmp_path):
    """The recorded sample as record leaves it while the server runs: its manifest says "recording"."""
    live = tmp_path / "live"
    shutil.copytree(RECORDED / "events", live / "events")
    manifest = json.loads((RECORDED / "manifest.json").read_text())
    (live / "manifest.json").write_text(json.dumps({**manifest, "status": "recording"}))
    return live


def test_piped_top_writes_plain_lines_before_it_is_stopped(tmp_path):
    body = counters_of(RECORDED)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbo_trace.cli", "top", str(recording_in_progress(tmp_path)), "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 60
        # two refreshes (a title and a process each) and the next record's first line, which ends the second
        while len([line for line in lines if not line.startswith(" ")]) < 5 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        assert proc.poll() is None  # still running, and its lines already arrived
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    found = records("\n".join(lines))[:4]
    assert len(found) == 4, lines
    steps = body["counters"]["steps.eager_microbatched"]
    rows = [line for line in found if " pid: " in line]
    assert len(rows) == 2 and all(f"pid: {body['pid']}; steps: {steps};" in r for r in rows)
    assert all("\x1b" not in line and "│" not in line and line == line.rstrip() and len(line) <= 80 for line in lines)


def test_top_of_a_finished_recording_shows_its_final_counters_once():
    """Before: top on a recording that had finished (its manifest's status complete) refreshed
    forever, its counters never to change. Now it prints them once, says so, and exits 0."""
    body = counters_of(RECORDED)
    proc = subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "top", str(RECORDED), "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if " pid: " in line]
    assert len(rows) == 1 and f"pid: {body['pid']}; steps: {body['counters']['steps.eager_microbatched']};" in rows[0]
    assert proc.stderr == "dbo-trace top: the recording has finished; its final counters, once\n"


def test_once_piped_is_plain_lines_too():
    proc = run_cli("top", str(RECORDED), "--once")
    assert proc.returncode == 0, proc.stderr
    body = counters_of(RECORDED)
    assert f"pid: {body['pid']}; steps: {body['counters']['steps.eager_microbatched']};" in proc.stdout
    assert "│" not in proc.stdout


def test_top_without_a_folder_reads_dbo_trace_dir(monkeypatch):
    monkeypatch.setenv("DBO_TRACE_DIR", str(RECORDED))
    proc = run_cli("top", "--once")
    assert proc.returncode == 0, proc.stderr
    assert f"reading $DBO_TRACE_DIR ({RECORDED})" in proc.stderr
    assert f"pid: {counters_of(RECORDED)['pid']};" in proc.stdout
    monkeypatch.delenv("DBO_TRACE_DIR")
    missing = run_cli("top", "--once")
    assert missing.returncode == 2 and "$DBO_TRACE_DIR is not set" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_top_help_names_the_default_folder():
    text = run_cli("top", "--help").stdout
    assert "without it, $DBO_TRACE_DIR" in text and "plain lines" in text


def test_top_of_a_finished_bundle_without_counters_says_so_and_stops(tmp_path):
    """Before: `top samples/overlap` (a demo bundle: a manifest without a status, no counters)
    printed "no counters yet" every second until killed; then three messages that disagreed (a
    title asking whether this is DBO_TRACE_DIR, "its final counters, once", an error) and exit 1,
    where bad input exits 2. Now one line on stderr, nothing on stdout, exit 2, at once."""
    proc = subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "top", str(SAMPLES / "overlap"), "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (
        f"dbo-trace: error: {SAMPLES / 'overlap'}: a finished recording (written whole) with no live counters "
        "(the plugin writes them only where DBO_TRACE_DIR was set in the server's environment); "
        "`dbo-trace report` reads its traces\n"
    )


def test_top_of_a_finished_recording_says_when_it_ended_not_an_age():
    """Before: "age: 978 s" (the counters file's age today) for a recording that ended days ago.
    Now the title says it finished and when (the manifest's times.ended), and age is "-"."""
    manifest = json.loads((SAMPLES / "afd-graphs-dbo" / "manifest.json").read_text())
    assert manifest["times"]["ended"] == "2026-12-01T22:10:48+00:00"
    proc = run_cli("top", str(SAMPLES / "afd-graphs-dbo"))
    assert proc.returncode == 0, proc.stderr
    title, row = [line.split(" ", 1)[1] for line in records(proc.stdout)]
    assert "(finished: complete, ended 2026-12-01 22:10:48 UTC)" in title
    assert row.endswith("; age: -")


def test_top_of_a_recording_whose_processes_ran_no_dbo_step_says_what_is_missing():
    """Before: `top samples/afd-eager` (DBO and graphs off: its one model process counted no
    microbatched step and no replay) printed only a header. Now the title says what is missing and why."""
    proc = run_cli("top", str(SAMPLES / "afd-eager"))
    assert proc.returncode == 0, proc.stderr
    (title,) = records(proc.stdout)
    assert title.endswith(
        "(1 process(es) wrote counters, none a microbatched step or a graph replay: "
        "DBO and CUDA graphs were off, or no step ran)"
    )


@pytest.mark.parametrize("ignored", [False, True], ids=["sigint-as-inherited", "sigint-ignored"])
def test_ctrl_c_stops_top_with_130(tmp_path, ignored):
    """Also where this run ignores SIGINT, as a shell's background job does (issue 61 item 16): the
    process a Ctrl-C test starts must see its Ctrl-C whatever the test run inherited."""
    live = recording_in_progress(tmp_path)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignored else None
    try:
        proc = popen_interruptible(
            [sys.executable, "-m", "dbo_trace.cli", "top", str(live), "--interval", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout.readline()  # running
        proc.send_signal(2)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()


SWEEP = SAMPLES / "afd-sweep"


def top_process(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """top in a process of its own, killed past timeout (top that loops must fail the test, not hang it)."""
    return subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "top", *args, "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_top_of_a_finished_sweep_arm_shows_its_counters_once():
    """Issue 61 item 13: a load sweep's arm folder (its server's counters, no manifest of its own) was
    taken for a live server: "age: N s", refreshed until killed. Its loads are all done in sweep.json:
    one summary and exit 0."""
    proc = top_process(str(SWEEP / "graphs-dbo"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    title, *rows = records(proc.stdout)
    assert "(finished: a sweep's arm, its loads 3 complete)" in title
    assert len(rows) == 1 and rows[0].endswith("; age: -")
    assert proc.stderr == "dbo-trace top: the recording has finished; its final counters, once\n"


def test_top_of_a_sweep_with_no_load_live_says_so_and_ends():
    """Issue 61 item 13: `top samples/afd-sweep` printed "(no counters yet: ...)" until killed; its
    counters are its arms' and every run is finished. One line, exit 0, within 10 s."""
    started = time.monotonic()
    proc = top_process(str(SWEEP), timeout=30)
    assert time.monotonic() - started < 10 and proc.returncode == 0, proc.stderr
    assert records(proc.stdout) == [
        f"dbo-trace top {SWEEP}: a load sweep with no load live (its runs: 6 complete); "
        f"`dbo-trace report {SWEEP}` summarises it"
    ]


def test_top_of_a_sweep_shows_the_arm_whose_load_is_pending(tmp_path):
    """A sweep under way: sweep.json lists graphs-dbo's c64 as pending, so graphs-dbo's server is the
    live one; top reads its counters (here once) and its arm folder is not taken for a finished one."""
    sweep = tmp_path / "sweep"
    spec = json.loads((SWEEP / "sweep.json").read_text())
    for run in spec["runs"]:
        if (run["arm"], run["load"]) == ("graphs-dbo", "c64"):
            run["status"] = "pending"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps(spec))
    for arm in ("graphs", "graphs-dbo"):
        shutil.copytree(SWEEP / arm / "events", sweep / arm / "events")
    proc = run_cli("top", "--once", str(sweep))
    assert proc.returncode == 0, proc.stderr
    assert records(proc.stderr) == [f"dbo-trace top: {sweep} is a load sweep; its live arm is graphs-dbo (load c64)"]
    bodies = [json.loads(p.read_text()) for p in (SWEEP / "graphs-dbo" / "events").glob("*.counters.json")]
    (engine,) = [b["pid"] for b in bodies if any(k.startswith("steps.") for k in b["counters"])]  # the API server runs no step
    assert f"pid: {engine};" in proc.stdout
    from dbo_trace.commands.top import finished

    assert finished(sweep / "graphs-dbo") is None and finished(sweep / "graphs") == "a sweep's arm, its loads 3 complete"


def test_no_wait_per_microbatch_above_its_step_without_its_basis():
    """Issue 61 item 13: "wait/step per ubatch: ub0 93.31, ub1 954.97 ms, 33 steps" beside 9.6 ms
    steps: the waits are per eager or capturing step (the first, with its compile, takes seconds), and
    the cell now says so wherever it shows a wait."""
    proc = run_cli("top", "--once", str(SAMPLES / "afd-pair-graphs-dbo"))
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in records(proc.stdout) if " pid: " in line]
    cell = row[row.index("wait/step per ubatch:") : row.index("; age:")]
    assert cell == (
        "wait/step per ubatch: ub0 93.31, ub1 954.97 ms a step, over its 33 eager or capturing steps (their time not in "
        "these counters; a replay runs no thread)"
    )


@pytest.mark.parametrize("folder", ["afd-pair-graphs-dbo", "afd-graphs-dbo", "afd-sweep", "afd-eager", "recorded-overlap"])
def test_top_once_piped_fits_80_columns(folder, monkeypatch):
    """Issue 61's leftovers: `top --once` piped (or at COLUMNS=80) printed a process's record on one line of
    376 columns, a title of 93 and a sweep's line of 138. Each is wrapped to 80 now, its later lines indented."""
    monkeypatch.setenv("COLUMNS", "80")
    proc = run_cli("top", "--once", str(SAMPLES / folder))
    assert proc.returncode == 0, proc.stderr
    assert [line for line in (proc.stdout + proc.stderr).splitlines() if len(line) > 80] == []
    assert all(line.startswith(("dbo-trace top", "  ")) or line[:2].isdigit() for line in proc.stdout.splitlines())
