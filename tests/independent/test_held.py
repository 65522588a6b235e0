"""Held-back communication on real H200 recordings, against tests/references/headline_reference.py's plain loops (which
take the microbatch from the launching thread, not from the event log dbo-trace reads)."""

import pytest
from conftest import SAMPLES
from headline_reference import held_back as plain_held_back

from dbo_trace.analysis.classify import CommRules
from dbo_trace.analysis.model import Options
from dbo_trace.demo.run import EXPECTED, judge
from dbo_trace.app.pipeline import analyze_paths

CASES = ["late", "smhungry", "overlap", "serial", "two-gpu-overlap", "two-gpu-serial", "hostbound"]


@pytest.mark.parametrize("sample", CASES)
def test_held_back_comm_matches_a_plain_computation(sample):
    report = analyze_paths([SAMPLES / sample], Options())
    regex = r"spin_kernel" if not sample.startswith("two-gpu") else CommRules().regex().pattern
    for rank in report.ranks:
        want, examined = plain_held_back(rank.source, regex)
        got = rank.held_back
        assert got.comm_kernels == examined
        assert {cause: n for cause, (n, _) in got.by_cause.items()} == {cause: n for cause, (n, _) in want.items()}
        for cause, (_, delay) in want.items():
            assert got.by_cause[cause][1] == pytest.approx(delay, rel=1e-6)


def test_the_cause_modes_are_judged_right():
    for mode in ("late", "smhungry"):
        got, ok = judge(mode, analyze_paths([SAMPLES / mode], Options()))
        assert ok, (mode, got, EXPECTED[mode])


def test_a_late_record_names_its_call_and_thread():
    late = analyze_paths([SAMPLES / "late"], Options()).ranks[0].held_back.late_record
    assert late.record_call == "cudaEventRecordWithFlags"  # torch.cuda.Event.record, the demo's late one
    assert late.after_holder_launch_us > 0 and late.delay_us > 500


def test_no_comm_is_held_back_where_it_waits_for_its_own_compute():
    for sample in ("serial", "two-gpu-serial"):
        assert all(r.held_back.kernels == 0 for r in analyze_paths([SAMPLES / sample], Options()).ranks)
