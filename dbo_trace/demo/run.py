"""`dbo-trace demo`: record each mode of the demo workload through `record`, diagnose it, compare with the truth.

The truth is by construction (dbo_trace/demo/workload.py): serial does not
overlap, overlap does, graph does and replays, hostbound starves the GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dbo_trace import bundle as fmt
from dbo_trace.analysis.overlap import exposure
from dbo_trace.analysis.verdict import decision as v
from dbo_trace.analysis.model import Options, Report
from dbo_trace.demo.devices import SPIN_KERNEL
from dbo_trace.demo.worker import WORKLOAD_FILE
from dbo_trace.demo.workload import MODES
from dbo_trace.record.recorder import STATUS_COMPLETE, Progress, RecordPlan, record

EXPECTED = {
    "serial": v.Label.NOT_OVERLAPPED.value, "overlap": v.Label.OVERLAPPED.value, "graph": v.Label.OVERLAPPED.value,
    "hostbound": v.Label.HOST_BOUND.value,
}  # fmt: skip
# The cause modes are judged by why comm was exposed: the report must name their bug as the main cause.
EXPECTED_CAUSE = {"late": exposure.LATE_RECORD, "smhungry": exposure.CROWDED}
EXPECTED.update({mode: f"exposed: {cause}" for mode, cause in EXPECTED_CAUSE.items()})
GRAPH_REPLAYED_AT_LEAST = 0.9  # the graph mode's kernels must come from replays
# The host-bound mode needs launches to dominate: small, quick kernels and short communication.
HOSTBOUND_OVERRIDES = {"layers": 2, "tokens": 4096, "hidden": 1024, "comm_us": 20.0}


class SweepFailed(Exception):
    """The sweep's worker process failed; the message has its last line."""


@dataclass(frozen=True)
class DemoOptions:
    modes: tuple[str, ...]
    out: Path
    layers: int = 4
    tokens: int = 16384
    hidden: int = 8192
    compute_us: float | None = None
    comm_us: float = 1000.0
    steps: int = 5
    nproc: int = 1
    device: str = "cuda"
    ubatching: str = "auto"  # auto | vllm | builtin
    comm: str = "auto"  # auto | spin | all_to_all


@dataclass
class ModeResult:
    mode: str
    expected: str
    bundle: Path
    got: str | None = None
    ok: bool = False
    checked: bool = True  # False on the CPU: orchestration only, nothing to diagnose
    workload: dict = field(default_factory=dict)
    report: Report | None = None
    error: str | None = None


def worker_command(opts: DemoOptions, mode: str) -> list[str]:
    p = {"layers": opts.layers, "tokens": opts.tokens, "hidden": opts.hidden, "comm_us": opts.comm_us}
    if mode == "hostbound":
        p.update(HOSTBOUND_OVERRIDES)
    options = {"mode": mode, "layers": p["layers"], "tokens": p["tokens"], "hidden": p["hidden"],
               "comm-us": p["comm_us"], "steps": opts.steps, "nproc": opts.nproc, "device": opts.device,
               "ubatching": opts.ubatching, "comm": opts.comm}  # fmt: skip
    cmd = [sys.executable, "-m", "dbo_trace.demo.worker"]
    for name, value in options.items():
        cmd += [f"--{name}", str(value)]
    if opts.compute_us is not None and mode != "hostbound":
        cmd += ["--compute-us", str(opts.compute_us)]
    if opts.device == "cpu":
        cmd += ["--warmup", "1"]
    return cmd


def main_exposure_cause(report: Report) -> str | None:
    """The reason with the most exposed comm time, over all ranks."""
    by: dict[str, float] = {}
    for rank in report.ranks:
        for reason, us in rank.exposure.top if rank.exposure is not None else ():
            by[reason] = by.get(reason, 0.0) + us
    return max(by, key=by.__getitem__) if by else None


