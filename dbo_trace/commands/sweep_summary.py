"""`dbo-trace report OUT` (and `compare OUT`) of a load sweep's folder: the sweep's summary (SweepView).

The folder is read as input (dbo_trace/sweep_folder.py), each run's timed repeats and settings taken
from its manifest, each profiled run analysed as `compare` analyses an arm, and the figures summarised
in analysis/compare/load_sweep.py; render/sweep.py and render/pictures/sweep_plot.py write them."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dbo_trace.commands import common
from dbo_trace.commands.common import color, fail, refuse_overwrite, warn, write_file, write_output
from dbo_trace.errors import UsageError
from dbo_trace.serve_args import whole_number

if TYPE_CHECKING:
    from dbo_trace.analysis.compare.load_sweep import LoadPoint, RunFigures
    from dbo_trace.analysis.model import Report
    from dbo_trace.render.sweep import SweepDocument
    from dbo_trace.sweep_folder import Sweep, SweepRun

PICTURES = ("png", "svg")


@dataclass(frozen=True)
class SweepView:
    folder: Path
    format: str  # terminal, json, markdown, html, or png / svg (-o's suffix)
    output: Path | None = None
    plot: Path | None = None  # --plot: the picture, .png or .svg
    html: Path | None = None  # --html: also the HTML page
    force: bool = False
    width: int | None = None  # the terminal's columns (tests)

    def checked(self) -> SweepView:
        from dbo_trace.render.sweep import SWEEP_RENDERERS

        if self.format not in SWEEP_RENDERERS and self.format not in PICTURES:
            fail(
                f"{self.folder}: a load sweep's summary is written as text, Markdown, HTML, JSON, .png or .svg, "
                f"not as {self.format}"
            )
        refuse_overwrite(self.output, self.plot, self.html, force=self.force)
        if self.plot is not None and self.plot.suffix.lower().lstrip(".") not in PICTURES:
            fail(f"{self.plot}: --plot writes .png or .svg; name the file with one of those")
        return self


def refuse_with_sweep(paths: tuple[Path, ...], what: str) -> None:
    """A sweep folder is read on its own: given among other inputs it would be taken for traces."""
    from dbo_trace.sweep_folder import is_sweep

    if len(paths) > 1 and any(is_sweep(p) for p in paths):
        folder = next(p for p in paths if is_sweep(p))
        fail(f"{folder}: a load sweep's folder, read on its own: `dbo-trace {what} {folder}`; "
             f"to {what} some of its runs with other inputs, give their bundles ({folder}/ARM/LOAD)")  # fmt: skip


def run(view: SweepView) -> None:
    with common.warnings_after(fold=True):  # after the summary; the runs' like warnings one line each
        _run(view)


def sweep_document(folder: Path, reports: dict[tuple[str, str], Report] | None = None) -> tuple[Sweep, SweepDocument]:
    """The sweep folder read and summarised; each profiled run's report kept in reports where given
    (`archive` packs them), keyed by (arm, load)."""
    from dbo_trace.analysis.compare.load_sweep import summarise
    from dbo_trace.render.sweep import build_sweep_document
    from dbo_trace.sweep_folder import SweepError, read_sweep

    try:
        sweep = read_sweep(folder)
    except SweepError as exc:
        fail(str(exc))
    spec = sweep.spec
    runs = [figures_of(r, reports) for r in sweep.runs]
    loads = [load_point(sweep, x.name) for x in spec.loads]
    summary = summarise(loads, [a.name for a in spec.arms], runs)
    document = build_sweep_document(
        summary, created=spec.created, command=list(spec.command),
        peer_command=None if spec.peer_command is None else list(spec.peer_command),
        repeats=spec.repeats, profile=spec.profile, warnings=list(sweep.warnings),
    )  # fmt: skip
    return sweep, document


def _run(view: SweepView) -> None:
    from dbo_trace.render.base import RenderOptions
    from dbo_trace.render.sweep import SWEEP_RENDERERS
    from dbo_trace.render.pictures.sweep_plot import draw_sweep

    _, document = sweep_document(view.folder)
    drawn: dict[str, bytes] = {}  # each format drawn once: --plot, --html and the output may ask for one twice

    def picture(fmt: str) -> bytes:
        if fmt not in drawn:
            drawn[fmt] = draw_sweep(document, fmt)
        return drawn[fmt]

    image = None
    if view.plot is not None:
        write_file(picture(view.plot.suffix.lower().lstrip(".")), view.plot, view.force)
        image = os.path.relpath(view.plot, view.output.parent if view.output else Path.cwd())
    if view.html is not None:
        write_output(SWEEP_RENDERERS["html"].render(document, svg=picture("svg")), view.html, view.force)
    if view.format in PICTURES:
        write_file(picture(view.format), view.output, view.force)  # type: ignore[arg-type]  # a picture came from -o
        return
    options = RenderOptions(color=color(view.output), width=view.width, image=image)
    svg = picture("svg") if view.format == "html" else None
    write_output(SWEEP_RENDERERS[view.format].render(document, options, svg), view.output, view.force)


def load_point(sweep: Sweep, name: str) -> LoadPoint:
    """A load as the sweep lists it, with the servers' --max-num-seqs where every run there that says gives the same."""
    from dbo_trace.analysis.compare.load_sweep import LoadPoint

    x = next(x for x in sweep.spec.loads if x.name == name)
    seqs = {n for r in sweep.runs if r.load == name and (n := max_num_seqs(r)) is not None}
    return LoadPoint(x.name, x.concurrency, x.num_prompts, x.input_len, x.output_len, seqs.pop() if len(seqs) == 1 else None)


