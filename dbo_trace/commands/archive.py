"""`dbo-trace archive`: what a reviewer needs, packed into one .tar.gz."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from dbo_trace.commands import common
from dbo_trace.commands.common import fail, refuse_overwrite
from dbo_trace.errors import inert

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
        return self.out or Path(f"{self.source.resolve().name}-dbo-trace.tar.gz")

    def checked(self) -> ArchiveRequest:
        if not self.archive.name.lower().endswith(SUFFIX):  # pack writes a gzipped tar whatever the name says
            fail(f"{self.archive}: dbo-trace archive writes a gzipped tar; give -o a name that ends in {SUFFIX}")
        refuse_overwrite(self.archive, force=self.force)
        return self


def run(request: ArchiveRequest) -> None:
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.review_archive import pack

    out, source = request.archive, request.source
    result = common.analyzed([source], Options(layers=request.layers))
    if not any(r.steps for r in result.ranks):
        fail(f"{source}: no step with GPU activity; nothing to draw or trim")
    try:
        replace = request.force or common.written_by_dbo_trace(out)  # a previous archive of ours: a rerun
        packed = pack(result, source, out, int(request.max_mb * 1e6), request.steps, force=replace)
    except FileExistsError:
        fail(f"{out}: appeared while the archive was made; not replaced (use --force to replace it)")
    except ValueError as exc:
        fail(f"{out}: {exc}")
    from dbo_trace.render.layout import wrap

    width = common.terminal_width()
    # The path whole on its own line (to copy), what it holds wrapped under it.
    lines = [f"wrote {inert(str(packed.archive))} ({packed.size / 1e6:.2f} MB, cap {request.max_mb:g} MB)"]
    lines += wrap(f"holding {', '.join(packed.members)}", width, "  ", "    ")
    for line in packed.trimmed:
        lines += wrap(inert(line), width, "  ", "    ")  # step labels
    click.echo("\n".join(lines))
