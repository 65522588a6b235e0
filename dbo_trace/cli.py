"""The dbo-trace command line: parse, call, render. Nothing else lives here."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import click

from dbo_trace import __version__
from dbo_trace.demo.workload import MODES as DEMO_MODES
from dbo_trace.errors import Terminated, UsageError, inert
from dbo_trace.files import create_file, replace_file
from dbo_trace.ui import reading_bar


def _number(flag: str, default, kind, help: str):
    """An option with a default that --help shows."""
    return click.option(flag, default=default, show_default=True, type=kind, help=help)


def _one_format(as_json: bool, as_markdown: bool) -> str:
    """--json or --markdown or neither: both at once would silently lose one."""
    if as_json and as_markdown:
        fail("--json and --markdown choose one output each; give one of them (or write one with -o and run again)")
    return "json" if as_json else "markdown" if as_markdown else "terminal"


def fail(message: str, code: int = 2) -> NoReturn:
    raise UsageError(message, code)


class _Commands(click.Group):
    """The one place a UsageError (bad input or usage, raised anywhere) becomes its line and status,
    for the console script and for click's test runner alike; and an interrupt its line and the
    status a shell expects (click's own "Aborted!" exits 1, which reads as a failure)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            click.echo(f"dbo-trace: error: {inert(str(exc))}", err=True)  # messages quote paths and names
            ctx.exit(exc.exit_code)
        except Terminated:  # SIGTERM while workers ran: they are stopped (trace/workers.py)
            click.echo("dbo-trace: terminated", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("dbo-trace: interrupted", err=True)
            ctx.exit(130)


def _refuse_overwrite(*paths: Path | None, force: bool) -> None:
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


def _refuse_nonempty(out: Path) -> None:
    """A folder to create and fill: it must be new or empty."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"{out}: already exists and is not empty; choose another --out (nothing there was changed)")


def _write_output(text: str, output: Path | None, force: bool) -> None:
    """stdout, or the file (replaced only with --force)."""
    if output is None:
        click.echo(text, nl=False)
        return
    _write_file(text.encode(), output, force)


def _write_file(data: bytes, path: Path, force: bool) -> None:
    """Write via a temporary file, so an interrupted write never leaves half a file where the user
    looks. Without --force the file is created exclusively: _refuse_overwrite checked before the work,
    but another process (a second `report -o` of the same name) may have written it since."""
    try:
        (replace_file if force else create_file)(path, data)
    except FileExistsError:
        fail(f"{path}: already exists (written since dbo-trace started, by another process?); nothing was replaced: "
             "choose another path or pass --force to replace it")  # fmt: skip
    except OSError as exc:
        fail(f"{path}: cannot write ({exc.strerror})")
    click.echo(f"wrote {inert(str(path))} ({len(data) / 1e6:.2f} MB)", err=True)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dbo-trace")
def main() -> None:
    """Profiling and overlap diagnosis for dual-batch overlap (DBO) in vLLM."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/report-schema.md).")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown for a pull request.")
@click.option(
    "--comm-kernels",
    "comm_kernels",
    multiple=True,
    metavar="REGEX",
    help="Also count kernels matching REGEX as communication (repeatable).",
)
@click.option(
    "--comm-kernels-only",
    "comm_kernels_only",
    multiple=True,
    metavar="REGEX",
    help="Count only kernels matching REGEX as communication, replacing the built-in families (repeatable).",
)
@click.option(
    "--step-marker",
    metavar="REGEX",
    help="CPU ranges whose name matches REGEX are the steps (wins over vLLM's and the profiler's markers).",
)
@click.option(
    "--comm-stream",
    "comm_streams",
    multiple=True,
    type=int,
    metavar="ID",
    help="Count every kernel on stream ID as communication (repeatable).",
)
@click.option(
    "--ubatch-pattern",
    "ubatch_patterns",
    multiple=True,
    metavar="REGEX",
    help="CPU ranges of microbatch N match the Nth pattern, e.g. '\\(F\\)' '\\(B\\)' (repeatable).",
)
@click.option("--layers", type=click.IntRange(min=1), help="Layers per step, for round trips per layer.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to a file instead of stdout.")
@click.option("--timeline", type=click.Path(path_type=Path), help="Also draw a step's CPU/GPU timeline to this .png or .svg.")
@click.option("--perfetto", type=click.Path(path_type=Path), help="Also write a Perfetto trace (.pftrace) with derived tracks.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    help="Also write a self-contained HTML report with a zoomable timeline.",
)
@click.option(
    "--step",
    "step_number",
    metavar="STEP",
    help="The step to draw: its number in the per-step table (3 or #3), its label ('step 17'), median (the default) or slowest.",
)
@click.option("--rank", "rank_number", type=int, default=None, help="The rank to draw (default: the first).")
@click.option("--all-ranks", is_flag=True, help="--timeline draws the step of every rank on one aligned time axis, waits marked.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Processes reading and analysing ranks at once (default: $DBO_TRACE_WORKERS, else one per core).",
)
@click.option("--force", is_flag=True, help="Replace output files that exist.")
def report(
    paths,
    as_json,
    as_markdown,
    comm_kernels,
    comm_kernels_only,
    step_marker,
    comm_streams,
    ubatch_patterns,
    layers,
    output,
    timeline,
    perfetto,
    html_out,
    step_number,
    rank_number,
    all_ranks,
    workers,
    force,
) -> None:
    """Diagnose DBO from traces: a trace file, a folder of traces (one per rank), or a bundle.

    \b
    Answers: do the two microbatches overlap; is the step host-bound; did CUDA
    graphs replay; and does per-microbatch compute cover the comm round trip.
    """
    import re

    from dbo_trace.analysis.report import Options
    from dbo_trace.analysis.view import chosen_step, step_name
    from dbo_trace.render import RENDERERS, RenderOptions, as_bytes, for_path

    main_output = RENDERERS[_output_name(as_json, as_markdown, output)]
    if len(paths) == 1 and _is_archive(paths[0]):
        analysis_options = comm_kernels or comm_kernels_only or step_marker or comm_streams or ubatch_patterns or layers
        if analysis_options or workers or timeline or perfetto or html_out or step_number or rank_number or all_ranks:
            fail(f"{paths[0]}: a review archive holds the finished report, not the traces: it can be shown as text, "
                 "Markdown or JSON, not re-analysed or drawn; run those options on the recording")  # fmt: skip
        _refuse_overwrite(output, force=force)
        return _show_archive(paths[0], main_output, output, force)
    if (step_number is not None or rank_number is not None) and timeline is None:
        fail("--step and --rank choose the step that --timeline draws; add --timeline FILE.png (or drop them)")
    if all_ranks and timeline is None:
        fail("--all-ranks draws every rank's step in --timeline; add --timeline FILE.png (or drop it)")
    if comm_kernels and comm_kernels_only:
        fail("--comm-kernels adds to the built-in set and --comm-kernels-only replaces it: give one of them")
    for pattern in comm_kernels + comm_kernels_only + ubatch_patterns + ((step_marker,) if step_marker else ()):
        try:
            re.compile(pattern)
        except re.error as exc:
            fail(f"{pattern!r}: not a valid regular expression ({exc})")
    _refuse_overwrite(output, timeline, perfetto, html_out, force=force)
    picture = for_path(timeline) if timeline is not None else None
    if timeline is not None and (picture is None or picture.name not in ("png", "svg")):
        fail(f"{timeline}: --timeline writes .png or .svg; name the file with one of those")
    # The picture first, so that the Markdown can link it.
    extras = [(timeline, picture), (perfetto, RENDERERS["perfetto"]), (html_out, RENDERERS["html"])]
    options = Options(
        tuple(comm_kernels or comm_kernels_only),
        tuple(comm_streams),
        tuple(ubatch_patterns),
        layers,
        step_marker=step_marker,
        comm_only=bool(comm_kernels_only),
    )
    result = _analyzed(list(paths), options, workers)
    shown = RenderOptions(
        color=_color(output),
        image=os.path.relpath(timeline, output.parent if output else Path.cwd()) if timeline is not None else None,
        step=step_number,
        rank=rank_number,
        all_ranks=all_ranks,
    )
    for path, renderer in extras:
        if path is not None and renderer is not None:
            _write_file(as_bytes(renderer.render(result, shown)), path, force)
            if renderer is picture:
                rank, position = chosen_step(result, rank_number, step_number)
                who = "every rank" if all_ranks else f"rank {rank.rank}"
                click.echo(f"  {who}, step {inert(step_name(rank, position))}", err=True)
                if main_output.name == "markdown":  # a comment cannot show a local file: the Markdown says so too
                    click.echo("  attach it to the comment by hand: drag it into GitHub's comment box", err=True)
    rendered = main_output.render(result, shown)
    if main_output.binary:
        _write_file(as_bytes(rendered), output, force)
    else:
        _write_output(str(rendered), output, force)


def _is_archive(path: Path) -> bool:
    from dbo_trace.archive import is_archive

    return is_archive(path)


def _show_archive(path: Path, renderer, output: Path | None, force: bool) -> None:
    """The report an archive holds, as text, Markdown or JSON (from its document; nothing recomputed)."""
    from dbo_trace.archive import read_report_document
    from dbo_trace.render import RenderOptions

    if not hasattr(renderer, "render_document"):
        fail(f"{path}: a review archive can be shown as text, Markdown or JSON, not as {renderer.name}")
    document = read_report_document(path)
    _write_output(renderer.render_document(document, RenderOptions(color=_color(output))), output, force)


def _output_name(as_json: bool, as_markdown: bool, output: Path | None) -> str:
    """--json or --markdown, else what -o's suffix names (.json, .md, .html, .pftrace, .png, .svg),
    else the terminal summary."""
    from dbo_trace.render import for_path

    flagged = _one_format(as_json, as_markdown)
    by_suffix = for_path(output) if output is not None and flagged == "terminal" else None
    return by_suffix.name if by_suffix is not None else flagged


def _color(output: Path | None) -> bool:
    """ANSI colour only for a terminal on stdout."""
    return output is None and sys.stdout.isatty()


def _analyzed(paths: list[Path], options, workers: int | None = None):
    """Read and analyse the inputs; bad input is one line and exit 2; warnings go to stderr."""
    from dbo_trace.pipeline import analyze_found, workers_for
    from dbo_trace.trace.load import discover, total_bytes

    found = discover(paths)  # bad input raises InputError, a UsageError: one line, exit 2
    size = total_bytes(found)
    with reading_bar(size) as progress:
        n = workers_for(len(found.traces), workers, size)
        result = analyze_found(found, options, [str(p) for p in paths], n, progress)
    for warning in result.warnings:
        click.echo(f"dbo-trace: warning: {inert(warning)}", err=True)
    return result


@main.command()
@click.argument("arms", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown for a pull request.")
@click.option("--label", "labels", multiple=True, help="A name per arm, in order (default: the path's name).")
@click.option("--layers", type=click.IntRange(min=1), help="Layers per step, for round trips per layer.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to a file instead of stdout.")
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
def compare(arms, as_json, as_markdown, labels, layers, output, force) -> None:
    """Compare arms of an ablation: dbo-trace compare eager/ dbo/ graphs/ graphs-dbo/

    \b
    Each arm is a bundle, a trace or a folder of traces. Per arm: step time
    (mean ± standard deviation over every step of every rank and window) and
    its change against the first arm, round trips per layer and their cost,
    hidden comm, graph replay share, and which differences are within noise;
    then the same per phase (prefill, decode, mixed) where vLLM's step
    annotations give phases in every arm.
    """
    from dbo_trace.analysis.compare import arms_of, shape_warnings, shared_phases
    from dbo_trace.analysis.compare import compare as compare_arms
    from dbo_trace.analysis.report import Options
    from dbo_trace.render import RenderOptions
    from dbo_trace.render.compare import COMPARE_RENDERERS

    renderer = COMPARE_RENDERERS.get(_output_name(as_json, as_markdown, output), COMPARE_RENDERERS["terminal"])
    if len(arms) < 2:
        fail("compare needs at least two arms (bundles or traces)")
    if labels and len(labels) != len(arms):
        fail(f"--label given {len(labels)} times for {len(arms)} arms; give one per arm or none")
    _refuse_overwrite(output, force=force)
    names = list(labels) or [p.name or str(p) for p in arms]
    reports = []
    for path in arms:
        report = _analyzed([path], Options(layers=layers))
        if not any(r.steps for r in report.ranks):
            fail(f"{path}: no step with GPU activity to compare")
        reports.append(report)
    for warning in shape_warnings(names, reports):
        click.echo(f"dbo-trace: warning: {inert(warning)}", err=True)
    phases = shared_phases(reports)
    compared = compare_arms([a for name, rep in zip(names, reports) for a in arms_of(name, rep, phases)])
    _write_output(renderer.render(compared, RenderOptions(color=_color(output))), output, force)


@main.command("archive")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), help="Archive to write (default: ./NAME-dbo-trace.tar.gz).")
@_number("--max-mb", 25.0, click.FloatRange(min=0.001), "Size cap of the archive.")
@_number("--steps", 3, click.IntRange(min=1), "Steps around the median step in the Perfetto window.")
@click.option("--layers", type=click.IntRange(min=1), help="Layers per step, for round trips per layer.")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def archive_cmd(source, out, max_mb, steps, layers, force) -> None:
    """Pack what a reviewer needs into one archive: dbo-trace archive RUN -o run.tar.gz

    \b
    summary.md (the --markdown report, linking timeline.png), timeline.png (the
    median step), report.json, window.pftrace (Perfetto: a few steps around the
    median step, not the whole run) and the manifest, secrets redacted again.
    Trimmed to stay under --max-mb (25 MB, GitHub's attachment limit).
    `dbo-trace report run.tar.gz` shows it again.
    """
    from dbo_trace.analysis.report import Options
    from dbo_trace.archive import pack

    out = out or Path(f"{source.resolve().name}-dbo-trace.tar.gz")
    _refuse_overwrite(out, force=force)
    result = _analyzed([source], Options(layers=layers))
    if not any(r.steps for r in result.ranks):
        fail(f"{source}: no step with GPU activity; nothing to draw or trim")
    try:
        packed = pack(result, source, out, int(max_mb * 1e6), steps, force=force)
    except FileExistsError:
        fail(f"{out}: appeared while the archive was made; not replaced (use --force to replace it)")
    except ValueError as exc:
        fail(f"{out}: {exc}")
    click.echo(f"wrote {inert(str(packed.archive))} ({packed.size / 1e6:.2f} MB, cap {max_mb:g} MB): {', '.join(packed.members)}")
    for line in packed.trimmed:
        click.echo(f"  {inert(line)}")  # step labels


