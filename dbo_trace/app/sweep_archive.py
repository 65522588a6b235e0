"""`dbo-trace archive OUT` of a load sweep's folder: the sweep as one file a reviewer can attach.

Holds the sweep's summary (summary.md naming sweep.png, the picture, sweep-summary.json, which
`report` of the archive shows again), sweep.json with its command lines redacted, and each run's
bundle as `archive` packs one bundle (app/review_archive.py: its Markdown report, median step's
picture, JSON report, redacted manifest and a Perfetto window), under runs/. Within the size cap
and the reader's member cap: where they are over, the runs' Perfetto windows shrink to one step,
then go, then the runs' pictures, then runs are left out from the last; each trim is said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbo_trace.app.review_archive import MAX_MEMBERS, Packed, archive_bytes, step_window
from dbo_trace.files import create_file, replace_file

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Report
    from dbo_trace.render.sweep import SweepDocument

SWEEP_SUMMARY = "sweep-summary.json"  # the member `report` of the archive reads (review_archive.SWEEP_MEMBER)
SUMMARY_MEMBERS = 4  # summary.md, sweep.png, sweep-summary.json, sweep.json


@dataclass(frozen=True)
class RunToPack:
    arm: str
    load: str
    bundle: Path
    report: Report


def member_folder(index: int, run: RunToPack) -> str:
    """A run's folder in the archive: its position and its names, cut to safe characters (the names come
    from sweep.json: no `..`, slash or control character reaches a member's name)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{run.arm}-{run.load}")[:60].strip("._") or "run"
    return f"runs/{index + 1:02d}-{name}"


def _redacted_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """sweep.json with the redaction rules applied: every value, and each command line as a command line."""
    from dbo_trace.redact import redact_argv, redact_json

    out: dict[str, Any] = redact_json(spec)
    for key in ("command", "peer_command"):
        if isinstance(out.get(key), list):
            out[key] = redact_argv([str(a) for a in out[key]])
    for arm in out.get("arms") or []:
        if isinstance(arm, dict) and isinstance(arm.get("args"), list):
            arm["args"] = redact_argv([str(a) for a in arm["args"]])
    return out


def _run_members(run: RunToPack, level: int, steps: int) -> tuple[dict[str, bytes], str | None]:
    """One run's members at a trim level: 0 every member, its window of `steps`; 1 a one-step window;
    2 no window; 3 no window and no picture. The window's steps, described, where it has one."""
    from dbo_trace import bundle as fmt
    from dbo_trace.redact import redact_text
    from dbo_trace.render import RENDERERS, RenderOptions, as_bytes

    report = run.report
    out = {
        "summary.md": redact_text(str(RENDERERS["markdown"].render(report, RenderOptions(image="timeline.png")))).encode(),
        "report.json": redact_text(str(RENDERERS["json"].render(report, RenderOptions()))).encode(),
    }
    if fmt.is_bundle(run.bundle):
        out["manifest.json"] = fmt.archived_manifest(run.bundle)
    if level <= 2:
        out["timeline.png"] = as_bytes(RENDERERS["png"].render(report, RenderOptions()))
    described = None
    if level <= 1:
        windows, steps_said = step_window(report, steps if level == 0 else 1)
        out["window.pftrace"] = as_bytes(RENDERERS["perfetto"].render(report, RenderOptions(windows=windows)))
        described = "; ".join(steps_said)
    return out, described


LEVELS = ("its Perfetto window", "a one-step Perfetto window", "no Perfetto window", "no Perfetto window or picture")


def pack_sweep(
    document: SweepDocument, spec: dict[str, Any], runs: list[RunToPack], out: Path, max_bytes: int, steps: int,
    force: bool = False,
) -> Packed:  # fmt: skip
    """The sweep's members first (the summary's JSON among the reader's first members), then each run's."""
    import msgspec

    from dbo_trace.redact import redact_argv, redact_text
    from dbo_trace.render.base import RenderOptions
    from dbo_trace.render.pictures.sweep_plot import draw_sweep
    from dbo_trace.render.sweep import SWEEP_RENDERERS

    d = msgspec.structs.replace(
        document, command=redact_argv(document.command),
        peer_command=None if document.peer_command is None else redact_argv(document.peer_command),
    )  # fmt: skip
    head = {
        "summary.md": redact_text(SWEEP_RENDERERS["markdown"].render(d, RenderOptions(image="sweep.png"))).encode(),
        "sweep.png": draw_sweep(d, "png"),
        SWEEP_SUMMARY: redact_text(SWEEP_RENDERERS["json"].render(d)).encode(),
        "sweep.json": (json.dumps(_redacted_spec(spec), indent=2) + "\n").encode(),
    }
    per_run = (MAX_MEMBERS - SUMMARY_MEMBERS) // max(1, len(runs))  # members the reader allows each run
    for level, said in enumerate(LEVELS):
        members, kept, windows = dict(head), 0, []
        for i, run in enumerate(runs):
            got, described = _run_members(run, level, steps)
            if len(members) + len(got) > MAX_MEMBERS - 1 or (level < len(LEVELS) - 1 and len(got) > per_run):
                break
            members.update({f"{member_folder(i, run)}/{name}": data for name, data in got.items()})
            kept += 1
            if described:
                windows.append(f"{run.arm} at {run.load}: {described}")
        data = archive_bytes(members)
        if kept == len(runs) and len(data) <= max_bytes:
            break
    trimmed = [f"each run's bundle with {said}"] + [f"Perfetto window of {w}" for w in windows]
    while len(data) > max_bytes and kept > 0:  # the last trim: runs left out from the last
        kept -= 1
        members = {k: v for k, v in members.items() if not k.startswith(member_folder(kept, runs[kept]) + "/")}
        data = archive_bytes(members)
    if kept < len(runs):
        left = ", ".join(f"{r.arm} at {r.load}" for r in runs[kept:])
        trimmed.append(f"left out to stay within the caps ({max_bytes / 1e6:g} MB, {MAX_MEMBERS} members): {left}")
    if len(data) > max_bytes:
        raise ValueError(f"the sweep's summary alone is {len(data) / 1e6:.1f} MB, over the {max_bytes / 1e6:g} MB cap; raise --max-mb")
    (replace_file if force else create_file)(out, data)
    return Packed(out, len(data), sorted(members), trimmed)