def judge(mode: str, report: Report) -> tuple[str, bool]:
    if mode in EXPECTED_CAUSE:
        got = f"exposed: {main_exposure_cause(report)}"
        return got, got == EXPECTED[mode]
    got = report.verdict.label.value
    ok = got == EXPECTED[mode]
    if mode == "graph":
        ok = ok and (report.total.replayed_kernel_fraction or 0.0) >= GRAPH_REPLAYED_AT_LEAST
    return got, ok


def _complete_manifest(bundle: Path, workload: dict) -> None:
    """What the report should know of the workload: its emulated comm kernel and its layer count."""
    fmt.amend_manifest(bundle, {
        "created_by": "dbo-trace demo",
        "layers": workload["layers"],
        "workload": workload,
        "comm_kernels": [SPIN_KERNEL] if workload["comm"]["kind"] == "spin" else [],
        "profile_all_threads": workload["profile_all_threads"],
    })  # fmt: skip


def run_mode(opts: DemoOptions, mode: str, ui: Progress) -> ModeResult:
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.trace.errors import InputError

    result = ModeResult(mode, EXPECTED[mode], opts.out / mode, checked=opts.device == "cuda")
    ui.phase(f"demo {mode}: recording into {result.bundle}")
    outcome = record(RecordPlan(command=worker_command(opts, mode), out=result.bundle, server=False), ui)
    if outcome.status != STATUS_COMPLETE:
        result.error = outcome.reason
        return result
    result.workload = json.loads((result.bundle / WORKLOAD_FILE).read_text())
    _complete_manifest(result.bundle, result.workload)
    if not result.checked:
        return result  # the CPU has no kernels to diagnose: the orchestration ran, and that is what was asked
    try:
        result.report = analyze_paths([result.bundle], Options())
    except InputError as exc:
        result.error = str(exc)
        return result
    result.got, result.ok = judge(mode, result.report)
    return result


def run_demo(opts: DemoOptions, ui: Progress) -> list[ModeResult]:
    return [run_mode(opts, mode, ui) for mode in opts.modes]


def modes_of(choice: str, device: str = "cuda") -> tuple[str, ...]:
    """`all` is every mode the device can run (no CUDA graphs on the CPU)."""
    if choice != "all":
        return (choice,)
    return tuple(m for m in MODES if device == "cuda" or m != "graph")


def run_sweep(opts: DemoOptions, computes: str, comms: str, ui: Progress) -> list[dict]:
    """The worker's sweep, one JSON line per grid point; the table is the caller's."""
    cmd = [
        sys.executable,
        "-m",
        "dbo_trace.demo.worker",
        "--sweep",
        "--compute-us",
        computes,
        "--comm-us",
        comms,
        "--layers",
        str(opts.layers),
        "--hidden",
        str(opts.hidden),
        "--device",
        opts.device,
    ]
    points = len(computes.split(",")) * len(comms.split(","))
    rows: list[dict] = []
    # stderr to a file, not a pipe: torch's warnings could fill a pipe nobody reads until stdout ends.
    with ui.counter(f"sweep: {points} points", points) as advance, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        for line in proc.stdout or ():
            if line.startswith("{"):
                rows.append(json.loads(line))
                advance(len(rows))
        if proc.wait() != 0:
            err.seek(0)
            last = (err.read().strip().splitlines() or ["no output"])[-1]
            raise SweepFailed(f"the sweep worker failed (exit {proc.returncode}): {last}")
    return rows


PAYS_AT_LEAST = 0.02  # a DBO step this much faster than serial counts as paying (above run-to-run noise)


def sweep_verdicts(row: dict) -> dict:
    gain = 1.0 - row["dbo_step_us"] / row["serial_step_us"]
    predicted = None if row["ratio"] is None else row["ratio"] >= 1.0
    pays = gain >= PAYS_AT_LEAST
    return {"gain": gain, "pays": pays, "predicted": predicted, "agree": None if predicted is None else predicted == pays}
