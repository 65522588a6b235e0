#!/usr/bin/env python3
"""The truth of an AFD recording, counted from its raw files by plain Python (no dbo-trace code).

    python3 scripts/afd_truth.py samples/afd-graphs-dbo
    python3 scripts/afd_truth.py samples/afd-eager samples/afd-eager-dbo samples/afd-graphs \
        samples/afd-graphs-dbo samples/afd-pair-graphs-dbo samples/afd-pair-graphs-nomps

For each role's Kineto trace: vLLM's `execute_*` steps (count, the median period from one step's
start to the next one's, the median window), cudaGraphLaunch calls, the NCCL SendRecv kernels per
step (inside each graph replay, by the launch's correlation id, and outside graphs), and the
manifest's counters and unprofiled timed repeats. Then the AFD figures of
`tests/references/afd_pair_truth.py` (standard library only; its docstring says how each is
counted): round trips per step and per layer, the median round trip (the k-th data-plane send of a
step with its k-th receive: the FFN answers first in first out), microbatched or not, with the
FFN's trace its compute per step and per round trip and each role's GPU busy share over the
attention's steps, the unprofiled TPOT (`bench/repeat-*.json`) and the profiler's overhead. Given
several bundles it also prints one table and DBO's effect (a DBO arm against the arm of the same
mode and MPS without DBO). The figures quoted in samples/README.md come from this script; the
tests compare the report with the same counts (tests/independent/test_afd_pair_samples.py).
"""