# The command's first name, kept so that scripts written for it still run.
main.add_command(click.Command("bundle", callback=archive_cmd.callback, params=archive_cmd.params, hidden=True), "bundle")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("-o", "--out", type=click.Path(path_type=Path), help="Bundle folder to create (default: ./dbo-trace-DATE-TIME).")
@click.option(
    "--server/--program",
    "server",
    default=None,
    help="Treat COMMAND as an OpenAI-compatible server (default: when it is `vllm serve`).",
)
@click.option("--url", help="The server's base URL (default: from COMMAND's --host/--port, else http://127.0.0.1:8000).")
@_number("--num-prompts", 64, click.IntRange(min=1), "Requests in the profiled load.")
@_number("--concurrency", 16, click.IntRange(min=1), "Requests in flight at once.")
@_number("--input-len", 512, click.IntRange(min=1), "Random prompt tokens per request.")
@_number("--output-len", 64, click.IntRange(min=1), "Generated tokens per request (EOS ignored).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random prompts.")
@_number("--warmup-prompts", 8, click.IntRange(min=0), "Requests sent before profiling (graph capture, caches).")
@_number("--profile-delay", 0, click.IntRange(min=0), "Engine steps to skip after the profiler starts (vLLM's delay_iterations).")
@_number("--profile-steps", 0, click.IntRange(min=0), "Engine steps to profile, 0 for the whole load (vLLM's max_iterations).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the traces (slower, larger).")
@_number("--startup-timeout", 1200.0, click.FloatRange(min=1), "Seconds to wait for /health.")
@_number("--grace", 30.0, click.FloatRange(min=0), "Seconds between SIGINT, SIGTERM and SIGKILL when stopping.")
@_number("--trace-timeout", 300.0, click.FloatRange(min=1), "Seconds to wait for the traces after /stop_profile.")
def record(
    command,
    out,
    server,
    url,
    num_prompts,
    concurrency,
    input_len,
    output_len,
    seed,
    warmup_prompts,
    profile_delay,
    profile_steps,
    with_stack,
    startup_timeout,
    grace,
    trace_timeout,
) -> None:
    """Record a DBO run into a bundle: dbo-trace record [OPTIONS] -- vllm serve MODEL --enable-dbo ...

    \b
    With a server: starts it with the dbo-trace plugin and vLLM's torch profiler
    on, waits for /health, sends a warm-up and a profiled load of random-token
    prompts between /start_profile and /stop_profile, stops the server, and
    writes the bundle. With any other program: runs it with the plugin on
    (DBO_TRACE_DIR set, traces expected under $DBO_TRACE_TRACES).
    """
    import datetime as dt

    from dbo_trace.record import environment
    from dbo_trace.record.child import ChildFailed
    from dbo_trace.record.loadgen import LoadSpec
    from dbo_trace.record.recorder import STATUS_COMPLETE, STATUS_INCOMPLETE, ProfileWindow, RecordPlan, Refused
    from dbo_trace.record.recorder import record as run_record
    from dbo_trace.ui import ConsoleProgress

    command = list(command)
    out = out or Path(f"dbo-trace-{dt.datetime.now():%Y%m%d-%H%M%S}")
    _refuse_nonempty(out)
    server = environment.is_vllm_serve(command) if server is None else server
    plan = RecordPlan(
        command=command,
        out=out,
        server=server,
        base_url=(url or environment.server_url(command)).rstrip("/"),
        load=LoadSpec(num_prompts, concurrency, input_len, output_len, seed),
        warmup_prompts=warmup_prompts,
        window=ProfileWindow(profile_delay, profile_steps, with_stack),
        startup_timeout_s=startup_timeout,
        grace_s=grace,
        trace_timeout_s=trace_timeout,
    )
    ui = ConsoleProgress()
    try:
        outcome = run_record(plan, ui)
    except (ChildFailed, Refused) as exc:  # before anything started (a malformed --profiler-config, a busy port)
        fail(str(exc))
    ui.phase(
        f"bundle: {outcome.bundle} ({outcome.status}; {len(outcome.manifest['traces'])} traces, "
        f"{len(outcome.manifest['events'])} event logs)"
    )
    if outcome.manifest["traces"]:
        ui.phase(f"next: dbo-trace report {outcome.bundle}")
    if outcome.status == STATUS_COMPLETE:
        return
    raise UsageError(outcome.reason or "the recording did not complete", 130 if outcome.status == STATUS_INCOMPLETE else 1)


