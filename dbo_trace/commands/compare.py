"""`dbo-trace compare`: arms of an ablation side by side."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dbo_trace.commands import common
from dbo_trace.commands.common import color, fail, output_name, refuse_overwrite, warn, write_output
from dbo_trace.errors import UsageError
from dbo_trace.files import followed

if TYPE_CHECKING:
    from dbo_trace.bundle import Manifest
    from dbo_trace.commands.sweep_summary import SweepView


@dataclass(frozen=True)
class CompareRequest:
    arms: tuple[Path, ...]
    as_json: bool = False
    as_markdown: bool = False
    labels: tuple[str, ...] = ()
    layers: int | None = None
    output: Path | None = None
    force: bool = False
    ray: str | None = None  # a Ray cluster's address: each arm's ranks analysed on its nodes (dbo_trace/app/ray_executor.py)
    plot: Path | None = None  # --plot: a load sweep's picture; only for a sweep's folder
    format_given: str | None = None  # --format as given: text, json or markdown

    @property
    def format(self) -> str:
        """json, markdown or terminal (checked() refuses a format compare does not write)."""
        from dbo_trace.render.compare import COMPARE_RENDERERS

        written = {r.name: r.suffixes for r in COMPARE_RENDERERS.values()}
        return output_name(self.as_json, self.as_markdown, self.output, self.format_given, written)

    @property
    def names(self) -> list[str]:
        return list(self.labels) or arm_labels(self.arms)

    def checked(self) -> CompareRequest | SweepView:
        """This request, checked; for one load sweep's folder, its SweepView (commands/sweep_summary.py)."""
        from dbo_trace.commands.sweep_summary import SweepView, refuse_with_sweep
        from dbo_trace.sweep_folder import is_sweep

        if len(self.arms) == 1 and is_sweep(self.arms[0]):  # the sweep's summary writes report's formats
            if self.labels or self.layers is not None or self.ray is not None:
                fail(f"{self.arms[0]}: a load sweep's folder names its own arms; --label, --layers and --ray are for bundles")
            name = output_name(self.as_json, self.as_markdown, self.output, self.format_given)
            return SweepView(self.arms[0], name, self.output, self.plot, None, self.force).checked()
        if self.format_given not in (None, "text", "json", "markdown"):
            fail(f"--format {self.format_given}: compare writes text, json or markdown")
        self.format  # --json with --markdown, or -o x.html: refused first
        refuse_with_sweep(self.arms, "compare")
        if self.plot is not None:
            fail("--plot draws a load sweep's folder (dbo-trace sweep's OUT); give the folder alone")
        if len(self.arms) < 2:
            fail("compare needs at least two arms (bundles or traces)")
        if self.labels and len(self.labels) != len(self.arms):
            times = "once" if len(self.labels) == 1 else f"{len(self.labels)} times"
            fail(f"--label given {times} for {len(self.arms)} arms; give one per arm or none")
        twice = next((label for i, label in enumerate(self.labels) if label in self.labels[:i]), None)
        if twice is not None:
            fail(f"--label {twice!r} given twice; each arm needs a label of its own")
        refuse_overwrite(self.output, force=self.force)
        return self


def run(request: CompareRequest | SweepView) -> None:
    if not isinstance(request, CompareRequest):
        from dbo_trace.commands import sweep_summary

        return sweep_summary.run(request)
    # the arms' warnings under the table, not a screenful above it; one per cause, naming its arms
    with common.warnings_after(fold=True, runs=request.names):
        _compare(request)


