"""`dbo-trace doctor`: what it says about this Python, and about a vLLM it can and cannot instrument,
checked against stand-in vLLM packages laid out like vLLM 0.33's."""

import importlib.util
import itertools
import os
import subprocess
import sys

from conftest import ROOT, run_cli

UBATCHING = """
class UBatchContext:
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def _cpu_yield(self): pass
    def update_stream(self, stream): pass
"""


def _standin_vllm(root, version, with_ubatching):
    pkg = root / "vllm"
    (pkg / "v1" / "worker").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (pkg / "v1" / "__init__.py").write_text("")
    (pkg / "v1" / "worker" / "__init__.py").write_text("")
    if with_ubatching:
        (pkg / "v1" / "worker" / "ubatching.py").write_text(UBATCHING)
    return root


def _doctor(pythonpath, **env):
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "dbo_trace.cli", "doctor"], capture_output=True, text=True, env=full)


def _line(out, name):
    """The check's entry: its line and the lines it wraps onto (indented past the mark)."""
    lines = out.splitlines()
    (at,) = [i for i, x in enumerate(lines) if f" {name}: " in x]
    entry = [lines[at], *itertools.takewhile(lambda x: x.startswith(" " * 8), lines[at + 1 :])]
    return " ".join(x.strip() for x in entry)


def test_doctor_on_this_python():
    proc = run_cli("doctor")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("versions: ") and "dbo-trace" in lines[0]
    assert "ok" in _line(proc.stdout, "plugin entry point")  # installed with its vllm.general_plugins entry
    if importlib.util.find_spec("vllm") is None:
        assert "vLLM is not installed here" in _line(proc.stdout, "vLLM targets")
    if importlib.util.find_spec("torch") is None:
        assert "torch is not installed here" in _line(proc.stdout, "profile_all_threads")
    assert proc.returncode == (1 if "FAIL" in proc.stdout else 0)


def test_doctor_names_what_it_would_and_would_not_instrument(tmp_path):
    proc = _doctor(_standin_vllm(tmp_path, "0.33.0", with_ubatching=True))
    assert proc.returncode == 1, proc.stderr  # the wrapper, graph and profiler targets are missing
    for attr in ("__enter__", "__exit__", "_cpu_yield", "update_stream"):
        line = _line(proc.stdout, f"vllm.v1.worker.ubatching.UBatchContext.{attr}")
        assert "ok" in line and "would be instrumented" in line
    missing = _line(proc.stdout, "vllm.v1.worker.gpu_ubatch_wrapper.UBatchWrapper.__call__")
    assert "FAIL" in missing and "missing" in missing
    optional = _line(proc.stdout, "afd_plugin.v1.worker.ubatch_wrapper.AFDUBatchWrapper.__call__")
    assert "info" in optional and "optional, absent" in optional
    assert "vLLM version" not in proc.stdout  # 0.33 is in the table


def test_doctor_flags_an_untested_vllm_and_an_excluded_plugin(tmp_path):
    proc = _doctor(_standin_vllm(tmp_path, "0.1.0", with_ubatching=False), VLLM_PLUGINS="someone_else")
    assert proc.returncode == 1
    assert "0.1.0 is not in the tested table" in _line(proc.stdout, "vLLM version")
    assert "excludes" in _line(proc.stdout, "plugin entry point")


def test_doctor_without_vllm_fails_and_names_it(tmp_path):
    """Before: vLLM missing was "info" and exit 0, though record cannot work then."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('no vLLM in this Python')\n")
    proc = _doctor(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _line(proc.stdout, "vLLM targets")
    assert line.startswith("FAIL") and "vLLM is not installed here" in line and "dbo-trace record needs it" in line


def test_doctor_fits_80_columns(tmp_path):
    """Piped (no terminal) and with COLUMNS=80, every line fits 80 columns: the long target names and
    their details wrap under the name, the versions line at its commas. Before: lines of 100 and more."""
    root = _standin_vllm(tmp_path, "0.33.0", with_ubatching=True)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for extra in ({}, {"COLUMNS": "80"}):
        full = {**env, **extra, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
        proc = subprocess.run([sys.executable, "-m", "dbo_trace.cli", "doctor"], capture_output=True, text=True, env=full)
        lines = proc.stdout.splitlines()
        assert max(map(len, lines)) <= 80, [x for x in lines if len(x) > 80]
        assert any(len(x) > 70 for x in lines)  # the width is used, not a narrow fallback
        assert "optional, absent" in _line(proc.stdout, "afd_plugin.v1.worker.ubatch_wrapper.AFDUBatchWrapper.__call__")
        assert len([x for x in lines if x.startswith("  ok    vllm.v1.worker.ubatching.UBatchContext.")]) == 4
