"""`dbo-trace report`: traces, a folder or a bundle analysed and rendered; or, for one review
archive, the report it holds shown again (ArchiveView: nothing is re-analysed)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dbo_trace.commands import common
from dbo_trace.commands.common import check_regexes, color, fail, output_name, refuse_overwrite, write_file, write_output
from dbo_trace.errors import inert

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Options, RankReport, Report
    from dbo_trace.commands.sweep_summary import SweepView
    from dbo_trace.render import Renderer


@dataclass(frozen=True)
class ArchiveView:
    """`report ARCHIVE`: the finished report a review archive holds, as text, Markdown or JSON."""

    archive: Path
    format: str  # a renderer's name (output_name)
    output: Path | None = None
    force: bool = False

    def checked(self) -> ArchiveView:
        from dbo_trace.render import RENDERERS

        refuse_overwrite(self.output, force=self.force)
        if not hasattr(RENDERERS[self.format], "render_document"):
            fail(f"{self.archive}: a review archive can be shown as text, Markdown or JSON, not as {self.format}")
        return self


@dataclass(frozen=True)
class ReportRequest:
    paths: tuple[Path, ...]
    as_json: bool = False
    as_markdown: bool = False
    comm_kernels: tuple[str, ...] = ()
    comm_kernels_only: tuple[str, ...] = ()
    step_marker: str | None = None
    comm_streams: tuple[int, ...] = ()
    ubatch_patterns: tuple[str, ...] = ()
    layers: int | None = None
    output: Path | None = None
    timeline: Path | None = None
    perfetto: Path | None = None
    html: Path | None = None
    step: str | None = None  # --step as given: a number, #number, a label, median or slowest
    rank: int | None = None
    layer: int | None = None  # --layer: only this layer's comm operations and hand-overs
    what_if: tuple[str, ...] = ()  # --what-if as given: round-trip=TIME, sms=N, dbo=on|off
    calibrate: tuple[Path, ...] = ()  # --calibrate: recorded AFD pairs for --what-if dbo=
    all_ranks: bool = False
    window: str | None = None  # --window as given: START:END (render/pictures/step_view.py parse_window)
    workers: int | None = None
    ray: str | None = None  # a Ray cluster's address: each rank analysed on its node (dbo_trace/app/ray_executor.py)
    force: bool = False
    host_stacks: bool = False  # the terminal prints the host idle by sampled Python frame as tables
    plot: Path | None = None  # --plot: a load sweep's picture (.png or .svg); only for a sweep's folder
    format_given: str | None = None  # --format as given: text, json, markdown or html (common.FORMATS)

    @property
    def format(self) -> str:
        return output_name(self.as_json, self.as_markdown, self.output, self.format_given)

    @property
    def options(self) -> Options:
        from dbo_trace.analysis.model import Options

        return Options(
            tuple(self.comm_kernels or self.comm_kernels_only),
            tuple(self.comm_streams),
            tuple(self.ubatch_patterns),
            self.layers,
            step_marker=self.step_marker,
            comm_only=bool(self.comm_kernels_only),
            what_if_round_trip_us=tuple(v for x in self._model_what_ifs if isinstance(v := what_if_value(x), float)),
            what_if_comm_sms=tuple(v for x in self._model_what_ifs if isinstance(v := what_if_value(x), int)),
            what_if_dbo=self.what_if_dbo,
        )

    @property
    def what_if_dbo(self) -> str | None:
        """--what-if dbo=on|off: the arm to predict (the last given)."""
        found = [m.group(1) for x in self.what_if if (m := _WHAT_IF_DBO.fullmatch(x.strip()))]
        return found[-1] if found else None

    @property
    def _model_what_ifs(self) -> tuple[str, ...]:
        return tuple(x for x in self.what_if if not _WHAT_IF_DBO.fullmatch(x.strip()))

    def _reanalyses(self) -> bool:
        """Options that need the traces: analysis options, workers, pictures, the step chosen."""
        analysis = (self.comm_kernels, self.comm_kernels_only, self.step_marker, self.comm_streams, self.ubatch_patterns)
        drawing = (self.timeline, self.perfetto, self.html, self.step, self.rank, self.all_ranks, self.window)
        return any((*analysis, self.layers, self.workers, self.ray, *drawing, *self.what_if)) or self.layer is not None

    def checked(self) -> ReportRequest | ArchiveView | SweepView:
        """This request, every option checked before any work; for one review archive, the
        ArchiveView it amounts to (checked too); for one load sweep's folder, its SweepView."""
        from dbo_trace.commands.sweep_summary import SweepView, refuse_with_sweep
        from dbo_trace.sweep_folder import is_sweep

        name = self.format
        if len(self.paths) == 1 and is_sweep(self.paths[0]):
            if replace(self, html=None)._reanalyses() or self.host_stacks:  # --html is the sweep's page too
                fail(f"{self.paths[0]}: a load sweep's folder gives the sweep's summary (--json, --markdown, -o, --plot, "
                     "--html); to analyse or draw one run, give its bundle (OUT/ARM/LOAD)")  # fmt: skip
            return SweepView(self.paths[0], name, self.output, self.plot, self.html, self.force).checked()
        refuse_with_sweep(self.paths, "report")
        if self.plot is not None:
            fail("--plot draws a load sweep's folder (dbo-trace sweep's OUT); a step's picture is --timeline FILE.png")
        if len(self.paths) == 1 and _is_archive(self.paths[0]):
            if self._reanalyses():
                fail(f"{self.paths[0]}: a review archive holds the finished report, not the traces: it can be shown as text, "
                     "Markdown or JSON, not re-analysed or drawn; run those options on the recording")  # fmt: skip
            return ArchiveView(self.paths[0], name, self.output, self.force).checked()
        if (self.step is not None or self.rank is not None) and self.timeline is None:
            fail("--step and --rank choose the step that --timeline draws; add --timeline FILE.png (or drop them)")
        if self.layer is not None and name == "json":
            fail(f"--layer {self.layer} narrows the terminal and Markdown views; --json lists every layer (drop one of them)")
        if self.all_ranks and self.timeline is None:
            fail("--all-ranks draws every rank's step in --timeline; add --timeline FILE.png (or drop it)")
        if self.ray is not None:
            pictures = (("--timeline", self.timeline), ("--perfetto", self.perfetto), ("--html", self.html))
            drawn = [flag for flag, v in pictures if v]
            if drawn or self.format in ("html", "perfetto", "png", "svg"):
                what = drawn[0] if drawn else f"-o {self.output}" if self.output is not None else f"--format {self.format}"
                fail(f"{what} draws from every event of a trace, which stays on its node with --ray; "
                     "draw it with `dbo-trace report` on the node (or a copy of the trace)")  # fmt: skip
            if self.workers is not None:
                fail("--workers sets this machine's processes; with --ray each rank runs on its node: give one of them")
        if self.window is not None and self.timeline is None:
            fail("--window chooses the span that --timeline draws; add --timeline FILE.png (or drop it)")
        if self.window is not None and (self.step is not None or self.all_ranks):
            fail("--window draws a span instead of one step: give it without --step and --all-ranks")
        if self.comm_kernels and self.comm_kernels_only:
            fail("--comm-kernels adds to the built-in set and --comm-kernels-only replaces it: give one of them")
        check_regexes({
            "--comm-kernels": self.comm_kernels, "--comm-kernels-only": self.comm_kernels_only,
            "--ubatch-pattern": self.ubatch_patterns, "--step-marker": _given(self.step_marker),
        })  # fmt: skip
        for x in self._model_what_ifs:
            what_if_value(x)
        asked = {m.group(1) for x in self.what_if if (m := _WHAT_IF_DBO.fullmatch(x.strip()))}
        if len(asked) > 1:
            fail("--what-if dbo=on and dbo=off both given: one arm predicts the other, so give the one this arm "
                 "lacks (dbo=on of a DBO-off arm, dbo=off of a DBO arm)")  # fmt: skip
        if self.calibrate and self.what_if_dbo is None:
            fail("--calibrate is what --what-if dbo=on|off is calibrated on; add --what-if dbo=on (or dbo=off)")
        refuse_overwrite(self.output, self.timeline, self.perfetto, self.html, force=self.force)
        if self.timeline is not None and self.picture is None:
            fail(f"{self.timeline}: --timeline writes .png or .svg; name the file with one of those")
        return self

    @property
    def picture(self) -> Renderer | None:
        """The renderer of --timeline's file: PNG or SVG, else None."""
        from dbo_trace.render import for_path

        found = for_path(self.timeline) if self.timeline is not None else None
        return found if found is not None and found.name in ("png", "svg") else None


