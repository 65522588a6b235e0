"""`dbo-trace archive`: what a reviewer needs, packed into one .tar.gz."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dbo_trace.commands import common
from dbo_trace.commands.common import fail, refuse_overwrite
from dbo_trace.files import followed
from dbo_trace.errors import inert

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Report
    from dbo_trace.app.review_archive import Packed

SUFFIX = ".tar.gz"


@dataclass(frozen=True)
class ArchiveRequest:
    source: Path
    out: Path | None = None  # default: ./NAME-dbo-trace.tar.gz
    max_mb: float = 25.0
    steps: int = 3
    layers: int | None = None
    force: bool = False

    @property
    def archive(self) -> Path:
        return self.out or Path(f"{followed(self.source).name}-dbo-trace.tar.gz")

    def checked(self) -> ArchiveRequest:
        if not self.archive.name.lower().endswith(SUFFIX):  # pack writes a gzipped tar whatever the name says
            fail(f"{self.archive}: dbo-trace archive writes a gzipped tar; give -o a name that ends in {SUFFIX}")
        refuse_overwrite(self.archive, force=self.force)
        return self


def _pack_sweep(request: ArchiveRequest, replace: bool) -> Packed:
    """A load sweep's folder: its summary, sweep.json and each profiled run's bundle (app/sweep_archive.py)."""
    from dbo_trace.app.sweep_archive import RunToPack, pack_sweep
    from dbo_trace.commands.sweep_summary import sweep_document
    from dbo_trace.sweep_folder import SweepError, read_sweep_document

    reports: dict[tuple[str, str], Report] = {}
    with common.warnings_after(fold=True):  # the runs' like warnings one line each, as `report OUT` gives them
        sweep, document = sweep_document(request.source, reports)
    runs = [
        RunToPack(r.arm, r.load, r.bundle, reports[(r.arm, r.load)])
        for r in sweep.runs
        if r.bundle is not None and (r.arm, r.load) in reports and any(k.steps for k in reports[(r.arm, r.load)].ranks)
    ]
    try:
        spec = read_sweep_document(request.source)  # read_sweep checked it already: the whole, to copy redacted
    except SweepError as exc:  # replaced since
        fail(str(exc))
    return pack_sweep(document, spec, runs, request.archive, int(request.max_mb * 1e6), request.steps, force=replace)


def run(request: ArchiveRequest) -> None:
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.review_archive import pack
    from dbo_trace.sweep_folder import is_sweep

    out, source = request.archive, request.source
    try:
        replace = request.force or common.written_by_dbo_trace(out)  # a previous archive of ours: a rerun
        if is_sweep(source):
            packed = _pack_sweep(request, replace)
        else:
            result = common.analyzed([source], Options(layers=request.layers))
            if not any(r.steps for r in result.ranks):
                fail(f"{source}: no step with GPU activity; nothing to draw or trim")
            packed = pack(result, source, out, int(request.max_mb * 1e6), request.steps, force=replace)
    except FileExistsError:
        fail(f"{out}: appeared while the archive was made; not replaced (use --force to replace it)")
    except ValueError as exc:
        fail(f"{out}: {exc}")
    from dbo_trace.render.layout import wrap

    width = common.terminal_width()
    # The path whole on its own line (to copy), what it holds wrapped under it.
    lines = [f"wrote {inert(str(packed.archive))} ({packed.size / 1e6:.2f} MB, cap {request.max_mb:g} MB)"]
    top = [m for m in packed.members if not m.startswith("runs/")]
    runs = {m.split("/")[1] for m in packed.members if m.startswith("runs/")}  # a sweep's: one folder a run
    files = sorted({m.rsplit("/", 1)[1] for m in packed.members if m.startswith("runs/")})
    held = top + ([f"{len(runs)} runs' bundles under runs/ (at most {', '.join(files)} each)"] if runs else [])
    lines += wrap(f"holding {', '.join(held)}", width, "  ", "    ")
    for line in packed.trimmed:
        lines += wrap(inert(line), width, "  ", "    ")  # step labels
    click.echo("\n".join(lines))
