"""`dbo-trace top`: live DBO counters of a running vLLM, read from its DBO_TRACE_DIR."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from dbo_trace.commands.common import fail, stdout_gone, terminal_width
from dbo_trace.errors import inert


@dataclass(frozen=True)
class TopRequest:
    folder: Path | None = None  # None: $DBO_TRACE_DIR (checked() fills it in)
    once: bool = False
    interval: float = 1.0

    def checked(self) -> TopRequest:
        folder = self.folder
        if folder is None:
            if not os.environ.get("DBO_TRACE_DIR"):
                fail("top: no folder given and $DBO_TRACE_DIR is not set; give the server's DBO_TRACE_DIR or a recording")
            folder = Path(os.environ["DBO_TRACE_DIR"])
            click.echo(f"dbo-trace top: reading $DBO_TRACE_DIR ({inert(str(folder))})", err=True)
        if not folder.is_dir():
            fail(f"{folder}: no such folder; give the server's DBO_TRACE_DIR or a recording")
        return replace(self, folder=folder)


def finished(folder: Path) -> str | None:
    """The final status of a recording that has ended, else None: record writes its manifest with
    status "recording" when it starts and its final status (complete, incomplete, failed, ...) at the
    end; a bundle without a status (the demo's, or one from before statuses) was written whole. A
    load sweep's arm folder (its server's counters, no manifest of its own) has ended when none of its
    loads is pending in sweep.json. A server's own DBO_TRACE_DIR has no manifest, and a manifest that
    cannot be read says nothing."""
    from dbo_trace import bundle as fmt
    from dbo_trace.record.recorder import STATUS_RECORDING

    if not fmt.is_bundle(folder):
        arm = _sweep_arm(folder)
        return None if arm is None or PENDING in arm else "a sweep's arm, its loads " + _statuses(arm)
    try:
        status = fmt.read_bundle_manifest(folder).status
    except fmt.BundleError:
        return None
    if status is None:
        return "written whole"
    return status if status != STATUS_RECORDING else None


PENDING = "pending"  # sweep_folder.PENDING: a run sweep.json lists that has not run (or is running)


def _sweep_arm(folder: Path) -> list[str] | None:
    """The statuses in sweep.json of the arm whose folder this is (a load sweep's OUT/ARM), in its
    loads' order; None where the folder is no sweep's arm or sweep.json cannot be read."""
    from dbo_trace.sweep_folder import SweepError, is_sweep, read_spec

    parent = folder.resolve().parent
    if not is_sweep(parent):
        return None
    try:
        spec = read_spec(parent)
    except SweepError:
        return None
    name = folder.resolve().name
    if name not in {a.name for a in spec.arms}:
        return None
    status = {r.load: r.status for r in spec.runs if r.arm == name}
    return [status.get(load.name, PENDING) for load in spec.loads]


def _statuses(statuses: list[str]) -> str:
    """`3 complete`, `2 complete, 1 failed`: how many runs of each status, in the order first met."""
    return ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))


def live_load(folder: Path) -> tuple[str, str] | None:
    """A load sweep's folder: the arm whose server runs now and its load (the first pending, in the
    sweep's order: it runs arms one after another, each arm's loads in turn), or None where no load
    is pending (every run finished, failed or skipped). A sweep.json that cannot be read is one line."""
    from dbo_trace.sweep_folder import SweepError, read_spec

    try:
        spec = read_spec(folder)
    except SweepError as exc:
        fail(str(exc))
    done = {(r.arm, r.load) for r in spec.runs if r.status != PENDING}
    return next(((a.name, x.name) for a in spec.arms for x in spec.loads if (a.name, x.name) not in done), None)


def ended_at(folder: Path) -> str | None:
    """When a finished recording ended, from its manifest (times.ended, UTC), as `2026-12-01
    22:10:48 UTC`; None where the manifest has no such time (the demo's bundles)."""
    from datetime import datetime, timezone

    from dbo_trace import bundle as fmt

    try:
        ended = fmt.read_bundle_manifest(folder).ended
        when = datetime.fromisoformat(ended).astimezone(timezone.utc) if ended is not None else None
    except (fmt.BundleError, ValueError, OverflowError):  # OverflowError: a time past the calendar's ends in UTC
        return None
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when is not None else None


def _echo(line: str, err: bool = False) -> None:
    """A line of top's own, wrapped to the terminal's width (80 where piped), its later lines indented."""
    from dbo_trace.render.layout import wrap

    for part in wrap(line, terminal_width(), "", "  "):
        click.echo(part, err=err)


def run(request: TopRequest) -> None:
    import time

    from rich.console import Console
    from rich.live import Live

    from dbo_trace import bundle as fmt
    from dbo_trace.analysis.live import live_row
    from dbo_trace.render.live import live_lines, live_table

    folder, interval = request.folder, request.interval
    assert folder is not None, "run a checked() request"
    from dbo_trace.sweep_folder import is_sweep, read_spec

    if is_sweep(folder):  # a load sweep: its counters are its arms' (OUT/ARM/events), one arm live at a time
        pending = live_load(folder)
        if pending is None:  # nothing will change: say so and end, as for a finished recording
            runs = _statuses([r.status for r in read_spec(folder).runs]) or "none"
            _echo(f"dbo-trace top {inert(str(folder))}: a load sweep with no load live (its runs: {runs}); "
                  f"`dbo-trace report {inert(str(folder))}` summarises it")  # fmt: skip
            return
        arm, load = pending
        said = f"{inert(str(folder))} is a load sweep; its live arm is {inert(arm)} (load {inert(load)})"
        _echo(f"dbo-trace top: {said}", err=True)
        folder = folder / arm
    previous: dict[str, dict] = {}
    final = None if request.once else finished(folder)
    ended = ended_at(folder) if final is not None else None
    if final is not None and not fmt.read_counters(folder):  # nothing to show, now or ever: one line
        fail(f"{folder}: a finished recording ({final}) with no live counters (the plugin writes them only where "
             "DBO_TRACE_DIR was set in the server's environment); `dbo-trace report` reads its traces")  # fmt: skip

    def sample():
        found = fmt.read_counters(folder)
        # a finished recording's counters are its last: their age would read as a stalled server
        rows = [live_row(body, previous.get(str(path)), interval, None if final else age) for path, body, age in found]
        previous.update({str(path): body for path, body, _ in found})
        working = [r for r in rows if r.steps or r.replays or r.graph_captures]  # the API server runs no model
        title = f"dbo-trace top {folder}"
        if final is not None:
            title += f" (finished: {final}" + (f", ended {ended}" if ended else "") + ")"
        if not rows:
            title += " (no counters yet: is this the server's DBO_TRACE_DIR?)"
        elif not working:
            why = "DBO and CUDA graphs were off, or no step ran" if final else "DBO off, or no step run yet"
            title += f" ({len(rows)} process(es) wrote counters, none a microbatched step or a graph replay: {why})"
        elif len(working) < len(rows):
            title += f" ({len(rows) - len(working)} process(es) that run no model left out)"
        return working, title, bool(rows)

    def table():
        working, title, found = sample()
        return live_table(working, title, terminal_width()), found

    def write_lines() -> bool:
        working, title, found = sample()
        sys.stdout.write("\n".join(live_lines(working, title, time.strftime("%H:%M:%S"), terminal_width())) + "\n")
        sys.stdout.flush()
        return found

    plain = not sys.stdout.isatty()  # a pipe or a file: plain lines, each refresh as it comes
    console = Console(soft_wrap=True)  # the lines are laid out to the width already
    if final is not None:  # its counters will not change: waiting for more would wait forever
        click.echo("dbo-trace top: the recording has finished; its final counters, once", err=True)
    if request.once or final is not None:
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
    except KeyboardInterrupt:  # the way to stop it: exit 130, as every command stopped by Ctrl-C
        sys.exit(130)
    except BrokenPipeError:  # `dbo-trace top | head`: the reader has what it wanted
        stdout_gone()
