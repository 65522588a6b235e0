"""Nsight Systems SQLite exports: real public exports against a plain sqlite3 computation, and one
of the project's own traces exported the same way against its Kineto report."""

import sqlite3

import pytest
from conftest import ROOT, report_json, run_cli, sample_trace
from nsys_export import events_from_nsys, kineto_to_nsys
from headline_reference import headline_of_events

from dbo_trace.analysis.classify import CommRules

PUBLIC = ROOT / "tests" / "data" / "public"
COMM = CommRules().regex().pattern
REAL_EXPORTS = ["nsys-saxpy-mpi-cuda-rank0.sqlite", "nsys-cloverleaf-cuda.sqlite"]


def _agrees(doc, ref):
    assert doc["time"]["window_us"] == pytest.approx(ref["window"], rel=1e-9, abs=0.01)
    assert doc["gpu"]["busy_us"] == pytest.approx(ref["busy"], rel=1e-6, abs=0.01)
    assert doc["host"]["idle_fraction"] == pytest.approx(ref["host_idle"] / ref["window"], abs=1e-4)
    assert doc["gpu"]["kernels"] == ref["kernels"]
    assert doc["comm"]["kernels"] == ref["comm_kernels"]
    assert doc["graphs"]["launches"] == ref["graph_launches"]
    if ref["comm"]:
        assert doc["comm"]["hidden_fraction"] == pytest.approx(ref["hidden"] / ref["comm"], abs=1e-4)


@pytest.mark.parametrize("name", REAL_EXPORTS)
def test_a_public_export_agrees_with_a_plain_sqlite3_computation(name):
    path = PUBLIC / name
    doc = report_json(str(path))
    _agrees(doc, headline_of_events(events_from_nsys(path), COMM))
    t = doc["time"]
    parts = t["compute_us"] + t["comm_exposed_us"] + t["copy_us"] + t["host_idle_us"] + t["other_idle_us"]
    assert parts == pytest.approx(t["window_us"], rel=1e-6)


def test_the_public_exports_launch_counts_count_each_call_once():
    """nsys records cudaLaunchKernel around cudaLaunchKernel_v7000 with one correlation id."""
    path = PUBLIC / "nsys-saxpy-mpi-cuda-rank0.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    kernels = db.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    launches = db.execute(
        "select count(distinct r.correlationId) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId "
        "where s.value like 'cudaLaunchKernel%'"
    ).fetchone()[0]
    db.close()
    doc = report_json(str(path))
    assert doc["gpu"]["kernels"] == kernels == 5
    assert doc["host"]["launches"] == launches == 5


@pytest.mark.parametrize(
    "sample, options",
    [("overlap-no-hooks", []), ("vllm-graphs-decode", []), ("overlap", ["--comm-kernels", "spin_kernel"]), ("graph", [])],
)
def test_a_sample_exported_as_nsys_reads_as_itssample_trace(tmp_path, sample, options):
    """The same run seen by nsys: the plugin's dbo: ranges as NVTX give the microbatches and steps."""
    trace = sample_trace(sample)
    out = tmp_path / f"{sample}.sqlite"
    kineto_to_nsys(trace, out)
    from_nsys, from_kineto = report_json(*options, str(out)), report_json(*options, str(trace))
    comm = CommRules(extra_patterns=tuple(options[1:])).regex().pattern
    _agrees(from_nsys, headline_of_events(events_from_nsys(out), comm))
    assert from_nsys["microbatch_source"] == from_kineto["microbatch_source"].replace("record_function", "NVTX")
    under_other = from_kineto["comm"]["hidden_under_other_ubatch_fraction"]
    if under_other is not None:
        assert from_nsys["comm"]["hidden_under_other_ubatch_fraction"] == pytest.approx(under_other, abs=1e-4)
    for block, key in [
        ("gpu", "utilization"),
        ("host", "idle_fraction"),
        ("comm", "hidden_fraction"),
        ("graphs", "replayed_kernel_fraction"),
        ("host", "in_step_idle_fraction"),
    ]:
        a, b = from_nsys[block].get(key), from_kineto[block].get(key)
        assert (a is None) == (b is None), (block, key)
        if a is not None:
            assert a == pytest.approx(b, abs=1e-4), (block, key)
    for block, key in [("gpu", "kernels"), ("comm", "kernels"), ("graphs", "launches"), ("host", "launches")]:
        assert from_nsys[block][key] == from_kineto[block][key], (block, key)
    assert len(from_nsys["steps"]) == len(from_kineto["steps"])
    assert from_nsys["steps_source"] == from_kineto["steps_source"]
    assert from_nsys["verdict"]["label"] == from_kineto["verdict"]["label"]


def test_an_export_of_two_processes_is_two_ranks(tmp_path):
    out = tmp_path / "two.sqlite"
    kineto_to_nsys(sample_trace("overlap-no-hooks"), out, pid=100)
    second = tmp_path / "second.sqlite"
    kineto_to_nsys(sample_trace("overlap-no-hooks"), second, pid=200)
    db = sqlite3.connect(out)
    db.execute("attach ? as b", (str(second),))
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
    ):
        db.execute(f"insert into {table} select * from b.{table}")  # same string ids: same trace
    db.commit()
    db.close()
    doc = report_json(str(out))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    one = report_json(str(second))
    assert doc["ranks"][1]["gpu"]["kernels"] == one["gpu"]["kernels"]


def test_an_sqlite_file_that_is_not_an_nsys_export_is_refused_in_one_line(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("create table t (x)")
    db.commit()
    db.close()
    proc = run_cli("report", str(path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "nsys export --type=sqlite" in proc.stderr and "Traceback" not in proc.stderr


def test_a_corrupt_export_is_refused_in_one_line(tmp_path):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    proc = run_cli("report", str(path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(path) in proc.stderr


def test_an_nsys_report_without_nsys_on_path_says_how_to_export_it(tmp_path, monkeypatch):
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"not read")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    proc = run_cli("report", str(path))
    assert proc.returncode == 2 and "nsys export --type=sqlite" in proc.stderr and proc.stderr.count("\n") == 1


def test_a_folder_of_exports_is_read_like_a_folder_of_traces(tmp_path):
    for pid in (1, 2):
        kineto_to_nsys(sample_trace("overlap-no-hooks"), tmp_path / f"rank{pid}.sqlite", pid=pid)
    doc = report_json(str(tmp_path))
    assert len(doc["ranks"]) == 2
