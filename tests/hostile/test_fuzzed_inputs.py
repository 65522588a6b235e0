"""What a fuzzing pass over the inputs found (a helper who had not read the code damaged copies of
the shipped samples): each of these ended in an internal error (exit 3), a hang, or a refusal that
named no input. Each now gives a report, or one line naming the input, never a traceback.

Damage in the family of a value parsed further (JSON inside a manifest's string, a number in a
setting's text, a counters key, an event log's detail), a path that cannot be followed (a symlink
loop), a manifest's regular expression whose search backtracks without bound, and a zero where a
division expects a time."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from conftest import SAMPLES, run_cli, run_cli_process

from dbo_trace.app.pipeline import MOST_CHOICES, slow_pattern
from dbo_trace.redact import DEEPEST, REDACTED


def _copy(name: str, tmp_path: Path, without: tuple[str, ...] = ()) -> Path:
    out = tmp_path / name
    shutil.copytree(SAMPLES / name, out, ignore=shutil.ignore_patterns(*without) if without else None)
    return out


def _edit_manifest(folder: Path, edit) -> None:
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))


def _one_line(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# ---- a manifest's regular expression ------------------------------------------------------------


def test_a_manifest_pattern_that_backtracks_without_bound_is_refused_at_once(tmp_path):
    """(.*.*)*Q ran for hours against a kernel name; a manifest's patterns are input, so only those
    whose search stays linear in the name are taken (docs/bundle-format.md, comm_kernels)."""
    folder = _copy("overlap", tmp_path)
    for pattern, why in (("(.*.*)*Q", "a group"), ("x.*y", "an unbounded repeat"), ("a{2,}", "an unbounded repeat"),
                         ("a?" * 5, f"more than {MOST_CHOICES} ways")):  # fmt: skip
        _edit_manifest(folder, lambda m: m.update(comm_kernels=["spin_kernel", pattern]))
        began = time.monotonic()
        line = _one_line(run_cli("report", str(folder)), str(folder / "manifest.json"), why, "--comm-kernels")
        assert time.monotonic() - began < 30 and len(line) < 400, line
    # literal text, classes, escapes, anchors, '|' and a few '?' or {m,n}: taken (the overlap sample's own is a literal)
    _edit_manifest(folder, lambda m: m.update(comm_kernels=["^spin_kernel$|nccl_?[a-z]{2,3}\\.x|[(]y"]))
    assert run_cli("report", str(folder)).returncode == 0


@pytest.mark.parametrize(
    "pattern, slow",
    [
        ("spin_kernel", None), ("a|b|c", None), ("[]a]*", "an unbounded repeat"), ("[^]*]", None), ("\\(x\\)", None),
        ("\\1", "a back-reference"), ("a{}", None), ("a{,}", "an unbounded repeat"), ("a{3}", None),
        ("a{1,16}", None), ("a{1,17}", "more than 16 ways to match"), ("a{1,9999999}", "a repeat of over a million"),
        ("a??b?", None), ("x{2,3}?y", None), ("a+", "an unbounded repeat"), ("(?:a)", "a group"),
    ],
)  # fmt: skip
def test_which_patterns_search_in_linear_time(pattern, slow):
    assert slow_pattern(pattern) == slow


def test_a_refusal_of_a_manifest_value_names_the_manifest(tmp_path):
    folder = _copy("overlap", tmp_path)
    _edit_manifest(folder, lambda m: m.update(layers=1e300))
    _one_line(run_cli("report", str(folder)), str(folder / "manifest.json"), "layers must be a positive whole number, not 1e+300")


# ---- a setting's value parsed further -----------------------------------------------------------


@pytest.mark.parametrize(
    "cudagraph",
    ["x", [1], {"compilation-config": '{"cudagraph_capture_sizes": [Infinity]}'},
     {"compilation-config": '{"cudagraph_capture_sizes": [1e400, 2]}'}, {"cudagraph-capture-sizes": "1, ², 3"}],
    ids=["text", "list", "infinity", "overflow", "superscript"],
)  # fmt: skip
def test_capture_sizes_of_any_shape_are_no_sizes(tmp_path, cudagraph):
    folder = _copy("overlap", tmp_path)
    _edit_manifest(folder, lambda m: m.update(settings={"cudagraph": cudagraph}))
    proc = run_cli("report", str(folder))
    assert proc.returncode == 0, proc.stderr


def _sweep(tmp_path: Path) -> Path:
    """samples/afd-sweep without its traces (its runs read as recorded, not profiled): small and quick."""
    return _copy("afd-sweep", tmp_path, ("traces", "peer", "*.log"))


def test_a_sweep_runs_settings_in_other_digits_are_no_numbers(tmp_path):
    sweep = _sweep(tmp_path)

    def edit(m):
        m["settings"]["batching"]["max-num-seqs"] = "²"
        m["settings"]["dbo"]["dbo-decode-token-threshold"] = "٣²"

    _edit_manifest(sweep / "graphs-dbo" / "c16", edit)
    proc = run_cli("report", str(sweep))
    assert proc.returncode == 0, proc.stderr


def test_a_sweep_run_behind_a_symlink_loop_is_a_run_not_used(tmp_path):
    sweep = _sweep(tmp_path)
    shutil.rmtree(sweep / "graphs" / "c16")
    os.symlink("c16", sweep / "graphs" / "c16")
    for args in (["report", str(sweep)], ["report", "--markdown", str(sweep)], ["compare", str(sweep)]):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_path_given_that_loops_is_one_line(tmp_path):
    loop = tmp_path / "a"
    os.symlink(tmp_path / "b", loop)
    os.symlink(loop, tmp_path / "b")
    _one_line(run_cli("report", str(loop)), str(loop), "cannot be followed")
    _one_line(run_cli("compare", str(loop), str(SAMPLES / "overlap")), str(loop), "cannot be followed")
    _one_line(run_cli("report", str(SAMPLES / "overlap"), "-o", str(loop), "--force"), str(loop), "give another name")


# ---- top: a counters key and an end time ----------------------------------------------------------


def test_top_reads_a_counters_key_and_an_end_time_it_cannot_use_as_none(tmp_path):
    folder = _copy("afd-pair-graphs-dbo", tmp_path, ("traces", "peer"))
    counters = folder / "events" / "vm-2443.counters.json"
    body = json.loads(counters.read_text())
    body["counters"]["ubatch.².wait_us"] = 5
    body["counters"]["ubatch." + "9" * 5000 + ".wait_us"] = 5
    counters.write_text(json.dumps(body))
    for ended in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"):
        _edit_manifest(folder, lambda m: m.setdefault("times", {}).update(ended=ended))
        for args in (["top", "--once", str(folder)], ["top", str(folder)]):
            proc = run_cli(*args)
            assert proc.returncode == 0, (args, proc.stderr)


# ---- compare: a repeat that took no time ------------------------------------------------------------


def test_repeats_of_zero_duration_are_no_measurement(tmp_path):
    folder = _copy("afd-pair-graphs-dbo", tmp_path)
    _edit_manifest(folder, lambda m: [r.update(duration_s=0) for r in m["repeats"]])
    for arms in ([folder, SAMPLES / "afd-pair-graphs-nomps"], [SAMPLES / "afd-pair-graphs-nomps", folder]):
        proc = run_cli("compare", *map(str, arms))
        assert proc.returncode == 0, proc.stderr


# ---- an event log's detail of another type ----------------------------------------------------------


def _edit_log(path: Path, kind: str, detail) -> None:
    lines = path.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        record = json.loads(line)
        if record[1] == kind:
            record[6] = detail(record[6])
        out.append(json.dumps(record))
    path.write_text("\n".join(out) + "\n")


def test_an_event_logs_detail_of_another_type_is_no_detail(tmp_path):
    folder = _copy("overlap", tmp_path)
    _edit_log(folder / "events" / "vm-543.jsonl", "stream", lambda d: ["comm"])
    assert run_cli("report", str(folder)).returncode == 0
    pair = _copy("afd-pair-graphs-dbo", tmp_path)
    log = pair / "events" / "vm-2443.jsonl"
    for path in ([1], {"a": 1}):
        _edit_log(log, "step_begin", lambda d: {**(d if isinstance(d, dict) else {}), "path": path})
        proc = run_cli("report", str(pair))
        assert proc.returncode == 0, proc.stderr


# ---- archive: a manifest nested deep under a key nobody reads ------------------------------------------


def test_a_manifest_nested_deep_is_archived_with_the_deep_part_dropped(tmp_path):
    folder = _copy("overlap", tmp_path)
    path = folder / "manifest.json"
    text = path.read_text().rstrip()
    path.write_text(text[:-1] + ', "extra": ' + "[" * 600 + "]" * 600 + "}")
    assert run_cli("report", str(folder)).returncode == 0
    out = tmp_path / "a.tar.gz"
    proc = run_cli("archive", str(folder), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out) as tar:
        name = next(n for n in tar.getnames() if n.endswith("manifest.json"))
        archived = json.loads(tar.extractfile(name).read())
    value, depth = archived["extra"], 1
    while isinstance(value, list) and value:
        value, depth = value[0], depth + 1
    assert value == REDACTED and depth == DEEPEST  # the root's depth 0: 32 levels kept, the rest dropped


# ---- a trace's names of megabytes -----------------------------------------------------------------


def test_a_traces_names_are_read_up_to_64k_characters(tmp_path):
    """Each event may be 64 MB, so a small gzip held kernels of 10 MB names, and every renderer's
    pass over a name's characters took minutes (98 s for 20 such names). Names are read up to
    MAX_NAME_CHARS, as the Nsight reader reads them."""
    from traces import events_of, rewrite_trace

    from dbo_trace.trace.kineto.columns import MAX_NAME_CHARS
    from dbo_trace.trace.load import read_timelines

    def longer(doc):
        for i, e in enumerate(events_of(doc, "kernel")[:20]):
            e["name"] = chr(ord("A") + i) * (1 << 20) + e["name"]

    trace = rewrite_trace(next((SAMPLES / "overlap" / "traces").glob("*.json.gz")), tmp_path / "long.json.gz", longer)
    (timeline,) = read_timelines(trace, 0)
    assert max(map(len, timeline.names)) == MAX_NAME_CHARS
    proc = run_cli("report", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert max(map(len, proc.stdout.splitlines())) < 400  # the tables and lines cut what they show


def test_a_trace_of_no_time_draws_its_timeline_without_a_warning(tmp_path):
    """Every event at one instant, none lasting: the picture's axis was of no width and matplotlib's
    warning (its source line) reached stderr."""
    from traces import rewrite_trace

    def one_instant(doc):
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] = 1000
            if "dur" in e:
                e["dur"] = 0

    trace = rewrite_trace(next((SAMPLES / "overlap" / "traces").glob("*.json.gz")), tmp_path / "t.json.gz", one_instant)
    proc = run_cli_process("report", str(trace), "--timeline", str(tmp_path / "t.png"))  # pytest would catch the warning
    assert proc.returncode in (0, 2) and "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
