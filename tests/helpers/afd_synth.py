"""Small synthetic Kineto traces of an AFD pair (attention and FFN) that follow what was measured on
the H200 (docs/analysis.md, "Disaggregated round trips"): the data plane's sends and receives are
ncclDevKernel_SendRecv kernels on the compute stream; 2 control-plane sends per step on
torch.distributed's own NCCL stream; with DBO each microbatch sends, yields to the other and
receives after the other's send; under graph replay every kernel carries the cudaGraphLaunch's
correlation and runs on a graph-internal stream. Both traces claim rank 0 of world size 1 and share
baseTimeNanoseconds (one host's clock). With `evidence` (the default) each trace also carries what a
real one shows of its role: the plugin's process groups `afd` and `p2p` of 2 ranks in
distributedInfo.pg_config, torch.distributed's control-plane ranges (`nccl:send 1->0` on the
attention side, `nccl:recv 0<-1` on the FFN's), the attention side's `vllm::afd_p2p_send`/`recv` ops
where it runs eagerly; the FFN runs no attention kernel."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Report

SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
BASE_NS = 1_764_000_000_000_000_000
PID = 4242
MAIN, UB = 11, (101, 102)


class _Trace:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 1000

    def kernel(self, name: str, ts: float, dur: float, stream: int, corr: int) -> None:
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
             "args": {"stream": stream, "correlation": corr, "device": 0}}
        )  # fmt: skip

    def call(self, name: str, ts: float, tid: int, dur: float = 2.0) -> int:
        self.corr += 1
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
             "args": {"correlation": self.corr}}
        )  # fmt: skip
        return self.corr

    def annotation(self, name: str, ts: float, dur: float, tid: int = MAIN) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur})

    def cpu_op(self, name: str, ts: float, dur: float, tid: int = MAIN) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur})

    def write(self, path: Path, base_ns: int = BASE_NS, groups: bool = False) -> Path:
        info: dict = {"backend": "nccl", "rank": 0, "world_size": 1}
        if groups:  # the AFD plugin's process groups, as torch's profiler lists them
            info["pg_config"] = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 1, "ranks": [0]}] + [
                {"pg_name": n, "pg_desc": "undefined", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]} for n in ("afd", "p2p")
            ]  # fmt: skip
        doc = {
            "schemaVersion": 1,
            "distributedInfo": info,
            "baseTimeNanoseconds": base_ns,
            "traceEvents": self.events,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            json.dump(doc, f)
        return path


def afd_pair(
    folder: Path,
    *,
    dbo: bool,
    graphs: bool,
    layers: int = 3,
    steps: int = 4,
    attn_us: float = 40.0,
    latency_us: float = 100.0,
    ffn_compute_us: float = 60.0,
    yield_us: float = 0.0,
    manifest: bool = True,
    evidence: bool = True,
) -> dict:
    """Write a bundle (manifest, traces/attention, peer/traces/ffn) and return its truth."""
    att, ffn = _Trace(), _Trace()
    compute_stream = 50 if graphs else 7
    t = 100.0
    ffn_free = 50.0
    truth: dict = {"round_trips": [], "steps": steps, "layers": layers}
    mbs = 2 if dbo else 1
    for step in range(steps):
        step_start = t
        # control plane: two sends on torch.distributed's stream, launched by the main thread; the
        # FFN's loop receives them (recv_control_payload)
        for i in range(2):
            corr = att.call("cudaLaunchKernel", t + 1 + 3 * i, MAIN)
            att.kernel(SENDRECV, t + 5 + 3 * i, 2.0, 20, corr)
            if evidence:
                att.cpu_op("c10d::send", t + 0.5 + 3 * i, 2.0)
                att.annotation("nccl:send 1->0", t + 0.8 + 3 * i, 1.5)
                f_at = max(ffn_free, t + 4 + 3 * i)
                ffn.kernel(SENDRECV, f_at, 2.0, 21, ffn.call("cudaLaunchKernel", f_at - 1, MAIN))
                ffn.annotation("nccl:recv 0<-1", f_at - 1.5, 1.2)
                ffn_free = f_at + 3.0
        t += 12
        graph_corr = att.call("cudaGraphLaunch", t, MAIN, dur=5.0) if graphs else None
        t += 8
        order: list[tuple[int, str, int]] = []  # (microbatch, what, layer)
        if dbo:
            order += [(0, "A", 0), (0, "S", 0), (1, "A", 0), (1, "S", 0)]
            for layer in range(1, layers):
                order += [(0, "R", layer - 1), (0, "A", layer), (0, "S", layer)]
                order += [(1, "R", layer - 1), (1, "A", layer), (1, "S", layer)]
            order += [(0, "R", layers - 1), (0, "A", layers), (1, "R", layers - 1), (1, "A", layers)]
        else:
            for layer in range(layers):
                order += [(0, "A", layer), (0, "S", layer), (0, "R", layer)]
            order += [(0, "A", layers)]
        sent: dict[tuple[int, int], float] = {}
        back: dict[tuple[int, int], float] = {}  # when the FFN's answer has arrived
        kernels: list[tuple[int, str, float, float]] = []
        for ub, what, layer in order:
            if what == "A":
                dur = attn_us
                name = "attention_and_norm_kernel"
            elif what == "S":
                dur, name = 4.0, SENDRECV
                sent[ub, layer] = t
                # the FFN, one request after the other (FIFO): receive, compute, send back
                f0 = ffn_free
                f1 = max(t + 4.0, f0 + 2.0)
                g0 = f1 + ffn_compute_us
                g1 = g0 + max(3.0, latency_us - ffn_compute_us - 8.0)
                ffn.kernel(SENDRECV, f0, f1 - f0, 9, ffn.call("cudaLaunchKernel", f0 - 2, MAIN))
                ffn.kernel("fused_moe_kernel", f1 + 1, ffn_compute_us - 2, 9, ffn.call("cudaLaunchKernel", f1, MAIN))
                ffn.kernel(SENDRECV, g0, g1 - g0, 9, ffn.call("cudaLaunchKernel", g0 - 1, MAIN))
                ffn_free = g1 + 1.0
                back[ub, layer] = g1
            else:
                name = SENDRECV
                dur = max(3.0, back[ub, layer] + 1.0 - t)
            kernels.append((ub, what, t, dur))
            if what in "SR":
                kernels[-1] = (ub, what + str(layer), t, dur)
            t += dur + 1.0
            if what == "S" and dbo:
                t += yield_us
        for ub, what, ts, dur in kernels:
            name = SENDRECV if what[0] in "SR" else "attention_and_norm_kernel"
            if graphs:  # the graph runs its NCCL nodes on another internal stream
                att.kernel(name, ts, dur, compute_stream + (name == SENDRECV), graph_corr)
            else:
                tid = UB[ub] if dbo else MAIN
                launch = max(step_start + 13, ts - 15)
                corr = att.call("cudaLaunchKernel", launch, tid)
                att.kernel(name, ts, dur, compute_stream, corr)
                if evidence and name == SENDRECV:  # the plugin's ops around its data-plane sends and receives
                    att.cpu_op("vllm::afd_p2p_send" if what[0] == "S" else "vllm::afd_p2p_recv", launch - 0.5, 3.0, tid=tid)
        # the truth: each round trip, and the other microbatch's compute inside it
        for ub in range(mbs):
            for layer in range(layers):
                s = next(k for k in kernels if k[0] == ub and k[1] == f"S{layer}")
                r = next(k for k in kernels if k[0] == ub and k[1] == f"R{layer}")
                lo, hi = s[2], r[2] + r[3]
                hidden = sum(
                    max(0.0, min(hi, k[2] + k[3]) - max(lo, k[2])) for k in kernels if k[1] == "A" and k[0] != ub
                ) if dbo else 0.0  # fmt: skip
                truth["round_trips"].append({"step": step, "ub": ub, "layer": layer, "rt": hi - lo, "hidden": hidden,
                                             "ffn": ffn_compute_us})  # fmt: skip
        t += 30
        # one load whatever the arm (32 requests in flight; DBO splits them in two): compare pairs like with like
        att.annotation("execute_context_0(0)_generation_32(32)", step_start, t - step_start - 5)
        if yield_us:  # the AFD model's yield op between each send and its receive (a thread of its own here)
            for i in range(mbs * layers):
                att.cpu_op("vllm::manual_dbo_yield", step_start + 13 + i * (yield_us + 1), yield_us, tid=55)
    # the FFN's last receive waits out the attention side's export: far past the attention's window
    ffn.kernel(SENDRECV, t + 50, 7_700_000.0, 9, ffn.call("cudaLaunchKernel", t + 40, MAIN))
    a_path = att.write(folder / "traces" / "attention.pt.trace.json.gz", groups=evidence)
    f_path = ffn.write(folder / "peer" / "traces" / "ffn.pt.trace.json.gz", groups=evidence)
    if manifest:
        m = {
            "format": "dbo-trace-bundle",
            "version": 1,
            "layers": layers,
            "roles": {"attention": {"traces": ["traces/" + a_path.name]}, "ffn": {"traces": ["peer/traces/" + f_path.name]}},
            "afd": {"connector": "P2pNcclAFDConnector", "num_attention_ranks": 1, "num_ffn_ranks": 1},
            "gpu_sharing": {"shared_gpu": True, "mps": True, "mps_daemon": "answered"},
        }
        (folder / "manifest.json").write_text(json.dumps(m))
    return truth


def pair_analysis(folder: Path) -> Callable[[], Report]:
    """The pair's analysis of a bundle (afd_pair's) as analyze_paths runs it in one process, its
    traces read once beforehand: each call analyses the attention trace, cuts the FFN's to its window
    and analyses that, then combines the two (round trips, the FFN's parts, the pair's figures, time
    slicing). What tests/unit/test_scaling.py counts and benchmarks/bench_growth.py times: the analysis,
    not the JSON decoding."""
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyse_timelines, attention_timelines, cut_of, finish, prepare, settle
    from dbo_trace.trace.load import discover, read_timelines

    plan = prepare(discover([folder]), Options())
    timelines = [read_timelines(t, i) for i, t in enumerate(plan.traces)]
    first, then = plan.rounds()

    def run() -> Report:
        results = {i: analyse_timelines(timelines[i], plan.shared, None) for i in first}
        cut = cut_of(attention_timelines(results, first))
        for i in then:
            results[i] = analyse_timelines(timelines[i], plan.shared, cut)
        ranks: list = [results[i] for i in range(len(plan.traces))]
        return finish(plan, settle(ranks), [str(folder)], cut=cut)

    return run
