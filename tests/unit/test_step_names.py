"""Steps you can name: numbered rows, --step by number, label, median or slowest, and the archive's
Perfetto window by number. The expected step is found here from the JSON's own step rows."""

import re

import pytest
from conftest import SAMPLES, report_json, run_cli


@pytest.fixture(scope="module")
def overlap():
    return report_json(str(SAMPLES / "overlap"))


def drawn(tmp_path, sample, *args):
    out = tmp_path / "step.svg"
    proc = run_cli("report", str(SAMPLES / sample), "--timeline", str(out), "--force", *args)
    return proc


def drawn_number(proc) -> int:
    m = re.search(r"rank \d+, step #(\d+) \(", proc.stderr)
    assert m, proc.stderr
    return int(m.group(1))


def test_steps_are_numbered_per_rank_from_one():
    doc = report_json(str(SAMPLES / "two-gpu-overlap"))
    for rank in doc["ranks"]:
        assert [s["number"] for s in rank["steps"]] == list(range(1, len(rank["steps"]) + 1))
    text = run_cli("report", str(SAMPLES / "two-gpu-overlap")).stdout
    rows = [line.split() for line in text.splitlines() if re.match(r"^\s+[01]\s+\d+\s+step \d+", line)]
    assert [(r[0], r[1]) for r in rows] == [(str(k), str(n)) for k in (0, 1) for n in range(1, 6)]


@pytest.mark.parametrize("how", ["3", "#3"])
def test_step_by_number(tmp_path, overlap, how):
    proc = drawn(tmp_path, "overlap", "--step", how)
    assert proc.returncode == 0, proc.stderr
    assert drawn_number(proc) == 3
    assert f"step #3 ({overlap['steps'][2]['label']})" in proc.stderr


def test_step_by_label(tmp_path, overlap):
    label = overlap["steps"][3]["label"]  # an event-log step: "step 18"
    proc = drawn(tmp_path, "overlap", "--step", label)
    assert proc.returncode == 0, proc.stderr
    assert drawn_number(proc) == 4


def test_slowest_and_median(tmp_path, overlap):
    walls = [s["step_us"] for s in overlap["steps"]]
    slowest = max(range(len(walls)), key=lambda i: walls[i]) + 1
    median = sorted(range(len(walls)), key=lambda i: walls[i])[(len(walls) - 1) // 2] + 1
    assert drawn_number(drawn(tmp_path, "overlap", "--step", "slowest")) == slowest
    assert drawn_number(drawn(tmp_path, "overlap", "--step", "median")) == median
    assert drawn_number(drawn(tmp_path, "overlap")) == median  # the default


def test_a_repeated_label_asks_for_a_number(tmp_path):
    doc = report_json(str(SAMPLES / "vllm-graphs-decode"))
    label = "execute_context_0(0)_generation_16(16)"
    same = [s["number"] for s in doc["steps"] if s["label"] == label]
    assert len(same) > 1  # vLLM's decode steps share one label
    proc = drawn(tmp_path, "vllm-graphs-decode", "--step", label)
    assert proc.returncode != 0
    assert f"{len(same)} steps of rank 0 have this label (#{same[0]}," in proc.stderr
    assert "give a number" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("bad", ["0", "6", "#9", "fastest", "step 99"])
def test_a_step_that_is_not_there_is_one_line(tmp_path, bad):
    proc = drawn(tmp_path, "overlap", "--step", bad)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and bad in proc.stderr


def test_archive_names_its_perfetto_window_by_number(tmp_path):
    doc = report_json(str(SAMPLES / "vllm-graphs-decode"))
    out = tmp_path / "a.tar.gz"
    proc = run_cli("archive", str(SAMPLES / "vllm-graphs-decode"), "-o", str(out), "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"Perfetto window: rank 0: steps #(\d+) to #(\d+) of (\d+)", proc.stdout + proc.stderr)
    assert m, proc.stdout + proc.stderr
    first, last, n = map(int, m.groups())
    assert last - first == 2 and n == len(doc["steps"])
    walls = [s.get("window_us") or s["step_us"] for s in doc["steps"]]  # the picture's median: by window
    median = sorted(range(n), key=lambda i: walls[i])[(n - 1) // 2] + 1
    assert first <= median <= last
    one = run_cli("archive", str(SAMPLES / "overlap"), "-o", str(tmp_path / "b.tar.gz"), "--steps", "1")
    line = re.search(r"Perfetto window: (.*)", one.stdout + one.stderr).group(1)
    assert " to " not in line  # one step is named once, not "from X to X"
