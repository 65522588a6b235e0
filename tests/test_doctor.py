"""`dbo-trace doctor`: what it says about this Python, and about a vLLM it can and cannot instrument,
checked against stand-in vLLM packages laid out like vLLM 0.33's."""

import importlib.util
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
    (line,) = [x for x in out.splitlines() if f" {name}: " in x]
    return line


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