_WHAT_IF = re.compile(r"round-trip=(\d+(?:\.\d+)?)(us|ms)")
_WHAT_IF_SMS = re.compile(r"sms=(\d+)")
_WHAT_IF_DBO = re.compile(r"dbo=(on|off)")
# More SMs than any GPU has (an H100 has 132, a B200 148, an MI300X 304 CUs): beyond it, a slip. The
# GPU's own count bounds N again once its trace is read (analysis/what_if.py).
SMS_MOST = 1023


def what_if_value(text: str) -> float | int:
    """--what-if round-trip=100us (or 1.2ms): the round trip in microseconds (a float); sms=N: the
    SMs kept for comm (an int); or the user's line."""
    sms = _WHAT_IF_SMS.fullmatch(text.strip())
    if sms is not None:
        digits = sms.group(1).lstrip("0") or "0"
        if len(digits) > len(str(SMS_MOST)) or not 1 <= int(digits) <= SMS_MOST:  # the length first: no int of 10^6 digits
            shown = digits if len(digits) <= 24 else digits[:12] + f"... ({len(digits)} digits)"
            fail(f"--what-if sms={shown}: out of range; give N from 1 to {SMS_MOST} SMs kept for comm, fewer than the GPU has")
        return int(digits)
    m = _WHAT_IF.fullmatch(text.strip())
    if m is None:
        fail(f"--what-if {text!r}: give round-trip=TIME with us or ms (round-trip=100us), sms=N (sms=20), or on an AFD "
             "arm dbo=on or dbo=off")  # fmt: skip
    value = float(m.group(1)) * (1000.0 if m.group(2) == "ms" else 1.0)
    if not 0 < value < 1e9:
        fail(f"--what-if {text!r}: the round trip must be above 0 and under 1000 s")
    return value


