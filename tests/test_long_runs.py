"""Long runs (issue 38): a run of tens of thousands of steps gives a Markdown report that fits a
comment and a terminal summary that fits a screen, each saying where every step is (--json).

The traces are written here: per step a ProfilerStep# annotation and two kernels, each launched by
a cudaLaunchKernel, on each rank; what the tests expect is counted from what was written."""

from __future__ import annotations

import json
import re

from conftest import run_cli
from traces import write_trace

MD_ROWS = 200  # docs/outputs.md: the Markdown's per-step table shows at most 200 rows


def many_steps(folder, steps: int, ranks: int = 1):
    folder.mkdir()
    for rank in range(ranks):
        events = []
        for i in range(steps):
            t = 1000.0 + i * 100.0
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": 80.0})
            for u in range(2):
                corr, launch = 2 * i + u + 1, t + 5 + 30 * u
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": launch, "dur": 4.0, "args": {"correlation": corr}})  # fmt: skip
                events.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": launch + 6,
                               "dur": 20.0, "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
        doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": ranks}, "traceEvents": events}
        write_trace(doc, folder / f"rank{rank}.pt.trace.json.gz")
    return folder


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
    out = run_cli("report", str(path)).stdout
    assert "  ... 230 more steps (--json lists all; --step takes a number, a label, median or slowest)" in out