@main.command()
@click.option(
    "--mode",
    type=click.Choice([*DEMO_MODES, "all"]),
    default="all",
    show_default=True,
    help="Which truth to check.",
)
@click.option("--layers", default=4, show_default=True, type=click.IntRange(min=1))
@_number("--tokens", 16384, click.IntRange(min=2), "Tokens per step, split over the two microbatches.")
@_number("--hidden", 8192, click.IntRange(min=64), "GEMM width.")
@click.option(
    "--compute-us", type=click.FloatRange(min=1), help="Length of one compute phase (sets --tokens by measuring this GPU)."
)
@_number("--comm-us", 1000.0, click.FloatRange(min=1), "Length of one dispatch or combine.")
@_number("--steps", 5, click.IntRange(min=1), "Profiled steps per mode.")
@_number("--nproc", 1, click.IntRange(min=1), "Processes, one per GPU: real all_to_all over NCCL.")
@click.option(
    "-o", "--out", type=click.Path(path_type=Path), help="Folder for the bundles (default: ./dbo-trace-demo-DATE-TIME)."
)
@click.option("--sweep", is_flag=True, help="Step time with DBO against serial over a grid, beside the report's criterion.")
@click.option("--sweep-compute-us", default="100,200,400,800,1600", show_default=True, help="Grid: compute phase lengths.")
@click.option("--sweep-comm-us", default="100,200,400,800,1600", show_default=True, help="Grid: comm lengths.")
@click.option("--plot", type=click.Path(path_type=Path), help="With --sweep: also draw the grid to this PNG.")
@click.option(
    "--ubatching",
    type=click.Choice(["auto", "vllm", "builtin"]),
    default="auto",
    show_default=True,
    help="Whose UBatchContext drives the threads: vLLM's where it imports, or the built-in equivalent.",
)
@click.option(
    "--comm",
    type=click.Choice(["auto", "spin", "all_to_all"]),
    default="auto",
    show_default=True,
    help="auto: an emulated spin kernel on one GPU, NCCL all_to_all with --nproc; spin: the emulation on every "
    "GPU even with --nproc.",
)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", hidden=True, help="cpu: orchestration only (CI).")
def demo(
    mode,
    layers,
    tokens,
    hidden,
    compute_us,
    comm_us,
    steps,
    nproc,
    out,
    sweep,
    sweep_compute_us,
    sweep_comm_us,
    plot,
    ubatching,
    comm,
    device,
) -> None:
    """Check the diagnosis end to end on a DBO workload whose truth is known.

    \b
    Two microbatch threads ping-pong through vLLM's own UBatchContext (or a
    built-in equivalent where vLLM is absent), each layer doing compute, a
    dispatch, compute and a combine. Each mode is recorded like a real run
    (plugin, event log, profiler), reported, and compared with what it was
    built to be. Exits 1 when any diagnosis disagrees.
    """
    import datetime as dt
    import importlib.util

    from dbo_trace.demo.output import demo_table, sweep_table
    from dbo_trace.demo.run import DemoOptions, SweepFailed, modes_of, run_demo, run_sweep
    from dbo_trace.ui import ConsoleProgress

    if importlib.util.find_spec("torch") is None:
        fail("dbo-trace demo needs torch and a CUDA GPU (pip install torch); `dbo-trace report` needs neither")
    if device == "cuda":
        import torch

        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == 0:
            fail("no CUDA GPU is visible: dbo-trace demo runs its workload on a GPU (`dbo-trace report` runs anywhere)")
        if nproc > visible:
            fail(f"--nproc {nproc} needs {nproc} GPUs; {visible} visible")
    if comm == "all_to_all" and nproc < 2:
        fail(
            "--comm all_to_all needs --nproc 2 or more: over a world of one, torch turns the all_to_all into a "
            "device-to-device copy, which is not communication (measured on the H200, docs/demo.md)"
        )
    if sweep and nproc > 1:
        fail("--sweep runs on one GPU; drop --nproc")
    out = out or Path(f"dbo-trace-demo-{dt.datetime.now():%Y%m%d-%H%M%S}")
    _refuse_nonempty(out)
    if plot is not None and plot.exists():
        fail(f"{plot}: already exists; choose another --plot path")
    opts = DemoOptions(
        modes_of(mode, device), out, layers, tokens, hidden, compute_us, comm_us, steps, nproc, device, ubatching, comm
    )
    ui = ConsoleProgress()
    if sweep:
        try:
            rows = run_sweep(opts, sweep_compute_us, sweep_comm_us, ui)
        except SweepFailed as exc:
            fail(str(exc), code=1)
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep.json").write_text(json.dumps(rows, indent=1))
        click.echo(sweep_table(rows), nl=False)
        if plot is not None:
            from dbo_trace.demo.sweep_plot import draw_sweep

            _write_file(draw_sweep(rows), plot, force=False)
        return
    results = run_demo(opts, ui)
    click.echo(demo_table(results), nl=False)
    backends = sorted({r.workload.get("ubatching", "?") for r in results if r.workload})
    click.echo(
        f"microbatch threads: {', '.join(backends) or '-'} UBatchContext; device: "
        f"{next((r.workload['device'] for r in results if r.workload), '-')}; processes: {nproc}"
    )
    if not all((r.ok or not r.checked) and not r.error for r in results):
        sys.exit(1)


