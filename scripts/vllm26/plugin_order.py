"""Load vLLM's general plugins the way vLLM does, in both orders, and check that the dbo-trace plugin
and the AFD plugin each did their work without undoing the other's.

    python3 scripts/vllm26/plugin_order.py        # one fresh process per order; exit 1 if a check fails

Each order runs in a fresh Python (a plugin registers once per process): `importlib.metadata.entry_points`
is made to list `vllm.general_plugins` in that order, then `vllm.plugins.load_general_plugins()`, vLLM's
own loader (the one every vLLM process calls), loads and calls them. With DBO_TRACE_DIR set, checked:
- dbo-trace: its instrumentation installed, every target of this vLLM patched (the AFD plugin's
  `AFDUBatchWrapper.__call__` among them), none missing, and each patched attribute still dbo-trace's
  wrapper after the AFD plugin ran;
- AFD: `register_afd` finished (`afd_plugin._registered`), its AFD* model classes are in vLLM's
  registry, and its compatibility patches (EngineCore.__init__, set_forward_context) are in place.
Prints one JSON line per order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

GROUP = "vllm.general_plugins"
ORDERS = (("dbo_trace", "afd"), ("afd", "dbo_trace"))


def child(order: list[str]) -> dict:
    import importlib.metadata as md

    real = md.entry_points

    def ordered(**params):
        eps = real(**params)
        if params.get("group") != GROUP:
            return eps
        rank = {name: i for i, name in enumerate(order)}
        return md.EntryPoints(sorted(eps, key=lambda ep: rank.get(ep.name, len(rank))))

    md.entry_points = ordered
    out: dict = {"order_asked": order, "discovered": [ep.name for ep in ordered(group=GROUP)]}

    from vllm.plugins import load_general_plugins

    load_general_plugins()

    from dbo_trace.record import plugin as dbo_plugin
    from dbo_trace.record.vllm_targets import targets_for, vllm_version

    ins = dbo_plugin.installed()
    targets, _ = targets_for(vllm_version() or "")
    still_ours = {}
    for target in targets:
        try:
            cls, attr = target.resolve()
            # dbo-trace's wrappers are closures made in vllm_targets (functools.wraps copies the original's
            # name and module, not its code); an attribute replaced after them would have other code
            code = getattr(attr, "__code__", None)
            still_ours[target.name] = code is not None and code.co_filename.endswith("vllm_targets.py")
        except Exception as exc:
            still_ours[target.name] = f"{type(exc).__name__}: {exc}"
    out["dbo_trace"] = {
        "installed": ins is not None,
        "patched": list(ins.patched) if ins else [],
        "missing": list(ins.missing) if ins else [],
        "wrappers_in_place": still_ours,
    }

    import afd_plugin

    def probe(fn):  # one check's value, or why it could not be read (so one failure hides no other)
        try:
            return fn()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:300]

    def afd_archs():
        from vllm.model_executor.models import ModelRegistry

        return sorted(a for a in ModelRegistry.get_supported_archs() if a.startswith("AFD"))

    def patched_by_afd(module: str, qualname: str) -> bool:
        obj = __import__(module, fromlist=["_"])
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj.__module__.startswith("afd_plugin.")

    out["afd"] = {
        "version": getattr(afd_plugin, "__version__", None),
        "registered": bool(getattr(afd_plugin, "_registered", False)),
        "model_archs": probe(afd_archs),
        "engine_core_init_patched": probe(lambda: patched_by_afd("vllm.v1.engine.core", "EngineCore.__init__")),
        "set_forward_context_patched": probe(lambda: patched_by_afd("vllm.forward_context", "set_forward_context")),
    }
    afd_target = "afd_plugin.v1.worker.ubatch_wrapper.AFDUBatchWrapper.__call__"
    out["ok"] = bool(
        ins is not None
        and not ins.missing
        and afd_target in ins.patched
        and all(v is True for v in still_ours.values())
        and out["afd"]["registered"]
        and "AFDDeepseekV2ForCausalLM" in out["afd"]["model_archs"]
        and out["afd"]["engine_core_init_patched"] is True
        and out["afd"]["set_forward_context_patched"] is True
    )
    return out


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(child(sys.argv[2].split(","))), flush=True)
        return 0
    failed = 0
    for order in ORDERS:
        with tempfile.TemporaryDirectory(prefix="plugin-order-") as tmp:
            env = dict(os.environ, DBO_TRACE_DIR=tmp)
            env.pop("VLLM_PLUGINS", None)
            proc = subprocess.run([sys.executable, __file__, "--child", ",".join(order)], env=env, capture_output=True, text=True)
        lines = [ln[7:] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(
                json.dumps({"order_asked": list(order), "ok": False, "exit": proc.returncode, "stderr_tail": proc.stderr[-2000:]})
            )
            failed += 1
            continue
        result = json.loads(lines[-1])
        print(json.dumps(result))
        failed += not result["ok"]
    print(f"plugin order: {len(ORDERS) - failed} of {len(ORDERS)} orders passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
