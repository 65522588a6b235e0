"""Nsight Systems exports that are broken or hostile: one line naming the file and exit 2, never a
crash; time linear in the rows (docs/outputs.md, "Untrusted input")."""

import shutil
import sqlite3

import pytest
from conftest import ROOT, run_cli

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
