"""A sweep's runs that warn alike are one line naming them all (a newcomer's trial: six runs of one
GPU pair printed six MPS lines, each 200 characters, before the summary's first line)."""

from conftest import SAMPLES, run_cli, unwrapped

from dbo_trace.commands.common import folded


def test_the_shipped_sweeps_mps_warning_is_one_line_for_its_six_runs():
    proc = run_cli("report", str(SAMPLES / "afd-sweep"))
    assert proc.returncode == 0, proc.stderr
    mps = [line for line in unwrapped(proc.stderr) if "MPS" in line]  # a warning wraps: its lines joined
    assert len(mps) == 1, proc.stderr
    for arm in ("graphs", "graphs-dbo"):
        for load in ("c16", "c32", "c64"):
            assert f"{arm} at {load}" in mps[0]


def test_folding_keeps_distinct_warnings_and_their_order():
    p = "dbo-trace: warning: "
    lines = [f"{p}a at 1: same", f"{p}b at 1: other", f"{p}b at 2: same", f"{p}no run here", "not a warning"]
    assert folded(lines) == [f"{p}a at 1, b at 2: same", f"{p}b at 1: other", f"{p}no run here", "not a warning"]


def test_compares_warnings_are_one_per_cause_naming_their_arms_within_80_columns(monkeypatch):
    """issue 61 item 15a: compare of the four AFD arms printed eight warning lines up to 219 characters,
    the same warning once per arm. Now each cause is one warning naming its arms, and no line of the
    output, stdout or stderr, is wider than the terminal."""
    monkeypatch.setenv("COLUMNS", "80")
    arms = ["afd-eager", "afd-eager-dbo", "afd-graphs", "afd-graphs-dbo"]
    proc = run_cli("compare", *(str(SAMPLES / a) for a in arms))
    assert proc.returncode == 0, proc.stderr
    wide = [line for line in (proc.stdout + proc.stderr).splitlines() if len(line) > 80]
    assert not wide, wide
    warnings = unwrapped(proc.stderr)
    causes = [w.split(": ", 2)[-1] for w in warnings]
    assert len(causes) == len(set(causes)), warnings  # no cause said twice, for different arms
    (ffn,) = [w for w in warnings if "ffn role has no trace" in w]
    assert ffn.startswith("dbo-trace: warning: afd-eager-dbo, afd-graphs, afd-graphs-dbo: the manifest's ffn role")
    assert len(warnings) < 8
