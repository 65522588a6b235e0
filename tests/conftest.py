import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
# The tests live in folders by kind (tests/README.md) and import the helpers, the references and one
# another's fixtures by module name: every folder is on the path, whatever the order of collection.
for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("*.py"))):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
SAMPLES = ROOT / "samples"
# The shipped recordings of one run each; a load sweep's folder (sweep.json: many runs) is read as a
# sweep (tests/independent/test_sweep_sample.py) and has its own goldens.
RUN_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not (p / "sweep.json").exists())
SWEEP_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if (p / "sweep.json").is_file())
VARIANTS = ["serial", "overlap", "overlap-stock-profiler", "graph", "hostbound", "overlap-no-hooks"]


def unwrapped(text: str, indent: str = "  ") -> list[str]:
    """Wrapped output as whole texts: a line that starts with indent continues the one before (a
    warning on stderr and top's records wrap to the width, 80 where piped, their later lines
    indented; they break only between words, so a space joins them back)."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith(indent) and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def require_module(name: str) -> None:
    """Skip without the module, unless CI said it installed it (DBO_TRACE_REQUIRE_RECORD_DEPS=1): then fail."""
    if importlib.util.find_spec(name) is not None:
        return
    if os.environ.get("DBO_TRACE_REQUIRE_RECORD_DEPS"):
        raise RuntimeError(f"{name} is not importable, but DBO_TRACE_REQUIRE_RECORD_DEPS is set (see .ci/run)")
    pytest.skip(f"{name} is not installed (see .ci/run for the recording test environment)", allow_module_level=True)


def sample_trace(variant: str) -> Path:
    (trace,) = sorted((SAMPLES / variant / "traces").glob("*.json.gz"))
    return trace


def manifest(variant: str) -> dict:
    return json.loads((SAMPLES / variant / "manifest.json").read_text())


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process, through click's test runner: the same status, stdout and stderr as
    the console script (errors are turned into their line by the command group itself). A crash
    raises here, with its traceback, instead of becoming the console script's one-line message."""
    from click.testing import CliRunner

    from dbo_trace.cli import main

    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), prog_name="dbo-trace")
    finally:
        os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def run_cli_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a separate process (`python -m dbo_trace.cli`): for what only a process shows
    (signals, the console script's handling of crashes, a fresh interpreter's imports)."""
    return subprocess.run([sys.executable, "-m", "dbo_trace.cli", *args], capture_output=True, text=True, cwd=cwd)


def popen_interruptible(argv: list[str], **kwargs) -> subprocess.Popen:
    """A process a test will interrupt with SIGINT (Ctrl-C), started with SIGINT at its default
    whatever this run inherited. A shell's background job ignores SIGINT, an ignored signal stays
    ignored across exec, and Python then installs no KeyboardInterrupt handler: the Ctrl-C tests
    would send a signal nobody sees. A handled signal is reset to its default by exec, so SIGINT is
    handled here while the child starts (this process's own disposition is put back at once)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return subprocess.Popen(argv, **kwargs)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def report_json(*args: str) -> dict:
    proc = run_cli("report", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def reason_texts(verdict) -> list[str]:
    """A verdict's reasons in words: a JSON document's ({kind, borderline, text}), or a report's
    typed reasons as render/words/verdict.py words them."""
    if isinstance(verdict, dict):
        return [r["text"] for r in verdict["reasons"]]
    from dbo_trace.render.words.verdict import reason_text

    return [reason_text(r) for r in verdict.reasons]


def assert_matches_headline(doc: dict, ref: dict) -> None:
    """A one-rank vLLM recording's `report --json` against reference.headline of its trace: the steps,
    GPU utilization, host idle (of the window and in steps), kernels, and each phase's figures."""
    assert len(doc["steps"]) == ref["steps"]
    assert doc["gpu"]["utilization"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-4)
    assert doc["host"]["idle_fraction"] == pytest.approx(ref["host_idle"] / ref["window"], abs=1e-4)
    assert doc["ranks"][0]["host_test"]["fraction"] == pytest.approx(ref["host_idle_in_steady"] / ref["in_steady"], abs=1e-4)
    assert doc["ranks"][0]["time_in_steps"]["window_us"] == pytest.approx(ref["in_steps"], abs=0.01)
    assert [s["step_us"] for s in doc["steps"]] == pytest.approx(ref["periods"], abs=0.01)
    starts = sorted(s["start_us"] for s in doc["steps"])  # periods add up to the first start .. the last window's end
    assert sum(ref["periods"]) == pytest.approx(starts[-1] - starts[0] + doc["steps"][-1]["window_us"], abs=0.05)
    assert [s["stall"]["cause"] if s["stall"] else None for s in doc["steps"]] == ref["stalls"]
    assert doc["gpu"]["kernels"] == ref["kernels"]
    assert set(doc["phases"]) == set(ref["phases"])
    for phase, want in ref["phases"].items():
        got = doc["phases"][phase]
        assert got["steps"] == want["steps"]
        assert got["stalls"] == want["stalls"]
        assert got["median_step_us"] == pytest.approx(want["median_step_us"], abs=0.01)
        assert got["gpu_utilization"] == pytest.approx(want["gpu_utilization"], abs=1e-4)
        assert got["host_idle_fraction"] == pytest.approx(want["host_idle_fraction"], abs=1e-4)


@pytest.fixture(scope="session")
def sample_reports():
    """`report --json` of every sample bundle, computed once."""
    return {v: report_json(str(SAMPLES / v)) for v in VARIANTS}


@pytest.fixture(scope="session", autouse=True)
def torch_caches_in_the_runs_temporary_folder(tmp_path_factory):
    """torch's inductor cache (made by importing vLLM in the plugin's and demo's child processes)
    goes under this run's temporary folder, removed with it, not into $TMPDIR/torchinductor_$USER."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("torchinductor"))
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
