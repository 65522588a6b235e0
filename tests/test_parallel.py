"""Ranks read and analysed in worker processes give the same report as one process (docs/performance.md)."""

import shutil

import pytest
from conftest import SAMPLES, run_cli

PUBLIC = SAMPLES.parent / "tests" / "data" / "public"


@pytest.mark.parametrize("inputs", [SAMPLES / "two-gpu-overlap", PUBLIC / "hta-sampled-job"])
def test_workers_give_the_same_document(inputs, tmp_path):
    docs = []
    for workers in ("1", "2"):
        out = tmp_path / f"report-{workers}.json"
        proc = run_cli("report", "--json", "--workers", workers, "-o", str(out), str(inputs))
        assert proc.returncode == 0, proc.stderr
        docs.append(out.read_bytes())
    assert docs[0] == docs[1]


def test_a_broken_rank_is_a_warning_with_workers_too(tmp_path):
    ranks = tmp_path / "ranks"
    shutil.copytree(PUBLIC / "hta-sampled-job", ranks)
    (ranks / "rank9.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    outputs = []
    for workers in ("1", "2"):
        proc = run_cli("report", "--json", "--workers", workers, str(ranks))
        assert proc.returncode == 0, proc.stderr
        assert "warning: skipped:" in proc.stderr and "rank9.pt.trace.json" in proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]


def test_small_inputs_stay_in_one_process_unless_asked(monkeypatch):
    from dbo_trace.pipeline import PARALLEL_MIN_FILE_BYTES, WORKERS_ENV, workers_for

    monkeypatch.delenv(WORKERS_ENV, raising=False)
    assert workers_for(8, None, PARALLEL_MIN_FILE_BYTES - 1) == 1  # spawning would cost more than reading
    assert workers_for(8, 3, 1000) == 3  # --workers is honoured
    assert workers_for(2, 4, 1000) == 2  # no more workers than ranks
    assert workers_for(1, 4, 1000) == 4  # one trace: its decoding uses them all
    monkeypatch.setenv(WORKERS_ENV, "2")
    assert workers_for(8, None, 1000) == 2
