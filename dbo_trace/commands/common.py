"""What the commands share: the one way a request is refused (fail), the output format a request
asks for, the checks made before any work (outputs not overwritten, folders new or empty), writing
an output, and reading and analysing the inputs with a progress bar."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from dbo_trace.errors import UsageError, inert
from dbo_trace.files import create_file, replace_file
from dbo_trace.ui import reading_bar

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Options, Report


MAX_WORKERS = 1024  # --workers and $DBO_TRACE_WORKERS: processes; more is a typo, not a machine


def fail(message: str, code: int = 2) -> NoReturn:
    raise UsageError(message, code)


def check_workers_env(name: str) -> None:
    """The environment's worker count, where set, a number of processes in range (as --workers is)."""
    value = os.environ.get(name, "")
    if value and not (value.isdigit() and 1 <= int(value) <= MAX_WORKERS):
        fail(f"{name}={value!r}: give a number of processes from 1 to {MAX_WORKERS} (or unset it)")


def one_format(as_json: bool, as_markdown: bool) -> str:
    """--json or --markdown or neither: both at once would silently lose one."""
    if as_json and as_markdown:
        fail("--json and --markdown choose one output each; give one of them (or write one with -o and run again)")
    return "json" if as_json else "markdown" if as_markdown else "terminal"


def output_name(as_json: bool, as_markdown: bool, output: Path | None) -> str:
    """--json or --markdown, else what -o's suffix names (.json, .md, .html, .pftrace, .png, .svg),
    else the terminal summary."""
    from dbo_trace.render import for_path

    flagged = one_format(as_json, as_markdown)
    by_suffix = for_path(output) if output is not None and flagged == "terminal" else None
    return by_suffix.name if by_suffix is not None else flagged


def check_regexes(patterns: tuple[str, ...]) -> None:
    """The user's regular expressions, each compiled once here so that a bad one is refused before
    any work (the analysis compiles them again from re's cache)."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            fail(f"{pattern!r}: not a valid regular expression ({exc})")


def terminal_width() -> int:
    """The columns the commands' own lines fit (doctor, top, archive): render.layout's one rule."""
    from dbo_trace.render.layout import terminal_width as width

    return width()


def color(output: Path | None) -> bool:
    """ANSI colour only for a terminal on stdout."""
    return output is None and sys.stdout.isatty()


def refuse_overwrite(*paths: Path | None, force: bool) -> None:
    """Before any work, so nothing the user had is lost and no output is left half-made: outputs are
    distinct, their folders exist and are writable, and an existing output needs --force."""
    given = [p for p in paths if p is not None]
    seen: dict[Path, Path] = {}
    for path in given:
        key = path.resolve()
        if key in seen:
            fail(f"{path}: given for two outputs; give each output its own file")
        seen[key] = path
        if path.is_dir():
            fail(f"{path}: is a folder; give a file name for the output")
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            fail(f"{path}: the folder {folder} does not exist; create it first")
        if not os.access(folder, os.W_OK):
            fail(f"{path}: the folder {folder} is not writable")
        if path.exists() and not force:
            fail(f"{path}: already exists; choose another path or pass --force to replace it")


def refuse_nonempty(out: Path) -> None:
    """A folder to create and fill: it must be new or empty."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"{out}: already exists and is not empty; choose another --out (nothing there was changed)")


def write_output(text: str | Iterator[bytes], output: Path | None, force: bool) -> None:
    """stdout, or the file (replaced only with --force); text whole, or as UTF-8 in pieces of whole
    characters (--json's), which stdout takes through its text layer as it takes a str (its
    encoding, its newlines; a stream without a byte layer under it)."""
    if output is None:
        try:
            for piece in [text] if isinstance(text, str) else map(bytes.decode, text):
                click.echo(piece, nl=False)
        except BrokenPipeError:  # `report --json | head`: the reader has what it wanted
            stdout_gone()
        return
    write_file(text.encode() if isinstance(text, str) else text, output, force)


def stdout_gone() -> None:
    """The reader of stdout left (`| head`): what is still written, and the flush at exit, go
    nowhere, and the command ends as it would have (exit 0, nothing on stderr)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stream with no file under it
        pass


def write_file(data: bytes | Iterator[bytes], path: Path, force: bool) -> None:
    """Write via a temporary file, so an interrupted write never leaves half a file where the user
    looks. Without --force the file is created exclusively: refuse_overwrite checked before the work,
    but another process (a second `report -o` of the same name) may have written it since. data:
    whole, or in pieces written as they come."""
    written = [0]

    def counted(pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            written[0] += len(piece)
            yield piece

    try:
        (replace_file if force else create_file)(path, data if isinstance(data, bytes) else counted(data))
    except FileExistsError:
        fail(f"{path}: already exists (written since dbo-trace started, by another process?); nothing was replaced: "
             "choose another path or pass --force to replace it")  # fmt: skip
    except OSError as exc:
        fail(f"{path}: cannot write ({exc.strerror})")
    click.echo(f"wrote {inert(str(path))} ({(len(data) if isinstance(data, bytes) else written[0]) / 1e6:.2f} MB)", err=True)


def warn(message: str) -> None:
    click.echo(f"dbo-trace: warning: {inert(message)}", err=True)


def analyzed(
    paths: list[Path], options: Options, workers: int | None = None, ray: str | None = None, arm: str | None = None
) -> Report:
    """Read and analyse the inputs (with ray, a cluster's address: on its nodes, dbo_trace/scale.py);
    bad input is one line and exit 2; warnings go to stderr, each naming the arm (compare's) it is of."""
    from dbo_trace.archive import is_archive
    from dbo_trace.pipeline import WORKERS_ENV, analyze_found, workers_for
    from dbo_trace.render.notes import note_text
    from dbo_trace.trace.load import discover, total_bytes

    if workers is None and ray is None:
        check_workers_env(WORKERS_ENV)
    for path in paths:  # `report ARCHIVE` alone shows one (commands/report.py); nothing else reads them
        if is_archive(path):
            fail(f"{path}: a review archive, which holds a finished report, not traces: `dbo-trace report {path}` "
                 "shows it on its own; give the recording's bundle folder or traces here")  # fmt: skip
    if ray is not None:
        from dbo_trace.scale import analyze_on_ray

        result = analyze_on_ray(ray, [str(p) for p in paths], options)
    else:
        found = discover(paths)  # bad input raises InputError, a UsageError: one line, exit 2
        size = total_bytes(found)
        with reading_bar(size) as progress:
            n = workers_for(len(found.traces), workers, size)
            result = analyze_found(found, options, [str(p) for p in paths], n, progress)
    for warning in result.warnings:
        warn(note_text(warning) if arm is None else f"{arm}: {note_text(warning)}")
    return result