def _given(pattern: str | None) -> tuple[str, ...]:
    return (pattern,) if pattern else ()


def _is_archive(path: Path) -> bool:
    from dbo_trace.app.review_archive import is_archive

    return is_archive(path)


def run(request: ReportRequest | ArchiveView | SweepView) -> None:
    """A checked request's work: analyse and write every output asked for; or show an archive, or a
    load sweep's summary."""
    if isinstance(request, ArchiveView):
        return show_archive(request)
    if not isinstance(request, ReportRequest):
        from dbo_trace.commands import sweep_summary

        return sweep_summary.run(request)
    import os

    from dbo_trace.render import RENDERERS, RenderOptions, as_bytes

    main_output = RENDERERS[request.format]
    picture, timeline, output = request.picture, request.timeline, request.output
    if picture is not None:
        from dbo_trace.render.pictures.timeline_png import import_in_background

        import_in_background()  # matplotlib's import, as long as drawing a step, beside the trace's read
    from dbo_trace.commands.calibration import with_calibration

    options = with_calibration(request.options, request.calibrate)
    result = common.analyzed(list(request.paths), options, request.workers, request.ray)
    drawn = drawn_step(result, request.rank, request.step) if picture is not None else None
    if drawn is not None and request.window is not None:
        drawn_window(drawn[0], request.window)
    if request.layer is not None:
        check_layer(result, request.layer)
    if request.host_stacks and not any(r.host_stacks is not None for r in result.ranks):
        common.warn("--host-stacks: no rank has sampled Python stacks (py-spy's pystacks/ in a bundle "
                    "`dbo-trace record` wrote), so there is no table to print")  # fmt: skip
    shown = RenderOptions(
        color=color(output),
        image=os.path.relpath(timeline, output.parent if output else Path.cwd()) if timeline is not None else None,
        image_base="file" if output is not None else "cwd",
        step=request.step,
        rank=request.rank,
        layer=request.layer,
        all_ranks=request.all_ranks,
        window=request.window,
        host_stacks=request.host_stacks,
    )
    # The picture first, so that the Markdown can link it.
    # A renderer is named, not looked up, until its output is asked for: looking one up imports it.
    extras = [(timeline, picture), (request.perfetto, "perfetto"), (request.html, "html")]
    for path, chosen in extras:
        if path is not None and chosen is not None:
            renderer = RENDERERS[chosen] if isinstance(chosen, str) else chosen
            write_file(as_bytes(renderer.render(result, shown)), path, request.force)
            if renderer is picture and drawn is not None:
                from dbo_trace.render.pictures.step_view import step_name

                rank, position = drawn
                who = "every rank" if request.all_ranks else f"rank {rank.rank}"
                what = f"window {request.window}" if request.window is not None else f"step {inert(step_name(rank, position))}"
                click.echo(f"  {who}, {what}", err=True)
                if main_output.name == "markdown":  # a comment cannot show a local file: the Markdown says so too
                    click.echo("  attach it to the comment by hand: drag it into GitHub's comment box", err=True)
    in_pieces = getattr(main_output, "render_chunks", None)  # --json: written as it is encoded
    if in_pieces is not None:
        return write_output(in_pieces(result, shown), output, request.force)
    rendered = main_output.render(result, shown)
    if main_output.binary:
        write_file(as_bytes(rendered), output, request.force)  # type: ignore[arg-type]  # a binary format came from -o
    else:
        write_output(str(rendered), output, request.force)


