"""Load sweep folders for the tests, built from the shipped AFD bundles with plain json and shutil (no
dbo_trace code): samples/afd-graphs (DBO off) and samples/afd-pair-graphs-dbo (DBO on), both recorded at
16 requests in flight with the same load, are the sweep's real load. Other loads are copies whose
manifest's load and timed repeats (and bench/repeat-N.json, which the manifest's repeats come from) are
rewritten here: their figures are then made up, not a real sweep, and the tests say so where they use them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
OFF, ON = "afd-graphs", "afd-pair-graphs-dbo"
REAL_LOAD = {"name": "c16", "concurrency": 16, "num_prompts": 32, "input_len": 128, "output_len": 48}
BENCH_KEYS = {
    "median_tpot_ms": "median_tpot_ms",
    "median_itl_ms": "median_itl_ms",
    "output_throughput": "output_throughput",
    "duration": "duration_s",
}


def _without_traces(src: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("traces", "pystacks") or (src.endswith("peer") and n == "traces")}


def copy_bundle(sample: str, dest: Path, profiled: bool) -> Path:
    shutil.copytree(SAMPLES / sample, dest, ignore=None if profiled else _without_traces)
    return dest


def rewrite(bundle: Path, arm: str, load: dict, tpots: list[float] | None = None, itls: list[float] | None = None) -> None:
    """The bundle's manifest given the sweep's mark and this load; with tpots, its repeats (bench/repeat-N.json
    and the manifest's copy of them) rewritten to those median TPOTs (ITL, throughput and duration made to fit)."""
    m = json.loads((bundle / "manifest.json").read_text())
    m["sweep"] = {"arm": arm, "load": load["name"]}
    m["load"] = {**m["load"], **{k: load[k] for k in ("concurrency", "num_prompts", "input_len", "output_len")}}
    if tpots is not None:
        repeats = []
        for i, tpot in enumerate(tpots):
            path = bundle / "bench" / f"repeat-{i}.json"
            bench = json.loads(path.read_text())
            tokens = load["num_prompts"] * load["output_len"]
            duration = tpot * load["output_len"] * load["num_prompts"] / load["concurrency"] / 1000
            bench.update(
                median_tpot_ms=tpot, median_itl_ms=(itls[i] if itls else tpot * 0.99), duration=duration,
                output_throughput=tokens / duration, completed=load["num_prompts"], max_concurrency=load["concurrency"],
                num_prompts=load["num_prompts"], total_output_tokens=tokens,
            )  # fmt: skip
            path.write_text(json.dumps(bench))
            entry = dict(m["repeats"][min(i, len(m["repeats"]) - 1)])
            entry.update({mine: bench[theirs] for theirs, mine in BENCH_KEYS.items()}, completed=load["num_prompts"], index=i)
            entry["result"] = f"bench/repeat-{i}.json"
            repeats.append(entry)
        for extra in range(len(tpots), 16):
            (bundle / "bench" / f"repeat-{extra}.json").unlink(missing_ok=True)
        m["repeats"] = repeats
    (bundle / "manifest.json").write_text(json.dumps(m, indent=1))


def build_sweep(
    out: Path,
    loads: list[dict],
    arms: tuple[tuple[str, str], ...] = (("graphs", OFF), ("graphs+DBO", ON)),
    profiled: tuple[str, ...] = ("c16",),
    tpots: dict[tuple[str, str], list[float]] | None = None,
    status: dict[tuple[str, str], tuple[str, str | None]] | None = None,
    folder_of=lambda arm_index, arm: f"arm{arm_index}",
    load_folder=lambda load: load["name"],
) -> Path:
    """A sweep folder: every arm (name, sample) at every load; tpots[(arm, load)] rewrites that run's repeats
    (a load other than the real c16 needs them); status[(arm, load)] marks a run failed or pending (its bundle
    then not written)."""
    out.mkdir(parents=True)
    runs = []
    for load in loads:
        for i, (arm, sample) in enumerate(arms):
            rel = f"{folder_of(i, arm)}/{load_folder(load)}"
            state, reason = (status or {}).get((arm, load["name"]), ("complete", None))
            runs.append({"arm": arm, "load": load["name"], "bundle": rel, "status": state, "reason": reason})
            if state != "complete":
                continue
            bundle = copy_bundle(sample, out / rel, load["name"] in profiled)
            rewrite(bundle, arm, load, (tpots or {}).get((arm, load["name"])))
    spec = {
        "format": "dbo-trace-sweep", "version": 1, "created": "2026-12-04T18:00:00+00:00",
        "command": ["vllm", "serve", "/tmp/vllm26-dsv2lite"], "peer_command": ["vllm", "serve", "/tmp/vllm26-dsv2lite"],
        "arms": [{"name": arm, "args": ["--enable-dbo"] if sample == ON else []} for arm, sample in arms],
        "loads": loads, "repeats": 3, "profile": True, "runs": runs,
    }  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(spec, indent=1))
    return out


def bench_tpots(bundle: Path) -> list[float]:
    """The run's repeats' median TPOT, from vllm bench serve's own result files."""
    return [json.loads(p.read_text())["median_tpot_ms"] for p in sorted((bundle / "bench").glob("repeat-*.json"))]


def bench_field(bundle: Path, key: str) -> list[float]:
    return [json.loads(p.read_text())[key] for p in sorted((bundle / "bench").glob("repeat-*.json"))]