def max_num_seqs(run: SweepRun) -> int | None:
    settings = run.manifest.settings if run.manifest is not None else None
    batching = settings.get("batching") if isinstance(settings, dict) else None
    value = batching.get("max-num-seqs") if isinstance(batching, dict) else None
    n = whole_number(value.strip() if isinstance(value, str) else value)
    return n if n is not None and 0 < n < 1 << 31 else None


def decode_threshold(run: SweepRun) -> int | None:
    """The --dbo-decode-token-threshold the run's server was started with, as its settings record it."""
    settings = run.manifest.settings if run.manifest is not None else None
    dbo = settings.get("dbo") if isinstance(settings, dict) else None
    value = dbo.get("dbo-decode-token-threshold") if isinstance(dbo, dict) else None
    n = whole_number(value.strip() if isinstance(value, str) else value)
    return n if n is not None and 0 <= n < 1 << 31 else None


def figures_of(run: SweepRun, reports: dict[tuple[str, str], Report] | None = None) -> RunFigures:
    """One run's figures: its usable repeats, what it ran with (its settings; its trace where profiled
    and the settings do not say), and, where it holds a profiled window, compare's row of it."""
    from dbo_trace.analysis.compare.arms import ALL_STEPS, RanWith, arm_of, declared, has_marked_periods, ran_with
    from dbo_trace.analysis.model import Options
    from dbo_trace.analysis.afd.gpu_sharing import verified_mps
    from dbo_trace.analysis.afd.roles import FFN
    from dbo_trace.analysis.compare.load_sweep import RunFigures
    from dbo_trace.analysis.compare.unprofiled import repeats_of

    m = run.manifest
    if m is None:
        return RunFigures(run.arm, run.load, run.status, run.reason, (), None)
    repeats = repeats_of(m.repeats) if run.status == "complete" else ()
    threshold = decode_threshold(run)
    graphs, mode, dbo = declared(m.settings)
    told = RanWith(graphs, mode, dbo, "settings", False, verified_mps(m.gpu_sharing)) if dbo is not None else None
    if not (run.usable and run.profiled and run.bundle is not None):
        return RunFigures(run.arm, run.load, run.status, run.reason, repeats, told, decode_threshold=threshold)
    who = f"{run.arm} at {run.load}"
    try:
        report = common.analyzed([run.bundle], Options(), arm=who)
    except UsageError as exc:
        warn(f"{who}: its profiled window is not used ({exc})")
        return RunFigures(run.arm, run.load, run.status, run.reason, repeats, told, decode_threshold=threshold)
    if not any(r.steps for r in report.ranks):
        warn(f"{who}: its profiled window has no step with GPU activity; only its timed repeats are used")
        return RunFigures(run.arm, run.load, run.status, run.reason, repeats, told, decode_threshold=threshold)
    if reports is not None:
        reports[(run.arm, run.load)] = report
    with_trace = ran_with(report, m.settings)
    # vLLM's annotations time every profiled run of a sweep (vLLM serve writes them), as compare does
    row = arm_of(run.arm, report, ALL_STEPS, with_trace, has_marked_periods(report))
    steady_decode = [s for r in report.ranks if r.role != FFN for s in r.steps if s.phase == "decode" and s.stall is None]
    decode = [
        (s.context_tokens or 0) + (s.generation_tokens or 0) for s in steady_decode if s.context_tokens or s.generation_tokens
    ]
    return RunFigures(
        run.arm, run.load, run.status, run.reason, repeats, with_trace, row, statistics.median(decode) if decode else None,
        threshold,
    )  # fmt: skip