def _compare(request: CompareRequest) -> None:
    from dbo_trace.analysis.compare.arms import arms_of, dbo_pairs, declared, has_marked_periods, load_keys, ran_with, shape_differences, shared_phases
    from dbo_trace.analysis.compare.arms import compare as compare_arms
    from dbo_trace.analysis.model import Options
    from dbo_trace.bundle import served_settings
    from dbo_trace.render import RenderOptions
    from dbo_trace.render.compare import COMPARE_RENDERERS, shape_text

    from dbo_trace.analysis.afd.dbo_model import WHAT_OTHER
    from dbo_trace.commands.calibration import default_calibration

    renderer = COMPARE_RENDERERS[request.format]
    names = request.names
    reports = []
    # each AFD arm's other arm predicted by the one-arm model, beside the pair's measurement
    try:
        calibration = default_calibration()
    except UsageError as exc:  # the model is beside the measurement: without it, compare still measures
        warn(f"no one-arm predictions: {exc}")
        calibration = None
    options = Options(layers=request.layers, what_if_dbo=WHAT_OTHER if calibration else None, calibration=calibration)
    manifests: list[Manifest | None] = []  # each arm's bundle's, as its analysis decoded it; None: traces alone
    for name, path in zip(names, request.arms):
        report, found = common.analyzed_with_manifests([path], options, ray=request.ray, arm=name)
        if not any(r.steps for r in report.ranks):
            fail(f"{path}: no step with GPU activity to compare")
        reports.append(report)
        manifests.append(found[0] if found else None)
    settings = [served_settings(m) if m is not None else None for m in manifests]
    declared_dbo = [declared(s)[2] for s in settings]
    for diff in shape_differences(names, reports):
        if diff.key == "microbatched" and all(d is not None and d == v for d, (_, v) in zip(declared_dbo, diff.values)):
            continue  # a DBO ablation: the arms differ in microbatches because their settings turn DBO on and off
        warn(shape_text(diff))
    phases = shared_phases(reports)
    marked = all(has_marked_periods(rep) for rep in reports)  # every arm timed by vLLM's annotations, or none
    compared = compare_arms(
        [
            replace(a, arm=i)  # the arm's identity: its data is keyed by it, never by its label
            for i, (name, rep, m, s) in enumerate(zip(names, reports, manifests, settings))
            for a in arms_of(name, rep, phases, ran_with(rep, s, m.load if m is not None else None), marked)
        ]
    )
    unprofiled = unprofiled_arms(names, reports, load_keys(compared))
    # the pairs of the arms as measured, in the table's order (its first fitting DBO-off arm is the partner)
    pairs = dbo_pairs([r.measured for r in compared], [t.measured for t in unprofiled])
    write_output(renderer.render(compared, RenderOptions(color=color(request.output)), unprofiled, pairs), request.output, request.force)


def arm_labels(paths: tuple[Path, ...]) -> list[str]:
    """Each arm's label: its folder's name, or, where folders share one, as many of the path's last
    parts as set them apart (graphs/c64, graphs-dbo/c64); the same folder given twice is numbered.
    Labels name arms in the output, so two alike would read as one arm."""
    names = [p.name or str(p) for p in paths]
    parts = [followed(Path(p)).parts for p in paths]
    out = list(names)
    for name in dict.fromkeys(names):
        group = [i for i, n in enumerate(names) if n == name]
        if len(group) < 2:
            continue
        most = max(len(parts[i]) for i in group)
        k = next((k for k in range(2, most + 1) if len({parts[i][-k:] for i in group}) == len(group)), None)
        for position, i in enumerate(group, 1):
            out[i] = Path(*parts[i][-k:]).as_posix() if k is not None else f"{name} (arm {position})"
    return out


def unprofiled_arms(names: list[str], reports: list, load_of: dict[int, int] | None = None) -> list:
    """The arms whose recording holds timed repeats (record --repeats), each with its profiled step
    period as its own report measured the profiler's overhead (analysis/compare/unprofiled.py), and its
    change against the first of them at its load (load_of: arms.load_keys), beside it (TimedArm)."""
    from dbo_trace.analysis.compare.unprofiled import against_first

    return against_first(
        [replace(rep.unprofiled, label=name, arm=i) for i, (name, rep) in enumerate(zip(names, reports)) if rep.unprofiled is not None],
        load_of,
    )
