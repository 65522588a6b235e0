"""`dbo-trace archive`: the reviewer's archive from a real sample, under its cap, secrets planted in the
manifest removed, and the Perfetto window holding only the chosen steps."""

import json
import os
import shutil
import tarfile

import pytest
from conftest import ROOT, SAMPLES, run_cli, RUN_SAMPLES

SECRETS = ("hf_planted_secret", "sk-planted-secret", "pw-planted")


def planted_copy(tmp_path):
    src = tmp_path / "run"
    shutil.copytree(SAMPLES / "overlap", src)
    m = json.loads((src / "manifest.json").read_text())
    m["env"] = {"HF_TOKEN": "hf_planted_secret", "VLLM_LOGGING_LEVEL": "INFO"}
    m["command"] = ["vllm", "serve", "m", "--api-key", "sk-planted-secret", "--enable-dbo"]
    m["endpoint"] = "http://user:pw-planted@example.invalid/v1"
    (src / "manifest.json").write_text(json.dumps(m))
    return src


def members(archive):
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}


def window_steps(pftrace: bytes) -> list[str]:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(pftrace)
    step_track = next(
        p.track_descriptor.uuid
        for p in trace.packet
        if p.HasField("track_descriptor") and p.track_descriptor.name == "steps (verdict)"
    )
    return [
        p.track_event.name
        for p in trace.packet
        if p.HasField("track_event")
        and p.track_event.track_uuid == step_track
        and p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN
    ]


