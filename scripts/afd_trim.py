#!/usr/bin/env python3
"""An AFD bundle's attention trace trimmed for tests/data (plain Python, no dbo-trace code):

    python3 scripts/afd_trim.py BUNDLE OUT

Kept: every GPU kernel and copy (args: stream, correlation, device), every CUDA runtime and driver
call (args: correlation), vLLM's annotations, the CPU operators named `vllm::*` (the AFD plugin's
sends, receives and yields), the metadata; dropped: the flow events (the reader joins calls and
kernels on the correlation id), the other CPU operators, the other args. The manifest keeps what
describes the run (command, settings, roles, GPU sharing, the load, the timed repeats without their
command lines); events, py-spy samples and logs are left out. The steps, round trips, periods and
verdict are those of the whole bundle (tests/data/afd/README.md)."""
import gzip, json, sys, shutil, os
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
m = json.loads((src / "manifest.json").read_text())
trace = m["roles"]["attention"]["traces"][0]
d = json.load(gzip.open(src / trace))
keep_args = {"kernel": ("stream", "correlation", "device"), "gpu_memcpy": ("stream", "correlation", "device"),
             "cuda_runtime": ("correlation",), "cuda_driver": ("correlation",), "cuda_sync": ("correlation",)}
out = []
for e in d["traceEvents"]:
    ph, cat = e.get("ph"), e.get("cat")
    if ph in ("s", "f"):
        continue
    if ph == "X" and cat == "cpu_op" and not str(e.get("name", "")).startswith("vllm::"):
        continue
    if ph == "X" and cat in keep_args:
        e = dict(e, args={k: v for k, v in e.get("args", {}).items() if k in keep_args[cat]})
    out.append(e)
d["traceEvents"] = out
dst.mkdir(parents=True, exist_ok=True)
(dst / Path(trace).parent).mkdir(parents=True, exist_ok=True)
with gzip.open(dst / trace, "wt", compresslevel=9) as f:
    json.dump(d, f, separators=(",", ":"))
keep = {k: m[k] for k in ("format", "version", "afd", "command", "settings", "gpu_sharing", "repeats", "roles", "load", "created_by") if k in m}
keep["traces"] = [trace]
for r in keep.get("repeats", []):
    r.pop("command", None)
(dst / "manifest.json").write_text(json.dumps(keep, indent=1))
print(os.path.getsize(dst / trace))