def check_layer(report: Report, layer: int) -> None:
    """--layer N names a layer some rank's comm operations or hand-overs are labelled with."""
    from dbo_trace.render.document import build_document
    from dbo_trace.render.format import layers_seen

    seen = layers_seen(build_document(report, lazy_steps=True))
    if layer not in seen:
        known = f"layers {min(seen)} to {max(seen)}" if seen else "no layer labels (pass --layers, or record with the event log)"
        fail(f"--layer {layer}: the report has {known}")


def drawn_step(report: Report, rank: int | None, step: str | None) -> tuple[RankReport, int]:
    """The rank and step position a picture draws (render/pictures/step_view.py chosen_step), or the user's
    line saying, in the command line's words, what --rank or --step named that is not there."""
    from dbo_trace.render.pictures.step_view import MEDIAN, SLOWEST, NoStepToDraw, RankNotFound, StepNotFound, chosen_step

    try:
        return chosen_step(report, rank, step)
    except RankNotFound as exc:
        fail(f"--rank {exc.asked}: the input has ranks {list(exc.ranks)}")
    except NoStepToDraw as exc:
        fail(f"rank {exc.rank} has no step with GPU activity to draw")
    except StepNotFound as exc:
        text, n = exc.asked, exc.steps
        if exc.numbered:
            fail(f"--step {text}: rank {exc.rank} has {n} steps (#1 to #{n}: the per-step table's numbers)")
        if exc.matches:
            numbers = ", ".join(f"#{k}" for k in exc.matches[:5]) + (", ..." if len(exc.matches) > 5 else "")
            fail(f"--step {text!r}: {len(exc.matches)} steps of rank {exc.rank} have this label ({numbers}); give a number")
        fail(
            f"--step {text!r}: no step of rank {exc.rank} has this label; give a number (#1 to #{n}), a label, "
            f"{MEDIAN} or {SLOWEST}"
        )


def drawn_window(rank: RankReport, window: str) -> tuple[float, float]:
    """The span --window names (render/pictures/step_view.py parse_window), or the user's line saying why not."""
    from dbo_trace.render.pictures.step_view import WindowNotFound, parse_window

    try:
        return parse_window(rank, window)
    except WindowNotFound as exc:
        fail(f"--window {exc.asked!r}: {exc.why} (rank {exc.rank} has {exc.steps} steps; ms from its first step's start, or #N)")


def show_archive(view: ArchiveView) -> None:
    """The report an archive holds, as text, Markdown or JSON (from its document; nothing recomputed)."""
    from dbo_trace.app.review_archive import read_archive_stored
    from dbo_trace.render import RENDERERS, RenderOptions
    from dbo_trace.render.safe import json_inert_utf8
    from dbo_trace.render.sweep import SWEEP_RENDERERS, SweepDocument

    renderer = RENDERERS[view.format]
    document, stored = read_archive_stored(view.archive)
    if view.format == "json":  # the document the archive holds, as stored (checked above), its strings made inert
        write_output(json_inert_utf8(stored).decode(), view.output, view.force)
        return
    if isinstance(document, SweepDocument):  # a load sweep's archive: its summary, as `report OUT` gives it
        text = SWEEP_RENDERERS[view.format].render(document, RenderOptions(color=color(view.output)))
        write_output(text, view.output, view.force)
        return
    write_output(renderer.render_document(document, RenderOptions(color=color(view.output))), view.output, view.force)  # type: ignore[attr-defined]
