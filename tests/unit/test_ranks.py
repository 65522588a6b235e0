"""Several ranks: one timeline each, ordered by distributedInfo.rank, totals that add up."""

from conftest import report_json, run_cli, sample_trace
from traces import complete_events, read_trace, rewrite_trace, write_trace


def _first_ts(doc):
    return min(e["ts"] for e in complete_events(doc))


def _with_rank(src, dst, rank, align_with=None):
    """src as rank `rank` of a two-rank job; align_with: a trace whose profiled window it is moved onto."""
    doc = read_trace(src)
    doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    if align_with is not None:
        other = read_trace(align_with)
        doc["baseTimeNanoseconds"] = int(other["baseTimeNanoseconds"] + (_first_ts(other) - _first_ts(doc)) * 1000)
    write_trace(doc, dst)


def test_two_separate_runs_are_refused_with_a_pointer_to_compare(tmp_path):
    """Two recordings made minutes apart are not ranks of one job: merging them invented a 'skew'."""
    _with_rank(sample_trace("serial"), tmp_path / "a.pt.trace.json.gz", 1)
    _with_rank(sample_trace("overlap-no-hooks"), tmp_path / "b.pt.trace.json.gz", 0)
    proc = run_cli("report", str(tmp_path))
    assert proc.returncode == 2
    assert "not ranks of one run" in proc.stderr and "dbo-trace compare" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_two_ranks(tmp_path):
    # File names sort opposite to ranks: the rank field must win.
    _with_rank(sample_trace("serial"), tmp_path / "a.pt.trace.json.gz", 1, align_with=sample_trace("overlap-no-hooks"))
    _with_rank(sample_trace("overlap-no-hooks"), tmp_path / "b.pt.trace.json.gz", 0)
    doc = report_json(str(tmp_path), "--comm-kernels", "spin_kernel")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][0]["source"].endswith("b.pt.trace.json.gz")
    assert doc["ranks"][0]["verdict"]["label"] == "overlapped"
    assert doc["ranks"][1]["verdict"]["label"] == "not-overlapped"
    total = sum(r["comm"]["busy_us"] for r in doc["ranks"])
    assert abs(doc["comm"]["busy_us"] - total) < 0.01
    hidden = sum(r["comm"]["hidden_us"] for r in doc["ranks"])
    assert abs(doc["comm"]["hidden_fraction"] - hidden / total) < 1e-3
    assert len(doc["steps"]) == len(doc["ranks"][0]["steps"]) + len(doc["ranks"][1]["steps"])


def _shifted(src, dst, rank, shift_ns):
    """The same trace as another rank whose clock base is shift_ns later: its steps start shift_ns later."""

    def as_rank(doc):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
        doc["baseTimeNanoseconds"] = doc["baseTimeNanoseconds"] + shift_ns

    rewrite_trace(src, dst, as_rank)


def test_cross_rank_view_finds_the_late_rank_and_its_skew(tmp_path):
    shift_ns = 1_250_000  # rank 1 runs 1.25 ms behind rank 0
    _shifted(sample_trace("overlap-no-hooks"), tmp_path / "r0.pt.trace.json.gz", 0, 0)
    _shifted(sample_trace("overlap-no-hooks"), tmp_path / "r1.pt.trace.json.gz", 1, shift_ns)
    doc = report_json(str(tmp_path), "--comm-kernels", "spin_kernel")
    cross = doc["cross_rank"]
    assert cross["ranks"] == [0, 1]
    assert len(cross["steps"]) == len(doc["ranks"][0]["steps"]) == 5
    for step in cross["steps"]:
        assert abs(step["skew_us"] - shift_ns / 1000) < 0.01 and step["last_rank"] == 1
        assert abs(step["starts_us"]["1"] - step["starts_us"]["0"] - shift_ns / 1000) < 0.01
    assert cross["last_counts"] == {"1": 5}
    assert cross["summary"].startswith("rank 1 started last by more than")
    assert "in 5 of 5 steps (skew median 1.25 ms" in cross["summary"]


def test_one_rank_has_no_cross_rank_view():
    assert report_json(str(sample_trace("overlap")))["cross_rank"] is None


def test_clashing_claims_are_numbered_once_by_name_and_the_timelines_keep_their_claim(tmp_path):
    """Both traces claim rank 1: the ranks are numbered by file name (a: 0, b: 1), in one process and
    with a worker per trace alike, and the number lives on the report only (the timelines still say
    what their traces claimed)."""
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths

    _with_rank(sample_trace("serial"), tmp_path / "b.pt.trace.json.gz", 1, align_with=sample_trace("overlap-no-hooks"))
    _with_rank(sample_trace("overlap-no-hooks"), tmp_path / "a.pt.trace.json.gz", 1)
    by_name = sorted(p.name for p in tmp_path.iterdir())
    for workers in (1, 2):
        report = analyze_paths([tmp_path], Options(comm_patterns=("spin_kernel",)), workers=workers)
        assert [(r.rank, r.source.rsplit("/", 1)[-1]) for r in report.ranks] == list(enumerate(by_name))
        assert [r.detailed().timeline.claimed_rank for r in report.ranks] == [1, 1]
        assert report.cross_rank is not None and report.cross_rank.ranks == [0, 1]
