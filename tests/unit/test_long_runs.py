"""Long runs (issue 38): a run of tens of thousands of steps gives a Markdown report that fits a
comment and a terminal summary that fits a screen, each saying where every step is (--json).

The traces are written by traces.many_steps: per step a ProfilerStep# annotation and two kernels,
each launched by a cudaLaunchKernel, on each rank; what the tests expect is counted from that."""

from __future__ import annotations

import json
import re

from conftest import run_cli
from traces import many_steps

MD_ROWS = 200  # docs/outputs.md: the Markdown's per-step table shows at most 200 rows


def step_rows(markdown: str) -> list[tuple[int, int]]:
    """(rank, step number) of each row of the per-step table."""
    body = markdown.split("<summary>Per step</summary>", 1)[1].split("</details>", 1)[0]
    return [(int(m[1]), int(m[2])) for m in re.finditer(r"^\| (\d+) \| (\d+) \| `ProfilerStep#", body, re.M)]


def test_a_short_run_lists_every_step(tmp_path):
    path = many_steps(tmp_path / "run", 150)
    out = run_cli("report", str(path), "--markdown").stdout
    assert step_rows(out) == [(0, i) for i in range(1, 151)]
    assert "lists every step" not in out


def test_a_long_runs_markdown_shows_each_ranks_first_steps_and_says_where_the_rest_are(tmp_path):
    path = many_steps(tmp_path / "run", 250, ranks=2)
    out = run_cli("report", str(path), "--markdown").stdout
    share = MD_ROWS // 2
    assert step_rows(out) == [(r, i) for r in (0, 1) for i in range(1, share + 1)]
    assert f"*Each rank's first {share} steps of 500 (rank 0: 250; rank 1: 250);" in out
    assert "`--json` lists every step" in out
    doc = json.loads(run_cli("report", str(path), "--json").stdout)
    assert len(doc["steps"]) == 500 and [len(r["steps"]) for r in doc["ranks"]] == [250, 250]


def test_the_terminal_points_at_the_json_for_the_rest(tmp_path):
    path = many_steps(tmp_path / "run", 250)
    out = " ".join(run_cli("report", str(path)).stdout.split())  # the line as one, whatever the width
    assert "... 230 more steps (--json lists all; --timeline FILE --step N draws one: N a number, a label, median or slowest)" in out
    drawn = run_cli("report", str(path), "--timeline", str(tmp_path / "step.png"), "--step", "slowest")
    assert drawn.returncode == 0 and (tmp_path / "step.png").stat().st_size > 0  # the hint is a command that runs


def test_the_terminal_and_the_markdown_build_only_the_steps_they_show(tmp_path, monkeypatch):
    """A long run's steps are built as the renderers read them: the terminal shows 20 of 1,000 steps
    and builds 20 step blocks, the Markdown 200; their reports (verdict, host causes) are built a
    chunk at a time (analysis/model.py StepReports). --json builds every one."""
    from dbo_trace.analysis import model, report
    from dbo_trace.analysis.verdict import evidence
    from dbo_trace.render.document import steps as document

    blocks, verdicts = [], []
    step_block, decide = document.step_block, report.decide
    monkeypatch.setattr(document, "step_block", lambda *a: blocks.append(a) or step_block(*a))
    for module in (evidence, report):  # where a verdict is decided: a step's; a phase's, a rank's and the run's
        monkeypatch.setattr(module, "decide", lambda *a, **k: verdicts.append(a) or decide(*a, **k))
    path = many_steps(tmp_path / "run", 1_000)
    for args, shown in (((), 20), (("--markdown",), MD_ROWS), (("--json",), 1_000)):
        blocks.clear()
        verdicts.clear()
        assert run_cli("report", str(path), *args).returncode == 0
        assert len(blocks) == shown, args
        # each step's verdict where its report is built (a chunk for the shown steps), the rank's and the run's
        chunks = -(-shown // model.STEPS_BUILT_AT_ONCE)
        assert len(verdicts) <= chunks * model.STEPS_BUILT_AT_ONCE + 2, args


# 10x the steps: 1.6x the calls measured (the steps as columns, built as shown), linear 10x at most
GROWTH_LIMIT = 8.0


def test_ten_times_the_steps_make_at_most_eight_times_the_calls(tmp_path):
    """The growth guard of issue 38 (the speed target, 100,000 steps in at most 5x the time of 100
    end to end, is benchmarks/bench_steps.py's): the terminal and the Markdown report of 500 and
    5,000 steps, the calls dbo-trace's code makes counted (tests/helpers/work.py; numpy's and the standard
    library's included): exact, so a loaded machine cannot move it, where CPU time swells."""
    from work import PACKAGE, calls_made

    small, large = many_steps(tmp_path / "small", 500), many_steps(tmp_path / "large", 5_000)
    for args in ((), ("--markdown",)):
        a, b = (calls_made(lambda p=p: run_cli("report", str(p), *args), PACKAGE) for p in (small, large))
        assert b / a <= GROWTH_LIMIT, f"report {' '.join(args)}: 10x the steps made {b / a:.1f}x the calls"


def test_a_control_character_deep_in_a_long_list_is_still_made_inert(tmp_path):
    """terminal_document checks a long list (a long run's steps) a slice at a time: a string to
    escape in the last slice is found as in the first."""
    import msgspec

    from dbo_trace.render.document import ReportDocument
    from dbo_trace.render.safe import terminal_document

    doc = msgspec.json.decode(run_cli("report", "--json", str(many_steps(tmp_path / "run", 3))).stdout, type=ReportDocument)
    steps = [msgspec.structs.replace(doc.steps[0], number=i + 1) for i in range(2_500)]
    steps[2_400] = msgspec.structs.replace(steps[2_400], label="step\x1b]52;c;aGk=\x07")
    shown = terminal_document(msgspec.structs.replace(doc, steps=steps))
    assert shown.steps[2_400].label == "step\\x1b]52;c;aGk=\\x07"
    assert shown.steps[0].label == doc.steps[0].label
