"""`dbo-trace compare`: arms of an ablation side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dbo_trace.commands import common
from dbo_trace.commands.common import color, fail, output_name, refuse_overwrite, warn, write_output


@dataclass(frozen=True)
class CompareRequest:
    arms: tuple[Path, ...]
    as_json: bool = False
    as_markdown: bool = False
    labels: tuple[str, ...] = ()
    layers: int | None = None
    output: Path | None = None
    force: bool = False
    ray: str | None = None  # a Ray cluster's address: each arm's ranks analysed on its nodes (dbo_trace/scale.py)

    @property
    def format(self) -> str:
        """json, markdown or terminal (a suffix compare does not write shows the terminal table)."""
        from dbo_trace.render.compare import COMPARE_RENDERERS

        name = output_name(self.as_json, self.as_markdown, self.output)
        return name if name in COMPARE_RENDERERS else "terminal"

    @property
    def names(self) -> list[str]:
        return list(self.labels) or [p.name or str(p) for p in self.arms]

    def checked(self) -> CompareRequest:
        output_name(self.as_json, self.as_markdown, self.output)  # --json with --markdown: refused first
        if len(self.arms) < 2:
            fail("compare needs at least two arms (bundles or traces)")
        if self.labels and len(self.labels) != len(self.arms):
            times = "once" if len(self.labels) == 1 else f"{len(self.labels)} times"
            fail(f"--label given {times} for {len(self.arms)} arms; give one per arm or none")
        refuse_overwrite(self.output, force=self.force)
        return self


def run(request: CompareRequest) -> None:
    from dbo_trace.analysis.compare import arms_of, shape_warnings, shared_phases
    from dbo_trace.analysis.compare import compare as compare_arms
    from dbo_trace.analysis.model import Options
    from dbo_trace.render import RenderOptions
    from dbo_trace.render.compare import COMPARE_RENDERERS

    renderer = COMPARE_RENDERERS[request.format]
    names = request.names
    reports = []
    for path in request.arms:
        report = common.analyzed([path], Options(layers=request.layers), ray=request.ray)
        if not any(r.steps for r in report.ranks):
            fail(f"{path}: no step with GPU activity to compare")
        reports.append(report)
    for warning in shape_warnings(names, reports):
        warn(warning)
    phases = shared_phases(reports)
    compared = compare_arms([a for name, rep in zip(names, reports) for a in arms_of(name, rep, phases)])
    unprofiled = unprofiled_arms(names, list(request.arms), compared)
    write_output(renderer.render(compared, RenderOptions(color=color(request.output)), unprofiled), request.output, request.force)


def unprofiled_arms(names: list[str], paths: list[Path], compared: list) -> list:
    """The arms whose bundle's manifest holds timed repeats (record --repeats), each with its profiled
    step median (the decode steps' where the arm has them: TPOT is a decode step's period), and the
    change against the first of them."""
    from dbo_trace.analysis.compare import ALL_STEPS
    from dbo_trace.analysis.unprofiled import against_first, unprofiled_of
    from dbo_trace.bundle import BundleError, is_bundle, read_manifest

    rows = []
    for name, path in zip(names, paths):
        if not is_bundle(Path(path)):
            continue
        try:
            repeats = read_manifest(Path(path)).get("repeats")
        except BundleError:
            continue  # the analysis above read it already; a manifest it can use is all that counts here
        mine = {a.phase: a for a in compared if a.label == name}
        step = mine.get("decode") or mine.get(ALL_STEPS)
        row = unprofiled_of(name, repeats, step.step_median_us if step else None)
        if row is not None:
            rows.append(row)
    return against_first(rows)
