"""A sweep's runs that warn alike are one line naming them all (a newcomer's trial: six runs of one
GPU pair printed six MPS lines, each 200 characters, before the summary's first line)."""

from conftest import SAMPLES, run_cli

from dbo_trace.commands.common import folded


def test_the_shipped_sweeps_mps_warning_is_one_line_for_its_six_runs():
    proc = run_cli("report", str(SAMPLES / "afd-sweep"))
    assert proc.returncode == 0, proc.stderr
    mps = [line for line in proc.stderr.splitlines() if "MPS" in line]
    assert len(mps) == 1, proc.stderr
    for arm in ("graphs", "graphs-dbo"):
        for load in ("c16", "c32", "c64"):
            assert f"{arm} at {load}" in mps[0]


def test_folding_keeps_distinct_warnings_and_their_order():
    p = "dbo-trace: warning: "
    lines = [f"{p}a at 1: same", f"{p}b at 1: other", f"{p}b at 2: same", f"{p}no run here", "not a warning"]
    assert folded(lines) == [f"{p}a at 1, b at 2: same", f"{p}b at 1: other", f"{p}no run here", "not a warning"]
