"""`dbo-trace archive`: one file a reviewer can open, under a size cap, with secrets out.

Holds the Markdown summary, the timeline picture of the median step, the JSON
report, a Perfetto trace of a window of steps around the median step (not the
whole run), and the recording's manifest, redacted again on packing. (A
*recording*, the folder `record` writes, is what docs and code call a bundle.)
`report` reads an archive back: its JSON report, rendered as text.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dbo_trace import bundle as fmt
from dbo_trace.analysis.report import Report
from dbo_trace.analysis.view import steps_around_median, window_steps
from dbo_trace.files import replace_file
from dbo_trace.record.redact import redact_argv, redact_env, redact_json, redact_text

MEMBER_ROOT = "dbo-trace"
REPORT_MEMBER = f"{MEMBER_ROOT}/report.json"


def is_archive(path: Path) -> bool:
    """A review archive: a tar file (gzipped or not) with the report's JSON inside."""
    try:
        if not path.is_file() or not tarfile.is_tarfile(path):
            return False
        with tarfile.open(path) as tar:
            return REPORT_MEMBER in tar.getnames()
    except (OSError, tarfile.TarError, EOFError):
        return False


def read_report_document(path: Path) -> dict:
    """The JSON document the archive holds; UsageError (one line) where it cannot be read."""
    from dbo_trace.errors import UsageError
    from dbo_trace.render.document import SCHEMA, SCHEMA_VERSION

    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile(REPORT_MEMBER)
            doc = json.loads(member.read()) if member is not None else None
    except (OSError, tarfile.TarError, EOFError, ValueError) as exc:
        raise UsageError(f"{path}: the archive's report cannot be read ({exc}); re-create it with dbo-trace archive") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{path}: {REPORT_MEMBER} is not a dbo-trace report; re-create it with dbo-trace archive")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: its report has schema version {doc.get('schema_version')}, this dbo-trace reads {SCHEMA_VERSION}; "
            "re-create the archive from the recording"
        )
    return doc


@dataclass
class Packed:
    archive: Path
    size: int
    members: list[str]
    trimmed: list[str] = field(default_factory=list)


def step_window(report: Report, steps: int) -> tuple[dict[int, tuple[float, float]], list[str]]:
    """Per rank, the time window of `steps` consecutive steps centred on the median step."""
    windows, described = {}, []
    for rank in report.ranks:
        if not rank.steps:
            continue
        positions = steps_around_median(rank, steps)
        first, last = rank.steps[positions[0]], rank.steps[positions[-1]]
        windows[rank.rank] = (first.start_us, last.end_us)
        described.append(f"rank {rank.rank}: {window_steps(rank, positions)} of {len(rank.steps)} steps")
    return windows, described


def clean_manifest(manifest: dict) -> dict:
    """The recording's manifest with the redaction rules applied again (older bundles, edited ones)."""
    out = redact_json(manifest)
    for key in ("command", "user_command"):
        if isinstance(out.get(key), list):
            out[key] = redact_argv([str(a) for a in out[key]])
    if isinstance(out.get("env"), dict):
        out["env"] = redact_env({str(k): str(v) for k, v in out["env"].items()})
    return out


def _archive(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{MEMBER_ROOT}/{name}")
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pack(report: Report, source: Path, out: Path, max_bytes: int, steps: int) -> Packed:
    """Every member rendered through the one registry: the Markdown linking the median step's
    picture, the picture, the JSON document, and a Perfetto window trimmed to fit max_bytes."""
    from dbo_trace.render import RENDERERS, RenderOptions, as_bytes

    def text(name: str, options: RenderOptions = RenderOptions()) -> bytes:
        return redact_text(str(RENDERERS[name].render(report, options))).encode()

    members: dict[str, bytes] = {
        "summary.md": text("markdown", RenderOptions(image="timeline.png")),
        "timeline.png": as_bytes(RENDERERS["png"].render(report, RenderOptions())),
        "report.json": text("json"),
    }
    if fmt.is_bundle(source):
        members["manifest.json"] = (
            json.dumps(clean_manifest(fmt.read_manifest(source)), indent=2, sort_keys=True) + "\n"
        ).encode()
    trimmed: list[str] = []
    for n in sorted({steps, 1}, reverse=True):
        windows, described = step_window(report, n)
        members["window.pftrace"] = as_bytes(RENDERERS["perfetto"].render(report, RenderOptions(windows=windows)))
        data = _archive(members)
        if len(data) <= max_bytes:
            trimmed.append("Perfetto window: " + "; ".join(described))
            break
    else:
        del members["window.pftrace"]
        data = _archive(members)
        trimmed.append(f"the Perfetto window was left out: one step alone exceeds the {max_bytes / 1e6:g} MB cap")
        if len(data) > max_bytes:
            raise ValueError(
                f"the summary alone is {len(data) / 1e6:.1f} MB, over the {max_bytes / 1e6:g} MB cap; raise --max-mb"
            )
    replace_file(out, data)
    return Packed(out, len(data), sorted(members), trimmed)