import importlib.util
import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def trace_truth(path):
    events = load(path)["traceEvents"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_")), key=lambda e: e["ts"])
    starts = [e["ts"] for e in steps]
    launches = sorted((e for e in events if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    graph_of = {e["args"]["correlation"]: i for i, e in enumerate(launches)}
    sendrecv = [e for e in events if e.get("cat") == "kernel" and "SendRecv" in e.get("name", "")]
    per_launch = Counter(graph_of.get(e["args"].get("correlation")) for e in sendrecv)
    outside = per_launch.pop(None, 0)
    return {
        "steps": len(steps),
        "median_period_us": statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else None,
        "median_window_us": statistics.median(e["dur"] for e in steps) if steps else None,
        "graph_launches": len(launches),
        "sendrecv_kernels": len(sendrecv),
        "sendrecv_per_replay": dict(Counter(per_launch.values())),
        "sendrecv_outside_graphs": outside,
        "sendrecv_streams": dict(Counter(e["args"].get("stream") for e in sendrecv).most_common(4)),
    }


_spec = importlib.util.spec_from_file_location(
    "afd_pair_truth", Path(__file__).resolve().parents[1] / "tests" / "references" / "afd_pair_truth.py")
AFD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(AFD)


def arm_kind(bundle):
    """(mode, dbo, mps) from the manifest: eager or graphs, --enable-dbo, MPS (off only where verified off)."""
    m = json.loads((Path(bundle) / "manifest.json").read_text())
    command = m.get("command") or []
    mode = "eager" if "--enforce-eager" in command else "graphs"
    sharing = m.get("gpu_sharing") or {}
    mps = "off" if sharing.get("mps_daemon") == "not running" or sharing.get("mps") is False else "on"
    return mode, "--enable-dbo" in command, mps


def afd_lines(t):
    a, b, p = t["attention"], t["bench"], t["pair"]
    ms = 1000.0
    yield f"AFD (tests/references/afd_pair_truth.py): {a['steps']} steps {', '.join(a['step_names'])}"
    yield (f"  step period (median, start to start) {a['median_period_us'] / ms:.3f} ms; window: annotation "
           f"{a['median_window_cpu_us'] / ms:.3f} ms, to its last GPU work {a['median_window_gpu_us'] / ms:.3f} ms")
    yield (f"  data-plane SendRecv per step {sorted(set(a['data_kernels_per_step']))}, control plane "
           f"{sorted(set(a['control_kernels_per_step']))}; microbatches {sorted(set(a['microbatches_per_step']))}: "
           f"microbatched {'yes' if a['microbatched'] else 'no'}")
    told = "the plugin's CPU ops" if a["kinds_from_cpu_ops_steps"] else "the graph replay's order"
    yield (f"  send/receive told by {told}; order as the eager pattern in "
           f"{sum(a['order_matches_pattern'])}/{len(a['order_matches_pattern'])} steps with CPU ops; "
           f"compute-gap signatures {sorted(set(a['gap_signatures']))}")
    yield (f"  round trips {a['round_trips_total']}: {a['round_trips_per_step']:g} per step, "
           f"{a['round_trips_per_layer']:g} per layer; median {a['median_round_trip_us'] / ms:.3f} ms "
           f"(send kernel {a['median_send_kernel_us']:.1f} us, receive kernel {a['median_recv_kernel_us']:.1f} us)")
    if p:
        yield (f"  FFN (same clock: {p['same_clock']}), over the attention's steps ({p['span_us'] / ms:.1f} ms): "
               f"compute {p['ffn_compute_per_step_us'] / ms:.3f} ms per step (median over steps "
               f"{p['ffn_compute_per_step_median_us'] / ms:.3f}), {p['ffn_compute_per_round_trip_us']:.1f} us per "
               f"round trip (median inside a round trip {p['ffn_compute_inside_round_trip_median_us']:.1f} us)")
        yield (f"  GPU busy (kernels): attention {p['attention_busy']:.3f}, FFN {p['ffn_busy']:.3f}, both "
               f"{p['both_busy']:.3f}; with copies: {p['attention_busy_all']:.3f}, {p['ffn_busy_all']:.3f}, "
               f"{p['both_busy_all']:.3f}")
    tpots = ", ".join(f"{x:.3f}" for x in b["median_tpot_ms_each"])
    over = f"{t['profiler_overhead']:+.1%}" if t["profiler_overhead"] is not None else "-"
    yield (f"  unprofiled (bench/repeat-*.json): median TPOT {tpots} ms: median {b['tpot_ms']:.3f} "
           f"(mean {b['tpot_ms_mean']:.3f}); profiler overhead (period / TPOT - 1) {over}")


def table(truths):
    rows = ["| arm | mode, DBO, MPS | steps | period ms | window ms (CPU / GPU) | round trips / step (/ layer) | "
            "microbatched | median round trip ms | receive / send kernel us | FFN compute / step ms "
            "(/ round trip us) | busy attention / FFN / both | unprofiled TPOT ms | profiler overhead |",
            "|---" * 13 + "|"]
    for name, (kind, t) in truths.items():
        a, p, b = t["attention"], t["pair"], t["bench"]
        ffn = f"{p['ffn_compute_per_step_us'] / 1000:.2f} ({p['ffn_compute_per_round_trip_us']:.0f})" if p else "-"
        busy = f"{p['attention_busy']:.3f} / {p['ffn_busy']:.3f} / {p['both_busy']:.3f}" if p else "-"
        rows.append(
            f"| `{name}` | {kind[0]}, {'DBO' if kind[1] else 'no DBO'}, MPS {kind[2]} | {a['steps']} | "
            f"{a['median_period_us'] / 1000:.2f} | {a['median_window_cpu_us'] / 1000:.2f} / "
            f"{a['median_window_gpu_us'] / 1000:.2f} | {a['round_trips_per_step']:g} ({a['round_trips_per_layer']:g}) | "
            f"{'yes' if a['microbatched'] else 'no'} | {a['median_round_trip_us'] / 1000:.3f} | "
            f"{a['median_recv_kernel_us']:.1f} / {a['median_send_kernel_us']:.1f} | {ffn} | {busy} | "
            f"{b['tpot_ms']:.2f} | {t['profiler_overhead']:+.1%} |")
    return rows


def dbo_effects(truths):
    for name, (kind, t) in truths.items():
        if not kind[1]:
            continue
        for base, (bkind, bt) in truths.items():
            if not bkind[1] and bkind[0] == kind[0] and bkind[2] == kind[2]:
                e = AFD.dbo_effect(t, bt)
                yield (f"DBO effect {name} against {base}: step period {e['period_change']:+.1%} "
                       f"({t['attention']['median_period_us'] / 1000:.2f} against "
                       f"{bt['attention']['median_period_us'] / 1000:.2f} ms), unprofiled TPOT {e['tpot_change']:+.1%} "
                       f"({t['bench']['tpot_ms']:.2f} against {bt['bench']['tpot_ms']:.2f} ms)")


def main(bundle):
    bundle = Path(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for role, body in (manifest.get("roles") or {"main": {"traces": manifest.get("traces", [])}}).items():
        for trace in body.get("traces", []):
            print(role, trace)
            for key, value in trace_truth(bundle / trace).items():
                print(f"  {key}: {value}")
    counters = manifest.get("counters") or {}
    print("counters:", {k: v for k, v in sorted(counters.items()) if k.startswith(("steps.", "ubatch.yields"))})
    for r in manifest.get("repeats") or []:
        print(f"repeat {r.get('index')} ({r.get('tool')}): {r.get('duration_s'):.3f} s, {r.get('output_throughput'):.1f} tok/s, median TPOT {r.get('median_tpot_ms'):.3f} ms, median ITL {r.get('median_itl_ms'):.3f} ms")
    print("gpu_sharing:", manifest.get("gpu_sharing"))
    truth = AFD.bundle_truth(str(bundle))
    for line in afd_lines(truth):
        print(line)
    return truth


if __name__ == "__main__":
    truths = {}
    for arg in sys.argv[1:]:
        print(f"== {arg}")
        truths[Path(arg).name] = (arm_kind(arg), main(arg))
    if len(truths) > 1:
        print()
        print("\n".join(table(truths)))
        print()
        print("\n".join(dbo_effects(truths)))