def test_archive_packs_a_redacted_archive_under_the_cap(tmp_path):
    src = planted_copy(tmp_path)
    out = tmp_path / "review.tar.gz"
    proc = run_cli("archive", str(src), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size <= 25e6 and f"wrote {out}" in proc.stdout
    files = members(out)
    assert sorted(files) == ["manifest.json", "report.json", "summary.md", "timeline.png", "window.pftrace"]
    blob = b"".join(files.values())
    for secret in SECRETS:
        assert secret.encode() not in blob
    manifest = json.loads(files["manifest.json"])
    assert manifest["env"] == {"HF_TOKEN": "<redacted>", "VLLM_LOGGING_LEVEL": "INFO"}
    assert manifest["command"][4] == "<redacted>" and manifest["command"][5] == "--enable-dbo"
    summary = files["summary.md"].decode()  # the picture named, with how to attach it: a comment cannot link a local file
    assert "drag `timeline.png` into the comment box" in summary and "![" not in summary
    assert files["timeline.png"][:8] == b"\x89PNG\r\n\x1a\n"
    # Three steps around the median step (step 15 here: the median of the five step times).
    report = json.loads(run_cli("report", "--json", str(SAMPLES / "overlap")).stdout)
    by_time = sorted(report["steps"], key=lambda s: s["step_us"])
    median_label = by_time[(len(by_time) - 1) // 2]["label"]
    names = window_steps(files["window.pftrace"])
    assert len(names) == 3 and any(n.startswith(median_label + ":") for n in names)


def test_archive_trims_the_window_to_fit_the_cap(tmp_path):
    src = planted_copy(tmp_path)
    sizes = {}
    for n in (1, 5):
        out = tmp_path / f"w{n}.tar.gz"
        assert run_cli("archive", str(src), "-o", str(out), "--steps", str(n)).returncode == 0
        sizes[n] = out.stat().st_size
    assert sizes[1] < sizes[5]
    cap_mb = (sizes[1] + sizes[5]) / 2 / 1e6
    out = tmp_path / "capped.tar.gz"
    proc = run_cli("archive", str(src), "-o", str(out), "--steps", "5", "--max-mb", f"{cap_mb:.6f}")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size <= cap_mb * 1e6
    assert len(window_steps(members(out)["window.pftrace"])) == 1
    assert "of 5 steps" in proc.stdout


def test_archive_too_small_a_cap_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "x.tar.gz"
    proc = run_cli("archive", str(SAMPLES / "overlap"), "-o", str(out), "--max-mb", "0.001")
    assert proc.returncode == 2 and "over the 0.001 MB cap; raise --max-mb" in proc.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_archive_into_a_missing_folder_is_one_line(tmp_path):
    from conftest import SAMPLES, run_cli

    proc = run_cli("archive", str(SAMPLES / "overlap"), "-o", str(tmp_path / "nowhere" / "x.tar.gz"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_report_shows_an_archive_as_the_recording_reported_it(tmp_path):
    """What was attached reads back: the archive's JSON is the recording's, and the terminal and
    Markdown summaries render from it; options that need the traces are refused in one line."""
    out = tmp_path / "review.tar.gz"
    assert run_cli("archive", str(SAMPLES / "late"), "-o", str(out)).returncode == 0
    direct = run_cli("report", "--json", str(SAMPLES / "late"))
    again = run_cli("report", "--json", str(out))
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(direct.stdout)
    shown = run_cli("report", str(out))
    assert shown.returncode == 0 and shown.stdout.startswith("verdict: ") and "comm held back" in shown.stdout
    assert run_cli("report", "--markdown", str(out)).stdout.startswith("### dbo-trace: **")
    refused = run_cli("report", str(out), "--timeline", str(tmp_path / "t.png"))
    assert refused.returncode == 2 and "holds the finished report, not the traces" in refused.stderr
    assert not (tmp_path / "t.png").exists()


def test_the_commands_first_name_still_runs(tmp_path):
    out = tmp_path / "old-name.tar.gz"
    proc = run_cli("bundle", str(SAMPLES / "overlap"), "-o", str(out))
    assert proc.returncode == 0 and out.exists()


@pytest.mark.parametrize("name", ["review.zip", "review.tar", "review.tgz", "review"])
def test_archive_refuses_a_name_that_is_not_tar_gz(tmp_path, name):
    """Before: `-o review.zip` silently wrote a gzipped tar under that name. Now one line, exit 2,
    nothing written, before any analysis."""
    out = tmp_path / name
    proc = run_cli("archive", str(SAMPLES / "overlap"), "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr == f"dbo-trace: error: {out}: dbo-trace archive writes a gzipped tar; give -o a name that ends in .tar.gz\n"
    )
    assert proc.stdout == "" and not out.exists() and os.listdir(tmp_path) == []


def test_only_report_alone_reads_an_archive_and_the_others_say_so(tmp_path):
    """Before: compare, archive and report of an archive beside a recording called the archive "not
    one `dbo-trace archive` made (it has no report.json first)", of a file dbo-trace archive had
    just written. Now each names it a review archive and says what reads it; nothing is written."""
    review = tmp_path / "review.tar.gz"
    assert run_cli("archive", str(SAMPLES / "overlap"), "-o", str(review)).returncode == 0
    said = f"{review}: a review archive, which holds a finished report, not traces: `dbo-trace report {review}`"
    for args in (
        ("compare", str(review), str(SAMPLES / "serial")),
        ("archive", str(review), "-o", str(tmp_path / "again.tar.gz")),
        ("report", str(review), str(SAMPLES / "serial")),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2 and proc.stderr.startswith(f"dbo-trace: error: {said}"), (args, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.tar.gz"]


def test_archive_lines_fit_80_columns_the_path_whole_on_its_own(tmp_path, monkeypatch):
    """Before: one line of 105 columns (path, size, every member) and a Perfetto-window line of 129
    on two ranks. Now the path stands whole on its own line, the rest wraps to the width."""
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "review.tar.gz"
    proc = run_cli("archive", str(SAMPLES / "two-gpu-overlap"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert first == f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, cap 25 MB)"
    assert rest and all(len(line) <= 80 and line.startswith("  ") for line in rest), rest
    said = " ".join(line.strip() for line in rest)
    assert "holding manifest.json, report.json, summary.md, timeline.png, window.pftrace" in said
    assert "rank 0: steps #3 to #5" in said and "rank 1: steps #3 to #5" in said


@pytest.mark.parametrize("sample", RUN_SAMPLES)
def test_every_sample_archived_reads_back_with_its_verdict(tmp_path, sample):
    """`archive` then `report` on every shipped sample: the archive reads back, and its verdict (label,
    reasons' kinds, next step) is the one `report --json` of the sample writes (tests/golden). No
    member holds the redaction marker: no sample holds a secret, so one would be a rule misfiring on
    the report's own words or the trace's names (issue 61: every summary's `key: <redacted>`)."""
    out = tmp_path / f"{sample}.tar.gz"
    made = run_cli("archive", str(SAMPLES / sample), "-o", str(out))
    assert made.returncode == 0, made.stderr
    masked = {name: data.count(b"<redacted>") for name, data in members(out).items()}
    assert not any(masked.values()), masked
    again = run_cli("report", "--json", str(out))
    assert again.returncode == 0, again.stderr
    golden = json.loads((ROOT / "tests" / "golden" / f"{sample}.json").read_text())["verdict"]
    got = json.loads(again.stdout)["verdict"]
    assert got["label"] == golden["label"]
    assert [r["kind"] for r in got["reasons"]] == [r["kind"] for r in golden["reasons"]]
    assert got["next_step"] == golden["next_step"]
