"""The plugin's patching rules, without vLLM: a missing target is one warning naming it and the vLLM
version, the others still work; a failing hook turns itself off once and never reaches the host."""

import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = r"""
import json, logging, sys, types
logging.basicConfig(level=logging.WARNING, format="%(message)s")

# A stand-in module with UBatchContext's shape, importable by name.
mod = types.ModuleType("standin_ubatching")
class UBatchContext:
    def __init__(self):
        self.id, self.comm_stream, self.compute_stream = 0, "comm", "compute"
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def _cpu_yield(self): return "yielded"
    def update_stream(self, stream): return None
mod.UBatchContext = UBatchContext
sys.modules["standin_ubatching"] = mod

from dbo_trace.record import plugin
from dbo_trace.record.hooks import Target
from dbo_trace.record.vllm_targets import context_targets
bogus = Target("no_such_module_xyz", "Nothing", "__call__", lambda ins, original: original)
plugin.register(extra_targets=[*context_targets("standin_ubatching"), bogus])
ins = plugin.installed()
ctx = UBatchContext()
with ctx:
    result = ctx._cpu_yield()
# A hook that fails: the stream-phase hook meets an object whose comparison raises.
class Exploding:
    def __eq__(self, other): raise RuntimeError("boom")
ctx.update_stream(Exploding())
after = ctx._cpu_yield()
ins.log.flush()
print(json.dumps({"patched": ins.patched, "missing": ins.missing, "result": result, "after": after,
                  "enabled": ins.enabled}))
"""


def test_missing_target_warns_once_and_the_rest_work(tmp_path):
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    from dbo_trace.record.vllm_targets import OPTIONAL_TARGETS

    # With vLLM installed the optional AFD target may be missing too; it is not warned about.
    assert "no_such_module_xyz.Nothing.__call__" in out["missing"]
    assert set(out["missing"]) - {"no_such_module_xyz.Nothing.__call__"} <= OPTIONAL_TARGETS
    assert len([p for p in out["patched"] if p.startswith("standin_ubatching.")]) == 4
    warnings = [line for line in proc.stderr.splitlines() if "no_such_module_xyz" in line]
    assert len(warnings) == 1 and "not found in vLLM" in warnings[0]
    # The wrapped methods still return what the originals return, before and after a hook failed.
    assert out["result"] == "yielded" and out["after"] == "yielded"
    # The failing hook switched every hook off and said so once in the log.
    assert out["enabled"] is False
    log = next((tmp_path / "events").glob("*.jsonl")).read_text()
    assert log.count('"hook_error"') == 1 and "RuntimeError: boom" in log
