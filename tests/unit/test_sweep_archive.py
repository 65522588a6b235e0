"""`dbo-trace archive` of a load sweep's folder (issue 61, item 12): the sweep's summary, sweep.json and
its runs' bundles in one archive within the caps, secrets out, and `report` of the archive giving the
sweep's summary. The expected figures are read from the folder's own files with the standard library."""

from __future__ import annotations

import io
import json
import shutil
import tarfile

import pytest
from conftest import ROOT, SAMPLES, run_cli

SWEEP = SAMPLES / "afd-sweep"


def members(archive) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "sweep.tar.gz"
    proc = run_cli("archive", str(SWEEP), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_a_sweep_folder_archives_with_its_summary_sweep_json_plot_and_bundles(archived):
    out, said = archived
    held = members(out)
    assert out.stat().st_size <= 25e6 and len(held) <= 64  # the size cap and the reader's member cap
    names = list(held)
    # the summary's JSON among the reader's first members, where report finds it
    assert names[:4] == ["dbo-trace/summary.md", "dbo-trace/sweep.png", "dbo-trace/sweep-summary.json", "dbo-trace/sweep.json"]
    assert held["dbo-trace/sweep.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(held["dbo-trace/sweep.json"]) == json.loads((SWEEP / "sweep.json").read_text())  # nothing to redact
    runs = json.loads((SWEEP / "sweep.json").read_text())["runs"]
    folders = sorted({n.split("/")[2] for n in names if n.startswith("dbo-trace/runs/")})
    assert len(folders) == len(runs) == 6
    for folder in folders:
        got = {n.rsplit("/", 1)[1] for n in names if n.startswith(f"dbo-trace/runs/{folder}/")}
        assert got == {"manifest.json", "report.json", "summary.md", "timeline.png", "window.pftrace"}
    by_folder = {json.dumps(json.loads(held[f"dbo-trace/runs/{f}/manifest.json"])["times"]): f for f in folders}
    for run in runs:  # each run's own manifest (nothing in it to redact), under a folder named by it
        manifest = json.loads((SWEEP / run["bundle"] / "manifest.json").read_text())
        folder = by_folder[json.dumps(manifest["times"])]
        assert folder.endswith(f"{run['arm']}-{run['load']}")
        assert json.loads(held[f"dbo-trace/runs/{folder}/manifest.json"]) == manifest
        assert json.loads(held[f"dbo-trace/runs/{folder}/report.json"])["schema"] == "dbo-trace-report"
    assert not [n for n, data in held.items() if b"<redacted>" in data]
    assert "holding summary.md, sweep-summary.json, sweep.json, sweep.png, 6 runs' bundles under runs/" in " ".join(said.split())


def test_report_of_a_sweep_archive_gives_the_sweeps_summary(archived, monkeypatch):
    out, _ = archived
    monkeypatch.setenv("COLUMNS", "100")
    for flag in ([], ["--json"], ["--markdown"]):
        from_archive = run_cli("report", *flag, str(out))
        from_folder = run_cli("report", *flag, str(SWEEP.relative_to(ROOT)), cwd=ROOT)
        assert from_archive.returncode == 0, from_archive.stderr
        assert from_archive.stdout == from_folder.stdout
    doc = json.loads(run_cli("report", "--json", str(out)).stdout)
    assert doc["schema"] == "dbo-trace-sweep-summary" and [x["name"] for x in doc["loads"]] == ["c16", "c32", "c64"]


def test_a_small_cap_trims_the_runs_windows_first_and_says_so(tmp_path):
    whole = tmp_path / "whole.tar.gz"
    assert run_cli("archive", str(SWEEP), "-o", str(whole)).returncode == 0
    assert [n for n in members(whole) if n.endswith("window.pftrace")]  # uncapped, the windows are there
    # a cap the whole archive is over, and its windows cut to one step are too: the windows go first
    cap = 0.7 * whole.stat().st_size / 1e6
    out = tmp_path / "small.tar.gz"
    proc = run_cli("archive", str(SWEEP), "-o", str(out), "--max-mb", f"{cap:.3f}")
    assert proc.returncode == 0, proc.stderr
    held = members(out)
    assert out.stat().st_size <= cap * 1e6
    assert "dbo-trace/sweep-summary.json" in held and not [n for n in held if n.endswith("window.pftrace")]
    assert "each run's bundle with no Perfetto window" in " ".join(proc.stdout.split())
    assert run_cli("report", str(out)).returncode == 0


def test_hostile_names_and_secrets_in_a_sweep_stay_out_of_member_names_and_text(tmp_path):
    src = tmp_path / "sweep"
    shutil.copytree(SWEEP, src, ignore=shutil.ignore_patterns("traces", "peer"))  # repeats only: quick
    spec = json.loads((src / "sweep.json").read_text())
    spec["arms"][1]["args"] += ["--api-key", "sk-planted-secret"]
    spec["command"] += ["--hf-token", "hf_planted_secret"]
    spec["arms"][0]["name"] = "../../evil\x1b[31m"
    for run in spec["runs"]:
        run["arm"] = spec["arms"][0]["name"] if run["arm"] == "graphs" else run["arm"]
    (src / "sweep.json").write_text(json.dumps(spec))
    out = tmp_path / "s.tar.gz"
    proc = run_cli("archive", str(src), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    held = members(out)
    assert all(n.startswith("dbo-trace/") and ".." not in n and "\x1b" not in n for n in held)
    assert not [n for n, data in held.items() if b"planted" in data]
    shown = run_cli("report", str(out))
    assert shown.returncode == 0 and "\x1b[31m" not in shown.stdout


def test_a_damaged_sweep_summary_is_one_line(archived, tmp_path):
    out, _ = archived
    held = members(out)
    doc = json.loads(held["dbo-trace/sweep-summary.json"])
    doc["loads"][0]["in_flight"] = "many"
    held["dbo-trace/sweep-summary.json"] = json.dumps(doc).encode()
    damaged = tmp_path / "damaged.tar.gz"
    with tarfile.open(damaged, "w:gz", compresslevel=1) as tar:
        for name, data in held.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    proc = run_cli("report", str(damaged))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "sweep-summary.json is damaged" in line and "in_flight" in line
