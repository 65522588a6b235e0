"""Nsight Systems exports that are broken or hostile: one line naming the file and exit 2, never a
crash; time linear in the rows (docs/outputs.md, "Untrusted input")."""

import resource
import shutil
import subprocess
import sqlite3
import sys
import time

import pytest
from conftest import ROOT, run_cli

from dbo_trace.trace import nsys as nsys_reader

EXPORT = ROOT / "tests" / "data" / "public" / "nsys-saxpy-mpi-cuda-rank0.sqlite"


def _broken(tmp_path, *sql):
    path = tmp_path / "broken.sqlite"
    shutil.copy(EXPORT, path)
    db = sqlite3.connect(path)
    for statement in sql:
        db.execute(statement)
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(
    "sql",
    [
        "update CUPTI_ACTIVITY_KIND_KERNEL set end = 'abc'",  # text where nsys writes an integer
        "update CUPTI_ACTIVITY_KIND_KERNEL set streamId = 's'",
        "update CUPTI_ACTIVITY_KIND_KERNEL set end = 1e30",  # beyond 2^63: SQLite stores a REAL
        "update CUPTI_ACTIVITY_KIND_RUNTIME set globalTid = 'x'",
        "update NVTX_EVENTS set start = 1, end = 'x'",
        "update NVTX_EVENTS set globalTid = x'00'",
        "update NVTX_EVENTS set end = 1e300",
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_and_exit_2(tmp_path, sql):
    path = _broken(tmp_path, sql)
    proc = run_cli("report", str(path))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(path) in line and "not a 64-bit integer" in line and "nsys export" in line


@pytest.mark.parametrize("value", ["x'00ff1b5b32'", "12345"])
def test_a_name_that_is_a_blob_or_a_number_is_read_as_text(tmp_path, value):
    path = _broken(tmp_path, f"update StringIds set value = {value}")
    proc = run_cli("report", "--json", str(path))
    assert proc.returncode == 0, proc.stderr


def _fake_nsys(tmp_path, monkeypatch, script):
    """A .nsys-rep and an `nsys` on PATH that runs script (sh) instead of exporting it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text("#!/bin/sh\n" + script + "\n")
    nsys.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read")
    return report


def _one_line_exit_2(proc, report):
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(report) in line
    return line


def test_an_nsys_that_leaves_a_child_holding_its_output_does_not_hold_the_report(tmp_path, monkeypatch):
    # The child keeps stdout and stderr open for 60 s after nsys exits; reading nsys's output
    # through pipes waited for it.
    report = _fake_nsys(tmp_path, monkeypatch, "sleep 60 &\necho 'export failed: no such report' >&2\nexit 1")
    started = time.monotonic()
    proc = run_cli("report", str(report))
    assert time.monotonic() - started < 30
    assert "no such report" in _one_line_exit_2(proc, report)


def test_an_nsys_that_hangs_is_stopped_at_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_reader, "EXPORT_TIMEOUT_S", 1.0)
    report = _fake_nsys(tmp_path, monkeypatch, "sleep 60 & sleep 60")
    started = time.monotonic()
    proc = run_cli("report", str(report))
    assert time.monotonic() - started < 30
    assert "ran past 1 s" in _one_line_exit_2(proc, report)


def test_an_nsys_that_prints_without_end_is_read_in_bounded_memory(tmp_path, monkeypatch):
    # 300 MB of output on stdout and a last line on stderr: only the end of it is kept.
    report = _fake_nsys(
        tmp_path, monkeypatch, "head -c 300000000 /dev/zero | tr '\\0' x\necho >&2\necho 'the last line' >&2\nexit 3"
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    proc = run_cli("report", str(report))
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert "the last line" in _one_line_exit_2(proc, report)
    assert grown_kb < 100_000, f"{grown_kb} kB"


def test_an_nsys_that_writes_garbage_for_the_export_names_the_report(tmp_path, monkeypatch):
    # The export written is not SQLite: the line names the report the user gave, not a temporary file.
    report = _fake_nsys(tmp_path, monkeypatch, 'while [ "$1" != -o ]; do shift; done\nhead -c 1000000 /dev/urandom > "$2"')
    line = _one_line_exit_2(run_cli("report", str(report)), report)
    assert "dbo-trace-nsys-" not in line


def test_an_enormous_name_is_read_only_so_far(tmp_path):
    # One kernel named with 20 MB: the report stays small, the name's start kept.
    path = _broken(
        tmp_path,
        "update StringIds set value = 'nvjet' || printf('%.*c', 20000000, 'x') "
        "where id = (select demangledName from CUPTI_ACTIVITY_KIND_KERNEL limit 1)",
    )
    proc = run_cli("report", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) < 2_000_000
    assert "nvjet" + "x" * 100 in proc.stdout


def test_an_extra_table_named_with_quotes_is_ignored(tmp_path):
    # A table whose name holds a quote and SQL was spliced into a pragma: the export was refused.
    path = _broken(tmp_path, 'create table "a""b; drop table StringIds; --" (x)')
    proc = run_cli("report", "--json", str(path))
    assert proc.returncode == 0, proc.stderr


def test_a_view_in_a_tables_place_is_not_read(tmp_path):
    """A view (or a virtual table) is a query: one that never ends read for ever, growing memory (a
    fuzzing pass found it). An export's tables are tables; a view named as one is left unread, so
    what is read is bounded by the file's size."""
    path = _broken(
        tmp_path,
        "drop table CUPTI_ACTIVITY_KIND_KERNEL",
        "create view CUPTI_ACTIVITY_KIND_KERNEL as with recursive c(i) as (select 1 union all select i + 1 from c) "
        "select i as start, i + 1 as end, 1 as streamId, i as correlationId, 0 as globalPid, 1 as demangledName, "
        "0 as deviceId, 0 as contextId, 1 as gridX, 1 as gridY, 1 as gridZ, 1 as blockX, 1 as blockY, 1 as blockZ from c",
    )
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dbo_trace.cli", "report", str(path)], capture_output=True, text=True, timeout=120)
    assert time.monotonic() - began < 60, "the view was read"
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