@main.command()
def doctor() -> None:
    """What this Python would record with: versions, the plugin, profile_all_threads, each vLLM target."""
    from dbo_trace.record.doctor import diagnose

    versions, checks = diagnose()
    click.echo("versions: " + ", ".join(f"{k} {v or '-'}" for k, v in versions.items()))
    marks = {True: "ok  ", False: "FAIL", None: "info"}
    for check in checks:
        click.echo(f"  {marks[check.ok]}  {inert(check.name)}: {inert(str(check.detail))}")
    if any(c.ok is False for c in checks):
        sys.exit(1)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path), required=False)
@click.option("--once", is_flag=True, help="Print the counters once and exit (for scripts and logs).")
@_number("--interval", 1.0, click.FloatRange(min=0.1), "Seconds between refreshes.")
def top(folder, once, interval) -> None:
    """Live DBO counters of a running vLLM, without a profiler: dbo-trace top [FOLDER]

    \b
    FOLDER is the server's DBO_TRACE_DIR or a recording; without it, $DBO_TRACE_DIR.
    Per process that runs the model: steps and steps/s, the share microbatched, the
    UBatchWrapper paths taken, CUDA graph replays per mode, yields per step and how
    long each microbatch waited for its turn. The plugin rewrites its counters every
    second while steps run (DBO_TRACE_DIR must be set in the server's environment).
    On a terminal the table refreshes in place; piped or redirected, each refresh is
    written as plain lines (a line per process, stamped with the time) as it comes.
    """
    import time

    from rich.console import Console
    from rich.live import Live

    from dbo_trace import bundle as fmt
    from dbo_trace.analysis.live import live_row
    from dbo_trace.render.live import live_lines, live_table

    if folder is None:
        if not os.environ.get("DBO_TRACE_DIR"):
            fail("top: no folder given and $DBO_TRACE_DIR is not set; give the server's DBO_TRACE_DIR or a recording")
        folder = Path(os.environ["DBO_TRACE_DIR"])
        click.echo(f"dbo-trace top: reading $DBO_TRACE_DIR ({inert(str(folder))})", err=True)
    if not folder.is_dir():
        fail(f"{folder}: no such folder; give the server's DBO_TRACE_DIR or a recording")
    previous: dict[str, dict] = {}

    def sample():
        found = fmt.read_counters(folder)
        rows = [live_row(body, previous.get(str(path)), interval, age) for path, body, age in found]
        previous.update({str(path): body for path, body, _ in found})
        working = [r for r in rows if r.steps or r.graph_replays or r.graph_captures]  # the API server runs no model
        title = f"dbo-trace top {folder}"
        if not rows:
            title += " (no counters yet: is this the server's DBO_TRACE_DIR?)"
        elif len(working) < len(rows):
            title += f" ({len(rows) - len(working)} process(es) that run no model left out)"
        return working, title, bool(rows)

    def table():
        working, title, found = sample()
        return live_table(working, title), found

    def write_lines() -> bool:
        working, title, found = sample()
        sys.stdout.write("\n".join(live_lines(working, title, time.strftime("%H:%M:%S"))) + "\n")
        sys.stdout.flush()
        return found

    plain = not sys.stdout.isatty()  # a pipe or a file: plain lines, each refresh as it comes
    console = Console(width=max(140, shutil.get_terminal_size((140, 24)).columns))
    if once:
        if plain:
            found = write_lines()
        else:
            shown, found = table()
            console.print(shown)
        if not found:
            sys.exit(1)
        return
    try:
        if plain:
            while True:
                write_lines()
                time.sleep(interval)
        with Live(table()[0], console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(table()[0])
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `dbo-trace top | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return


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
        click.echo(
            f"dbo-trace: internal error: {type(exc).__name__}: {inert(str(exc))} "
            "(set DBO_TRACE_DEBUG=1 for details and please report it)",
            err=True,
        )
        sys.exit(3)


if __name__ == "__main__":
    run()
