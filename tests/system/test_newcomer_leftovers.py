"""Issue 61's leftovers, each met by a newcomer on the shipped samples: a what-if the model makes no
estimate for says why (terminal, Markdown, JSON); report's warnings on stderr fit the terminal; `top
--once` fits 80 columns; the next step suggests no --what-if dbo= the user already gave."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, run_cli

OFF_ARMS = ("afd-graphs", "afd-sweep/graphs/c16")  # AFD arms recorded with DBO off


@pytest.fixture
def narrow(monkeypatch):
    """A piped output of 80 columns, as the newcomer ran it."""
    monkeypatch.setenv("COLUMNS", "80")


def _wide(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize("arm", OFF_ARMS)
def test_round_trip_what_if_of_a_dbo_off_arm_says_why_there_is_no_estimate(arm):
    text = run_cli("report", str(SAMPLES / arm), "--what-if", "round-trip=200us")
    assert text.returncode == 0, text.stderr
    flat = " ".join(line.strip() for line in text.stdout.splitlines())
    assert "- what-if, round trip 200 us: no estimate: one microbatch per step (DBO off)" in flat
    assert "applies to a DBO arm; --what-if dbo=on predicts DBO's effect from this arm" in flat

    markdown = run_cli("report", str(SAMPLES / arm), "--what-if", "round-trip=200us", "--what-if", "sms=20", "--markdown")
    lines = [line for line in markdown.stdout.splitlines() if line.startswith("- what-if, ")]
    assert [line.split(":")[0] for line in lines] == ["- what-if, round trip 200 us", "- what-if, 20 SMs reserved for comm"]
    assert all("no estimate: one microbatch per step" in line for line in lines)

    document = json.loads(run_cli("report", str(SAMPLES / arm), "--what-if", "round-trip=200us", "--json").stdout)
    (row,) = document["what_if"]
    assert row["what"] == "round trip 200 us" and row["predicted_us"] is None and row["change"] is None
    assert row["step_us"] > 0 and row["assumptions"].startswith("no estimate: one microbatch per step")


def test_what_ifs_asked_and_estimated_are_unchanged_and_an_sms_beyond_the_gpu_says_so():
    document = json.loads(
        run_cli("report", str(SAMPLES / "overlap"), "--what-if", "round-trip=200us", "--what-if", "sms=200", "--json").stdout
    )
    rows = {row["what"]: row for row in document["what_if"]}
    assert rows["round trip 200 us"]["predicted_us"] is not None
    assert rows["200 SMs reserved for comm"]["predicted_us"] is None
    assert rows["200 SMs reserved for comm"]["assumptions"] == "no estimate: 200 SMs are not fewer than the GPU's 132"
    # nothing asked: nothing said (the goldens hold every sample's what_if without --what-if)
    assert json.loads(run_cli("report", str(SAMPLES / "afd-graphs"), "--json").stdout)["what_if"] == []


def test_report_warnings_on_stderr_fit_the_terminal(narrow):
    result = run_cli("report", str(SAMPLES / "afd-pair-graphs-dbo"))
    assert result.returncode == 0
    assert "dbo-trace: warning: both roles (attention, ffn) ran on one GPU under MPS" in result.stderr
    assert _wide(result.stderr) == []
    assert all(line.startswith(("dbo-trace: warning: ", "  ")) for line in result.stderr.splitlines())


def _next_step(stdout: str) -> str:
    """The terminal's next-step paragraph, its lines joined."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next step: "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ") or lines[i].startswith("  - "))
    return " ".join(line.strip() for line in lines[start:end])


@pytest.mark.parametrize(
    ("arm", "given", "settles"),
    [
        ("afd-sweep/graphs/c16", "dbo=on", "recording the same load with DBO on (dbo-trace compare OFF ON, or dbo-trace sweep)"),
        ("afd-sweep/graphs/c16", "dbo=off", "recording the same load with DBO on (dbo-trace compare OFF ON, or dbo-trace sweep)"),
        ("afd-sweep/graphs-dbo/c16", "dbo=off", "record the same load with DBO off (dbo-trace compare OFF ON, or dbo-trace sweep)"),
    ],
)
def test_next_step_suggests_no_what_if_dbo_already_given(arm, given, settles):
    asked = run_cli("report", str(SAMPLES / arm), "--what-if", given)
    assert asked.returncode == 0, asked.stderr
    step = _next_step(asked.stdout)
    assert settles in step and "--what-if dbo=" not in step
    document = json.loads(run_cli("report", str(SAMPLES / arm), "--what-if", given, "--json").stdout)
    texts = [document["verdict"]["next_step"]["text"]] + [r["verdict"]["next_step"]["text"] for r in document["ranks"]]
    assert all("--what-if dbo=" not in t for t in texts)
    # not given: the next step still points to the prediction
    assert "--what-if dbo=" in _next_step(run_cli("report", str(SAMPLES / arm)).stdout)


def test_no_estimate_line_suggests_no_what_if_dbo_already_given():
    text = run_cli("report", str(SAMPLES / "afd-graphs"), "--what-if", "dbo=on", "--what-if", "round-trip=200us", "--markdown")
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("- what-if, round trip")]
    assert line.endswith("so it applies to a DBO arm") and "--what-if dbo=" not in line
