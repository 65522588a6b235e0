"""The dbo-trace command line: parse, call, render. Nothing else lives here."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click

from dbo_trace import __version__
from dbo_trace.trace.errors import InputError

PROGRESS_MIN_BYTES = 32 << 20  # below this a load is quick: no bar


def fail(message: str, code: int = 2) -> "NoReturn":  # noqa: F821
    click.echo(f"dbo-trace: error: {message}", err=True)
    sys.exit(code)


@contextmanager
def _progress(total: int) -> Iterator:
    if total < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        TextColumn("reading traces"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    ) as bar:
        task = bar.add_task("read", total=total)
        yield lambda n: bar.update(task, completed=n)


def _write_output(text: str, output: Path | None) -> None:
    """stdout, or the file (whose replacement the caller already allowed) via a rename."""
    if output is None:
        click.echo(text, nl=False)
        return
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, output)
    except OSError as exc:
        fail(f"{output}: cannot write ({exc.strerror})")
    click.echo(f"wrote {output}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dbo-trace")
def main() -> None:
    """Profiling and overlap diagnosis for dual-batch overlap (DBO) in vLLM."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "fmt", flag_value="json", help="Machine-readable output (docs/report-schema.md).")
@click.option("--markdown", "fmt", flag_value="markdown", help="Markdown for a pull request.")
@click.option("--comm-kernels", "comm_kernels", multiple=True, metavar="REGEX", help="Also count kernels matching REGEX as communication (repeatable).")
@click.option("--comm-stream", "comm_streams", multiple=True, type=int, metavar="ID", help="Count every kernel on stream ID as communication (repeatable).")
@click.option("--ubatch-pattern", "ubatch_patterns", multiple=True, metavar="REGEX", help="CPU ranges of microbatch N match the Nth pattern, e.g. '\\(F\\)' '\\(B\\)' (repeatable).")
@click.option("--layers", type=click.IntRange(min=1), help="Layers per step, for round trips per layer.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to a file instead of stdout.")
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
def report(paths, fmt, comm_kernels, comm_streams, ubatch_patterns, layers, output, force) -> None:
    """Diagnose DBO from traces: a trace file, a folder of traces (one per rank), or a bundle.

    \b
    Answers: do the two microbatches overlap; is the step host-bound; did CUDA
    graphs replay; and does per-microbatch compute cover the comm round trip.
    """
    import re

    from dbo_trace.analysis.report import Options
    from dbo_trace.analysis.session import analyze
    from dbo_trace.render import RENDERERS
    from dbo_trace.trace.load import discover, load, total_bytes

    for pattern in comm_kernels + ubatch_patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            fail(f"{pattern!r}: not a valid regular expression ({exc})")
    if output is not None and output.exists() and not force:  # before any work, so nothing is lost
        fail(f"{output}: already exists; choose another path or pass --force to replace it")
    options = Options(tuple(comm_kernels), tuple(comm_streams), tuple(ubatch_patterns), layers)
    try:
        found = discover(list(paths))
        with _progress(total_bytes(found)) as progress:
            loaded = load(found, progress)
        result = analyze(loaded, options, [str(p) for p in paths])
    except InputError as exc:
        fail(str(exc))
    for warning in loaded.warnings:
        click.echo(f"dbo-trace: warning: {warning}", err=True)
    fmt = fmt or "terminal"
    renderer = RENDERERS[fmt](color=output is None and sys.stdout.isatty()) if fmt == "terminal" else RENDERERS[fmt]()
    _write_output(renderer.render(result), output)


def run() -> None:
    """Console entry point: bad input exits 2 with one line; a bug exits 3 with one line (DBO_TRACE_DEBUG=1 for the traceback)."""
    try:
        main(standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("dbo-trace: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: still one line unless asked
        if os.environ.get("DBO_TRACE_DEBUG"):
            raise
        click.echo(f"dbo-trace: internal error: {type(exc).__name__}: {exc} (set DBO_TRACE_DEBUG=1 for details and please report it)", err=True)
        sys.exit(3)


if __name__ == "__main__":
    run()
