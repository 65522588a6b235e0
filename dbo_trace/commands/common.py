"""What the commands share: the one way a request is refused (fail), the output format a request
asks for, the checks made before any work (outputs not overwritten, folders new or empty), writing
an output, and reading and analysing the inputs with a progress bar."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from dbo_trace.errors import UsageError, inert, shown
from dbo_trace.files import create_file, replace_file, resolved
from dbo_trace.ui import reading_bar

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Options, Report
    from dbo_trace.bundle import Manifest


MAX_WORKERS = 1024  # --workers and $DBO_TRACE_WORKERS: processes; more is a typo, not a machine


def fail(message: str, code: int = 2) -> NoReturn:
    raise UsageError(message, code)


def check_workers_env(name: str) -> None:
    """The environment's worker count, where set, a number of processes in range (as --workers is)."""
    value = os.environ.get(name, "")
    if value and not (value.isdigit() and 1 <= int(value) <= MAX_WORKERS):
        fail(f"{name}={value!r}: give a number of processes from 1 to {MAX_WORKERS} (or unset it)")


# --format's words, each the renderer it names (the terminal's is "text", as most CLIs spell it).
FORMATS = {"text": "terminal", "json": "json", "markdown": "markdown", "html": "html"}


def one_format(as_json: bool, as_markdown: bool, given: str | None = None) -> tuple[str, str] | None:
    """The renderer the flags choose (--format X, --json, --markdown) and the flag that chose it, or
    None for none: two that choose differently would silently lose one, so they are refused."""
    chosen = [(f"--format {given}", FORMATS[given])] if given is not None else []
    chosen += [(flag, name) for flag, name, on in (("--json", "json", as_json), ("--markdown", "markdown", as_markdown)) if on]
    for flag, name in chosen[1:]:
        if name != chosen[0][1]:
            fail(f"{chosen[0][0]} and {flag} choose one output each; give one of them (or write one with -o and run again)")
    return chosen[0] if chosen else None


def _word(renderer: str) -> str:
    """A renderer's name as --format spells it."""
    return next((word for word, name in FORMATS.items() if name == renderer), renderer)


