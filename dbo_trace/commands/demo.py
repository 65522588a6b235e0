"""`dbo-trace demo`: the diagnosis checked end to end on a workload whose truth is known."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from dbo_trace.commands import common
from dbo_trace.commands.common import fail, write_file


@dataclass(frozen=True)
class DemoRequest:
    mode: str = "all"
    layers: int = 4
    tokens: int = 16384
    hidden: int = 8192
    compute_us: float | None = None
    comm_us: float = 1000.0
    steps: int = 5
    nproc: int = 1
    out: Path | None = None  # checked() fills the default, ./dbo-trace-demo-DATE-TIME
    sweep: bool = False
    sweep_compute_us: str = "100,200,400,800,1600"
    sweep_comm_us: str = "100,200,400,800,1600"
    plot: Path | None = None
    ubatching: str = "auto"
    comm: str = "auto"
    device: str = "cuda"

    def checked(self) -> DemoRequest:
        """The request with its folder named (new or empty), after the checks that torch, the GPUs
        and the options allow the run."""
        import datetime as dt
        import importlib.util

        if self.sweep:
            for flag, grid in (("--sweep-compute-us", self.sweep_compute_us), ("--sweep-comm-us", self.sweep_comm_us)):
                _check_grid(flag, grid)
        if importlib.util.find_spec("torch") is None:
            fail("dbo-trace demo needs torch and a CUDA GPU (pip install torch); `dbo-trace report` needs neither")
        if self.device == "cuda":
            import torch

            visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if visible == 0:
                fail("no CUDA GPU is visible: dbo-trace demo runs its workload on a GPU (`dbo-trace report` runs anywhere)")
            if self.nproc > visible:
                fail(f"--nproc {self.nproc} needs {self.nproc} GPUs; {visible} visible")
        if self.comm == "all_to_all" and self.nproc < 2:
            fail(
                "--comm all_to_all needs --nproc 2 or more: over a world of one, torch turns the all_to_all into a "
                "device-to-device copy, which is not communication (measured on the H200, docs/demo.md)"
            )
        if self.sweep and self.nproc > 1:
            fail("--sweep runs on one GPU; drop --nproc")
        out = self.out or Path(f"dbo-trace-demo-{dt.datetime.now():%Y%m%d-%H%M%S}")
        common.refuse_nonempty(out)
        if self.plot is not None and self.plot.exists():
            fail(f"{self.plot}: already exists; choose another --plot path")
        return replace(self, out=out)


SWEEP_MOST = 50  # values per grid axis: each point is a profiled run


def _check_grid(flag: str, grid: str) -> None:
    """A sweep grid: comma-separated lengths in microseconds, each from 1 us to 10 s."""
    values = grid.split(",")
    if len(values) > SWEEP_MOST:
        fail(f"{flag}: {len(values)} values; give at most {SWEEP_MOST} (each is a profiled run)")
    for v in values:
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        if not 1 <= x <= 1e7:  # NaN too
            fail(f"{flag} {grid!r}: {v.strip()!r} is not a length from 1 to 10000000 us; give them as 100,200,400")


def run(request: DemoRequest) -> None:
    from dbo_trace.demo.output import demo_table, sweep_table
    from dbo_trace.demo.run import DemoOptions, SweepFailed, modes_of, run_demo, run_sweep
    from dbo_trace.ui import ConsoleProgress

    r, out = request, request.out
    assert out is not None, "run a checked() request"
    opts = DemoOptions(
        modes_of(r.mode, r.device), out, r.layers, r.tokens, r.hidden, r.compute_us, r.comm_us, r.steps, r.nproc,
        r.device, r.ubatching, r.comm,
    )  # fmt: skip
    ui = ConsoleProgress()
    if r.sweep:
        try:
            rows = run_sweep(opts, r.sweep_compute_us, r.sweep_comm_us, ui)
        except SweepFailed as exc:
            fail(str(exc), code=1)
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep.json").write_text(json.dumps(rows, indent=1))
        click.echo(sweep_table(rows), nl=False)
        if r.plot is not None:
            from dbo_trace.demo.sweep_plot import draw_sweep

            write_file(draw_sweep(rows), r.plot, force=False)
        return
    results = run_demo(opts, ui)
    click.echo(demo_table(results), nl=False)
    backends = sorted({m.workload.get("ubatching", "?") for m in results if m.workload})
    click.echo(
        f"microbatch threads: {', '.join(backends) or '-'} UBatchContext; device: "
        f"{next((m.workload['device'] for m in results if m.workload), '-')}; processes: {r.nproc}"
    )
    if not all((m.ok or not m.checked) and not m.error for m in results):
        sys.exit(1)
