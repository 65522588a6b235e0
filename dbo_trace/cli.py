"""The dbo-trace command line: a click group that declares each command's options and builds its
request (dbo_trace/commands/: the checks and the work, one module per command). Nothing else lives here."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from dbo_trace import __version__
from dbo_trace.commands.common import MAX_WORKERS
from dbo_trace.demo.workload import MODES as DEMO_MODES
from dbo_trace.errors import Terminated, UsageError, inert


def _number(flag: str, default, kind, help: str):
    """An option with a default that --help shows."""
    return click.option(flag, default=default, show_default=True, type=kind, help=help)


class _Finite(click.FloatRange):
    """A number in a range, never NaN or infinity (a range alone lets NaN through: it compares false)."""

    def convert(self, value, param, ctx):
        import math

        rv = float(super().convert(value, param, ctx))
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


# Every numeric option has both bounds: a number past them is a typo, refused in one line, never a
# figure computed from it ("per layer 0" from 10^20 layers) or a resource asked for (10^11 workers).
MAX_LAYERS = 10_000
LAYERS = click.IntRange(1, MAX_LAYERS)


class _Commands(click.Group):
    """The one place a UsageError (bad input or usage, raised anywhere) becomes its line and status,
    for the console script and for click's test runner alike; and an interrupt its line and the
    status a shell expects (click's own "Aborted!" exits 1, which reads as a failure)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # click's own (a value out of range, an unknown option): one line too
            sub = exc.ctx.info_name if exc.ctx is not None and exc.ctx.parent is not None else None
            where = f"dbo-trace {sub} --help lists the options" if sub else "dbo-trace --help lists the commands"
            click.echo(f"dbo-trace: error: {inert(exc.format_message())} ({where})", err=True)
            ctx.exit(exc.exit_code)
        except UsageError as exc:
            click.echo(f"dbo-trace: error: {inert(str(exc))}", err=True)  # messages quote paths and names
            ctx.exit(exc.exit_code)
        except Terminated:  # SIGTERM while workers ran: they are stopped (trace/workers.py)
            click.echo("dbo-trace: terminated", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("dbo-trace: interrupted", err=True)
            ctx.exit(130)


def _dash_is_stdout(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """`-o -` is stdout, as for most tools (before: a file named `-`)."""
    return None if value is not None and str(value) == "-" else value


_OUTPUT_OPTION = click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    callback=_dash_is_stdout,
    help="Write to a file instead of stdout (-: stdout).",
)


GLOSSARY = "Every column and term explained: docs/glossary.md."


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]}, epilog=GLOSSARY)
@click.version_option(__version__, prog_name="dbo-trace")
def main() -> None:
    """Profiling and overlap diagnosis for dual-batch overlap (DBO) in vLLM."""


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """A report holds a few objects per step that live until it is written (verdicts, reasons,
    document blocks): at the default gen-0 threshold (700) the collector walks them thousands of
    times for no garbage, 10-20% of report --json's CPU at 20k steps (docs/performance.md). Only
    around the analysis: `record` measures latencies in this process, where rarer, longer pauses
    would show."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@main.command(epilog=GLOSSARY)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "format_given",
    type=click.Choice(["text", "json", "markdown", "html"]),
    help="The output on stdout or in -o: text (the default), json, markdown or html.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/report-schema.md); --format json.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown for a pull request; --format markdown.")
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
    type=click.IntRange(0, 2**63 - 1),
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
@click.option("--layers", type=LAYERS, help="Layers per step, for round trips per layer.")
@_OUTPUT_OPTION
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
@click.option("--rank", "rank_number", type=click.IntRange(0, 2**31 - 1), default=None, help="The rank to draw (default: the first).")
@click.option(
    "--what-if",
    "what_ifs",
    multiple=True,
    metavar="round-trip=TIME|sms=N|dbo=on|dbo=off",
    help="A model's step with every round trip taking TIME (round-trip=100us, 1.2ms), or N SMs kept for comm "
    "(sms=20); on an AFD arm, dbo=on (of a DBO-off arm) or dbo=off (of a DBO arm): the other arm's step and "
    "DBO's change predicted, with an interval; repeatable.",
)
@click.option(
    "--calibrate",
    "calibrate",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    metavar="PATH",
    help="What --what-if dbo= is calibrated on: bundles or a load sweep's folder holding AFD pairs of DBO on and off "
    "(repeatable; default: the shipped H200 sweep).",
)
@click.option(
    "--layer",
    "layer_number",
    type=click.IntRange(0, MAX_LAYERS - 1),
    help="Show only layer N's comm operations and hand-overs (terminal and Markdown; from 0).",
)
@click.option("--all-ranks", is_flag=True, help="--timeline draws the step of every rank on one aligned time axis, waits marked.")
@click.option(
    "--window",
    metavar="START:END",
    help="--timeline draws this span instead of one step: ms from the rank's first step's start (0:50), or steps (#2:#4).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    help="Processes reading and analysing ranks at once (default: $DBO_TRACE_WORKERS, else one per core).",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Read and analyse each rank on the Ray node that holds its trace (NODE:/path, or a glob asked of every node); "
    "needs dbo-trace[ray].",
)
@click.option(
    "--host-stacks",
    is_flag=True,
    help="Also print the host-caused GPU idle by sampled Python frame, each row's frames under it (bundles with py-spy samples).",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    help="A load sweep's folder: also draw DBO's change against requests in flight to this .png or .svg.",
)
@click.option("--force", is_flag=True, help="Replace output files that exist.")
def report(
    paths,
    format_given,
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
    layer_number,
    what_ifs,
    calibrate,
    all_ranks,
    window,
    workers,
    ray_address,
    host_stacks,
    plot,
    force,
) -> None:
    """Diagnose DBO from traces: a trace file, a folder of traces (one per rank), or a bundle.

    \b
    Answers: do the two microbatches overlap; is the step host-bound; did CUDA
    graphs replay; and does per-microbatch compute cover the comm round trip.
    A load sweep's folder (dbo-trace sweep's OUT) gives the sweep's summary:
    per load the ablation's table, DBO's change against its DBO-off partner,
    where it turns, and with --plot its picture.
    """
    from dbo_trace.commands import report as command

    request = command.ReportRequest(
        paths=tuple(paths), as_json=as_json, as_markdown=as_markdown, comm_kernels=tuple(comm_kernels),
        comm_kernels_only=tuple(comm_kernels_only), step_marker=step_marker, comm_streams=tuple(comm_streams),
        ubatch_patterns=tuple(ubatch_patterns), layers=layers, output=output, timeline=timeline, perfetto=perfetto,
        html=html_out, step=step_number, rank=rank_number, layer=layer_number, what_if=tuple(what_ifs),
        calibrate=tuple(calibrate), all_ranks=all_ranks, window=window, workers=workers, ray=ray_address, force=force, host_stacks=host_stacks,
        plot=plot, format_given=format_given,
    )  # fmt: skip
    with _few_collections():
        command.run(request.checked())


@main.command()
@click.argument("arms", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "format_given",
    type=click.Choice(["text", "json", "markdown"]),
    help="The output on stdout or in -o: text (the default), json or markdown.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output; --format json.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown for a pull request; --format markdown.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="A name per arm, in order, each its own (default: the folder's name; where folders share one, "
    "the paths' last parts that tell them apart).",
)
@click.option("--layers", type=LAYERS, help="Layers per step, for round trips per layer.")
@_OUTPUT_OPTION
@click.option(
    "--ray", "ray_address", metavar="ADDRESS", help="Analyse each arm's ranks on the Ray nodes that hold them (as report --ray)."
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    help="A load sweep's folder: also draw DBO's change against requests in flight to this .png or .svg.",
)
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
def compare(arms, format_given, as_json, as_markdown, labels, layers, output, force, ray_address, plot) -> None:
    """Compare arms of an ablation: dbo-trace compare eager/ dbo/ graphs/ graphs-dbo/

    \b
    Each arm is a bundle, a trace or a folder of traces. Per arm: its steps'
    period (start to start) in ms, median (p90, max), over its steady steps
    (stalls counted apart, the ranks of a step averaged); the median window
    where it differs; the change of the median against the first arm of the
    same load with its bootstrap 95% interval (beyond noise only when the
    interval excludes 0 and each arm has at least 5 steps); round trips per
    layer and the time per round trip; hidden comm; the graph-replayed share;
    the verdict. Then the same per phase (prefill, decode, mixed) where vLLM's
    step annotations give phases in every arm; AFD arms' round trips.

    \b
    A DBO arm pairs with the DBO-off arm of the same load (requests in
    flight and lengths from the manifest, else decode requests a step within
    10%), GPU sharing (MPS) and cudagraph mode; an arm without a partner says
    which differs. Per pair, first: whether DBO pays by the measured change,
    then its change taken apart per step on each role's GPU (compute, comm
    alone, idle host-caused and dependency, the FFN's GPU with its trace) and
    the kernels whose time per call changed. A load sweep's folder alone
    gives the sweep's summary, as report does.
    """
    from dbo_trace.commands import compare as command

    request = command.CompareRequest(
        arms=tuple(arms), as_json=as_json, as_markdown=as_markdown, labels=tuple(labels), layers=layers, output=output,
        force=force, ray=ray_address, plot=plot, format_given=format_given,
    )  # fmt: skip
    with _few_collections():
        command.run(request.checked())


@main.command("archive")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    "--output",
    "out",
    type=click.Path(path_type=Path),
    help="The .tar.gz to write (default: ./NAME-dbo-trace.tar.gz).",
)
@_number("--max-mb", 25.0, _Finite(0.001, 1_000_000), "Size cap of the archive.")
@_number("--steps", 3, click.IntRange(1, 1000), "Steps around the median step in the Perfetto window.")
@click.option("--layers", type=LAYERS, help="Layers per step, for round trips per layer.")
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
    from dbo_trace.commands import archive as command

    request = command.ArchiveRequest(source=source, out=out, max_mb=max_mb, steps=steps, layers=layers, force=force)
    with _few_collections():
        command.run(request.checked())


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
@_number("--num-prompts", 64, click.IntRange(1, 1_000_000), "Requests in the profiled load.")
@_number("--concurrency", 16, click.IntRange(1, 100_000), "Requests in flight at once.")
@_number("--input-len", 512, click.IntRange(1, 10_000_000), "Random prompt tokens per request.")
@_number("--output-len", 64, click.IntRange(1, 10_000_000), "Generated tokens per request (EOS ignored).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1), help="Seed of the random prompts.")
@_number("--warmup-prompts", 8, click.IntRange(0, 1_000_000), "Requests sent before profiling (graph capture, caches).")
@_number("--profile-delay", 0, click.IntRange(0, 1_000_000), "Engine steps to skip after the profiler starts (vLLM's delay_iterations).")
@_number("--profile-steps", 0, click.IntRange(0, 1_000_000), "Engine steps to profile, 0 for the whole load (vLLM's max_iterations).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the traces (slower, larger).")
@_number("--startup-timeout", 1200.0, _Finite(1, 7 * 86400), "Seconds to wait for /health.")
@_number("--grace", 30.0, _Finite(0, 3600), "Seconds between SIGINT, SIGTERM and SIGKILL when stopping.")
@_number("--trace-timeout", 300.0, _Finite(1, 86400), "Seconds to wait for the traces after /stop_profile.")
@_number("--repeats", 3, click.IntRange(0, 1000), "Timed repeats of the load with the profiler off, before the profiled one (vllm bench serve where installed).")
@click.option("--peer-command", metavar="COMMAND", help="A server to start first and record beside COMMAND, as one quoted string: the AFD plugin's FFN server.")
@click.option("--peer-ready-port", type=click.IntRange(1, 65535), help="Start COMMAND once the peer listens on this port (default: the peer's AFD port).")
@click.option("--python-samples/--no-python-samples", default=True, show_default=True, help="Sample the servers' Python stacks with py-spy over the profiled load.")
@_number("--python-sample-rate", 100, click.IntRange(1, 10000), "py-spy samples per second.")
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
    repeats,
    peer_command,
    peer_ready_port,
    python_samples,
    python_sample_rate,
) -> None:
    """Record a DBO run into a bundle: dbo-trace record [OPTIONS] -- vllm serve MODEL --enable-dbo ...

    \b
    With a server: starts it with the dbo-trace plugin and vLLM's torch profiler
    on, waits for /health, sends a warm-up and a profiled load of random-token
    prompts between /start_profile and /stop_profile, stops the server, and
    writes the bundle. With any other program: runs it with the plugin on
    (DBO_TRACE_DIR set, traces expected under $DBO_TRACE_TRACES).
    """
    from dbo_trace.commands import record as recording
    from dbo_trace.record.loadgen import LoadSpec
    from dbo_trace.record.recorder import ProfileWindow

    request = recording.RecordRequest(
        command=tuple(command), out=out, server=server, url=url,
        load=LoadSpec(num_prompts=num_prompts, concurrency=concurrency, input_len=input_len, output_len=output_len, seed=seed),
        warmup_prompts=warmup_prompts,
        window=ProfileWindow(delay_iterations=profile_delay, max_iterations=profile_steps, with_stack=with_stack),
        startup_timeout=startup_timeout, grace=grace, trace_timeout=trace_timeout, repeats=repeats,
        peer_command=peer_command, peer_ready_port=peer_ready_port, python_samples=python_samples,
        python_sample_rate=python_sample_rate,
    )  # fmt: skip
    recording.run(request.checked())


def _concurrencies(ctx, param, value: str) -> tuple[int, ...]:
    try:
        numbers = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give requests in flight as numbers separated by commas, e.g. 16,32,64") from None
    if not numbers or any(not 1 <= n <= 100_000 for n in numbers):
        raise click.BadParameter(f"{value!r}: each load is 1 to 100000 requests in flight")
    return numbers


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="The sweep folder (new or empty; an earlier sweep's with --resume).")
@click.option("--arm", "arms", multiple=True, metavar="NAME='ARGS'", help="An arm: NAME and the flags it adds to the server's command (and the peer's), split as a shell splits them (quote a JSON value inside: --arm \"cg=--compilation-config '{...}'\"). Repeat per arm.")
@click.option("--dbo-ablation", is_flag=True, help="Two arms: dbo-off (the command as given) and dbo-on (+ --enable-dbo), before any --arm.")
@click.option("--concurrency", default="16,32,64", show_default=True, callback=_concurrencies, help="The loads: requests in flight, one load each (folders c16, c32, ...).")
@click.option("--num-prompts", type=click.IntRange(1, 1_000_000), help="Requests per repeat and window, the same at every load (default: --num-prompts-per-slot x concurrency).")
@_number("--num-prompts-per-slot", 4, click.IntRange(1, 10_000), "Requests per repeat and window, per request in flight: each load's runs last a few rounds of its batch.")
@_number("--input-len", 512, click.IntRange(1, 10_000_000), "Random prompt tokens per request.")
@_number("--output-len", 64, click.IntRange(1, 10_000_000), "Generated tokens per request (EOS ignored).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1), help="Seed of the random prompts.")
@_number("--repeats", 3, click.IntRange(0, 1000), "Timed repeats per arm and load, profiler off (vllm bench serve where installed).")
@click.option(
    "--repeat-tool", type=click.Choice(["auto", "builtin"]), default="auto", show_default=True,
    help="What times the repeats: auto is vllm bench serve where COMMAND is `vllm serve`; builtin is dbo-trace's load, the same figures measured the same way without vLLM's start-up (~25 s) per repeat.",
)  # fmt: skip
@click.option("--profile/--no-profile", default=True, show_default=True, help="One profiled window per arm and load, after its repeats.")
@_number("--profile-delay", 0, click.IntRange(0, 1_000_000), "Engine steps to skip after the profiler starts (vLLM's delay_iterations).")
@_number("--profile-steps", 0, click.IntRange(0, 1_000_000), "Engine steps to profile, 0 for the whole window's load (vLLM's max_iterations).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the traces (slower, larger).")
@click.option("--warmup-prompts", type=click.IntRange(0, 1_000_000), help="Requests sent once per arm before its first load (default: the largest concurrency).")
@click.option("--url", help="The server's base URL (default: from COMMAND's --host/--port, else http://127.0.0.1:8000).")
@click.option("--peer-command", metavar="COMMAND", help="A server to start first and record beside COMMAND, as one quoted string: the AFD plugin's FFN server. Each arm's flags are added to it too.")
@click.option("--peer-ready-port", type=click.IntRange(1, 65535), help="Start COMMAND once the peer listens on this port (default: the peer's AFD port).")
@_number("--startup-timeout", 1200.0, _Finite(1, 7 * 86400), "Seconds to wait for /health (and the peer's port).")
@_number("--grace", 30.0, _Finite(0, 3600), "Seconds between SIGINT, SIGTERM and SIGKILL when stopping.")
@_number("--trace-timeout", 300.0, _Finite(1, 86400), "Seconds to wait for the traces after /stop_profile.")
@click.option("--resume", is_flag=True, help="Run what OUT's sweep lacks (its failed, incomplete and pending runs; new arms). COMMAND and options may be left out: OUT/sweep.json has them.")
@click.option("--mps", is_flag=True, help="Run the sweep's own MPS control daemon (one GPU shared by an AFD pair's roles), started afresh between arms; without it a running daemon is used as it is. Either way each arm waits until the GPU takes a new CUDA client.")
def sweep(command, out, arms, dbo_ablation, concurrency, num_prompts, num_prompts_per_slot, input_len, output_len, seed, repeats,
          profile, profile_delay, profile_steps, with_stack, warmup_prompts, url, peer_command, peer_ready_port, startup_timeout,
          grace, trace_timeout, resume, repeat_tool, mps) -> None:  # fmt: skip
    """Record an ablation at several loads: dbo-trace sweep -o OUT --dbo-ablation -- vllm serve MODEL ...

    \b
    Each arm (--dbo-ablation, --arm NAME='flags') starts the server (and
    the --peer-command, the AFD FFN server, first) once with its flags, warms
    up, then at each --concurrency: --repeats timed runs of vllm bench serve
    with the profiler off, then one profiled window (unless --no-profile).
    One bundle per arm and load, OUT/ARM/cN, that `report` reads alone, and
    OUT/sweep.json, rewritten after each run. Ctrl-C keeps every finished
    load; --resume runs the rest. docs/recording.md, "A load sweep".
    """
    from dbo_trace.commands import sweep as sweeping
    from dbo_trace.record.recorder import ProfileWindow

    request = sweeping.SweepRequest(
        out=out, command=tuple(command), arms=tuple(arms), dbo_ablation=dbo_ablation, concurrency=concurrency,
        num_prompts=num_prompts, prompts_per_slot=num_prompts_per_slot, input_len=input_len, output_len=output_len,
        seed=seed, repeats=repeats, profile=profile,
        window=ProfileWindow(delay_iterations=profile_delay, max_iterations=profile_steps, with_stack=with_stack),
        warmup_prompts=warmup_prompts, url=url, peer_command=peer_command, peer_ready_port=peer_ready_port,
        startup_timeout=startup_timeout, grace=grace, trace_timeout=trace_timeout, resume=resume, repeat_tool=repeat_tool,
        mps=mps,
    )  # fmt: skip
    sweeping.run(request)


@main.command()
@click.option(
    "--mode",
    type=click.Choice([*DEMO_MODES, "all"]),
    default="all",
    show_default=True,
    help="Which truth to check.",
)
@click.option("--layers", default=4, show_default=True, type=click.IntRange(1, 1000))
@_number("--tokens", 16384, click.IntRange(2, 1 << 24), "Tokens per step, split over the two microbatches.")
@_number("--hidden", 8192, click.IntRange(64, 1 << 16), "GEMM width.")
@click.option(
    "--compute-us", type=_Finite(1, 1e7), help="Length of one compute phase (sets --tokens by measuring this GPU)."
)
@_number("--comm-us", 1000.0, _Finite(1, 1e7), "Length of one dispatch or combine.")
@_number("--steps", 5, click.IntRange(1, 10_000), "Profiled steps per mode.")
@_number("--nproc", 1, click.IntRange(1, 1024), "Processes, one per GPU: real all_to_all over NCCL.")
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
    from dbo_trace.commands import demo as command

    request = command.DemoRequest(
        mode=mode, layers=layers, tokens=tokens, hidden=hidden, compute_us=compute_us, comm_us=comm_us, steps=steps,
        nproc=nproc, out=out, sweep=sweep, sweep_compute_us=sweep_compute_us, sweep_comm_us=sweep_comm_us, plot=plot,
        ubatching=ubatching, comm=comm, device=device,
    )  # fmt: skip
    command.run(request.checked())


@main.command()
def doctor() -> None:
    """What this Python would record with: versions, the plugin, profile_all_threads, each vLLM target."""
    from dbo_trace.commands import doctor as command

    command.run(command.DoctorRequest().checked())


@main.command()
@click.argument("folder", type=click.Path(path_type=Path), required=False)
@click.option("--once", is_flag=True, help="Print the counters once and exit (for scripts and logs).")
@_number("--interval", 1.0, _Finite(0.1, 3600), "Seconds between refreshes.")
def top(folder, once, interval) -> None:
    """Live DBO counters of a running vLLM, without a profiler: dbo-trace top [FOLDER]

    \b
    FOLDER is the server's DBO_TRACE_DIR or a recording (the folder to read;
    without it, $DBO_TRACE_DIR). Per process that runs the model: steps and
    steps/s, the share microbatched, the UBatchWrapper paths taken, CUDA
    graph replays per mode, yields per step and how long each microbatch
    waited for its turn. The plugin rewrites its counters every second while
    steps run (DBO_TRACE_DIR must be set in the server's environment). On a
    terminal the table refreshes in place; piped or redirected, each refresh
    is written as plain lines (a record per process, stamped with the time,
    wrapped to the width, 80 columns where piped, its later lines indented) as
    it comes. A recording that has finished (its manifest says so) is shown
    once, as with --once: its counters will not change. A load sweep's
    folder shows its live arm, or says that no load is live and exits.
    """
    from dbo_trace.commands import top as command

    command.run(command.TopRequest(folder=folder, once=once, interval=interval).checked())


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