def output_name(
    as_json: bool,
    as_markdown: bool,
    output: Path | None,
    given: str | None = None,
    written: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """--format, --json or --markdown, else what -o's suffix names (.json, .md, .html, .pftrace, .png,
    .svg), else the terminal summary. A flag and a suffix that disagree (-o x.html --markdown) are
    refused: the file would hold one format under the other's name. written: the outputs the command
    writes, each with its suffixes (default: report's renderers); a suffix of another refused too."""
    from dbo_trace.render import suffixes as renderer_suffixes

    every = renderer_suffixes()  # by the registry's table: looking a renderer up would import it
    suffixes = written if written is not None else every
    flagged = one_format(as_json, as_markdown, given)
    by_suffix = None
    if output is not None:
        by_suffix = next((name for name, ends in suffixes.items() if output.suffix.lower() in ends), None)
        other = next((name for name, ends in every.items() if output.suffix.lower() in ends), None)
        if by_suffix is None and other is not None:  # compare -o x.html: a format this command does not write
            known = [e for ends in suffixes.values() for e in ends]
            fail(f"-o {output}: this command does not write {other}; "
                 f"give -o a name that ends in {', '.join(known[:-1])} or {known[-1]}")  # fmt: skip
    if flagged is None:
        return by_suffix or "terminal"
    flag, name = flagged
    if by_suffix is not None and by_suffix != name:
        fail(f"-o {output}: its name is for {_word(by_suffix)} but {flag} asks for {_word(name)}; "
             f"give -o a name that ends in {' or '.join(suffixes.get(name, ()))} or drop {flag}")  # fmt: skip
    return name


def check_regexes(patterns: dict[str, tuple[str, ...]]) -> None:
    """The user's regular expressions by the option that gave them, each compiled once here so that
    a bad one is refused, naming its option, before any work (the analysis compiles them again from
    re's cache)."""
    for option, given in patterns.items():
        for pattern in given:
            try:
                re.compile(pattern)
            except re.error as exc:
                fail(f"{option} {shown(pattern, 60)}: not a valid regular expression ({exc})")


def terminal_width() -> int:
    """The columns the commands' own lines fit (doctor, top, archive): render.layout's one rule."""
    from dbo_trace.render.layout import terminal_width as width

    return width()


def color(output: Path | None) -> bool:
    """ANSI colour on stdout only: never with $NO_COLOR set (no-color.org: any non-empty value),
    always with $FORCE_COLOR set (a CI log that shows colour; "0" or empty: not set), else when
    stdout is a terminal. NO_COLOR wins where both are set, as in rich. A file never has colour."""
    if output is not None or os.environ.get("NO_COLOR"):
        return False
    forced = os.environ.get("FORCE_COLOR", "")
    return forced not in ("", "0") or sys.stdout.isatty()


def refuse_overwrite(*paths: Path | None, force: bool) -> None:
    """Before any work, so nothing the user had is lost and no output is left half-made: outputs are
    distinct, their folders exist and are writable, and an existing output needs --force."""
    given = [p for p in paths if p is not None]
    seen: dict[Path, Path] = {}
    for path in given:
        try:
            key = resolved(path)
        except OSError:
            fail(f"{path}: cannot be followed (a symlink loop?); give another name for the output")
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
        if path.exists() and not force and not written_by_dbo_trace(path):
            fail(f"{path}: already exists; choose another path or pass --force to replace it")


# The outputs nobody edits by hand, each recognised by the mark its renderer writes at its start:
# a rerun (the README's examples, twice) replaces its own picture, page, trace or archive without
# --force. Anything else that exists, text outputs included (a Markdown report may have been
# edited for a pull request), still needs --force (docs/outputs.md).
_MARKS: dict[str, tuple[bytes, re.Pattern[bytes]]] = {
    "png": (b"\x89PNG\r\n\x1a\n", re.compile(rb"tEXtSoftware\x00dbo-trace timeline")),
    "svg": (b"<?xml", re.compile(rb"<dc:creator>\s*<cc:Agent>\s*<dc:title>dbo-trace timeline</dc:title>")),
    "html": (b"<!doctype html>", re.compile(rb'\A[^\n]*\n<html lang="en"><head><meta charset="utf-8">'
                                            rb'<meta name="generator" content="dbo-trace">')),
    "perfetto": (b"\n\x0f\x8a\x02\x0c\xb2\x01\tdbo-trace", re.compile(rb"")),  # the first packet, whole
}


def written_by_dbo_trace(path: Path) -> bool:
    """Whether the file at path is one dbo-trace wrote, of the kind its name says: a picture, an
    HTML page or a Perfetto trace with the mark its renderer writes, or a review archive."""
    from dbo_trace.app.review_archive import is_archive
    from dbo_trace.render import for_path

    if path.name.lower().endswith(".tar.gz"):
        return is_archive(path)
    kind = for_path(path)
    if kind is None or kind.name not in _MARKS:
        return False
    start, mark = _MARKS[kind.name]
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return path.is_file() and head.startswith(start) and mark.search(head) is not None


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
                click.echo(piece, nl=False, color=True)  # colour is color()'s choice: click would strip it off a pipe
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
        replace = force or written_by_dbo_trace(path)
        (replace_file if replace else create_file)(path, data if isinstance(data, bytes) else counted(data))
    except FileExistsError:
        fail(f"{path}: already exists (written since dbo-trace started, by another process?); nothing was replaced: "
             "choose another path or pass --force to replace it")  # fmt: skip
    except OSError as exc:
        fail(f"{path}: cannot write ({exc.strerror})")
    click.echo(f"wrote {inert(str(path))} ({(len(data) if isinstance(data, bytes) else written[0]) / 1e6:.2f} MB)", err=True)


_deferred: list[list[str]] = []  # while a command holds its warnings back: where they wait


def warn(message: str) -> None:
    """A warning on stderr, wrapped to the terminal's width (80 where piped) as warnings_after wraps
    compare's, its later lines indented; inside warnings_after, kept until it leaves."""
    line = f"dbo-trace: warning: {inert(message)}"
    if _deferred:
        _deferred[-1].append(line)
    else:
        _echo_wrapped(line)


def _echo_wrapped(line: str) -> None:
    from dbo_trace.render.layout import wrap

    for part in wrap(line, terminal_width(), "", "  ", break_words=False):  # a path stays whole, to be copied
        click.echo(part, err=True)


@contextlib.contextmanager
def warnings_after(fold: bool = False, runs: list[str] | None = None) -> Iterator[None]:
    """The warnings raised inside, written on leaving: after the output, so that a table on a
    terminal is not pushed off the screen by a screenful of them (compare's arms: nine lines).
    fold: warnings that say the same of several runs (`RUN: text`) are one line naming them all
    (a sweep's six runs of one GPU pair gave six MPS lines; compare's four AFD arms, eight), only
    the names in runs where given. Each is wrapped to the terminal's width, its later lines indented."""
    _deferred.append([])
    try:
        yield
    finally:
        lines = _deferred.pop()
        for line in folded(lines, runs) if fold else lines:
            _echo_wrapped(line)


def folded(lines: list[str], runs: list[str] | None = None) -> list[str]:
    """`PREFIX RUN: text` lines grouped by their text, in first-seen order: `PREFIX RUN, RUN: text`.
    runs: the names a RUN may be (else any text before the first ": "); other lines stay as they are."""
    prefix = "dbo-trace: warning: "
    groups: dict[str, list[str]] = {}
    for line in lines:
        body = line[len(prefix) :] if line.startswith(prefix) else line
        run, sep, text = body.partition(": ")
        is_run = bool(sep) and line.startswith(prefix) and (runs is None or run in runs)
        key = text if is_run else line
        groups.setdefault(key, []).append(run if is_run else "")
    out = []
    for key, names in groups.items():
        named = [r for r in names if r]
        out.append(f"{prefix}{', '.join(dict.fromkeys(named))}: {key}" if named else key)
    return out


def analyzed(
    paths: list[Path], options: Options, workers: int | None = None, ray: str | None = None, arm: str | None = None
) -> Report:
    """Read and analyse the inputs (with ray, a cluster's address: on its nodes, dbo_trace/app/ray_executor.py);
    bad input is one line and exit 2; warnings go to stderr, each naming the arm (compare's) it is of."""
    return analyzed_with_manifests(paths, options, workers, ray, arm)[0]


def analyzed_with_manifests(
    paths: list[Path], options: Options, workers: int | None = None, ray: str | None = None, arm: str | None = None
) -> tuple[Report, list[Manifest]]:
    """analyzed(), and the bundles' manifests as discovery decoded them for the analysis (compare reads
    what each arm ran with from them: one decoding per manifest). With ray the nodes decode theirs for
    the analysis, and a bundle given by a path on this machine is decoded here."""
    from dbo_trace.app.review_archive import is_archive
    from dbo_trace.app.pipeline import WORKERS_ENV, analyze_found, workers_for
    from dbo_trace.render.words.notes import note_text
    from dbo_trace.trace.load import discover, total_bytes

    if workers is None and ray is None:
        check_workers_env(WORKERS_ENV)
    for path in paths:  # `report ARCHIVE` alone shows one (commands/report.py); nothing else reads them
        if is_archive(path):
            fail(f"{path}: a review archive, which holds a finished report, not traces: `dbo-trace report {path}` "
                 "shows it on its own; give the recording's bundle folder or traces here")  # fmt: skip
    if ray is not None:
        from dbo_trace.app.ray_executor import analyze_on_ray

        result = analyze_on_ray(ray, [str(p) for p in paths], options)
        manifests = _local_manifests(paths)
    else:
        found = discover(paths)  # bad input raises InputError, a UsageError: one line, exit 2
        size = total_bytes(found)
        with reading_bar(size) as progress:
            n = workers_for(len(found.traces), workers, size)
            result = analyze_found(found, options, [str(p) for p in paths], n, progress)
        manifests = found.manifests
    for warning in result.warnings:
        warn(note_text(warning) if arm is None else f"{arm}: {note_text(warning)}")
    return result, manifests


def _local_manifests(paths: list[Path]) -> list[Manifest]:
    """The manifests of the bundles on this machine among paths (`report --ray`'s may be elsewhere);
    one the bundle reader cannot use is left out, as the nodes' analysis said of it."""
    from dbo_trace.bundle import BundleError, is_bundle, read_bundle_manifest

    out = []
    for path in paths:
        try:
            out += [read_bundle_manifest(Path(path))] if is_bundle(Path(path)) else []
        except BundleError:
            continue
    return out
