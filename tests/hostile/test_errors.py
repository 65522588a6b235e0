"""Bad input: one line on stderr naming the input, exit 2, nothing on stdout, nothing overwritten."""

import gzip
import json
import shutil
import sys

import pytest
from conftest import SAMPLES, report_json, run_cli, sample_trace
from traces import complete_events, read_trace, write_raw


def _assert_refused(proc, name, *words):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("dbo-trace: error: ") and name in lines[0]
    for word in words:
        assert word in lines[0]


def _refused_line(proc, name, *words):
    _assert_refused(proc, name, *words)
    return proc.stderr.strip()


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


GOOD_EVENT = {
    "ph": "X",
    "cat": "kernel",
    "name": "k",
    "pid": 0,
    "tid": 7,
    "ts": 1.0,
    "dur": 1.0,
    "args": {"stream": 7, "correlation": 1},
}


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("empty.json", "", ["empty"]),
        ("invalid.json", '{"traceEvents": [ {"ph": "X", ', ["invalid JSON"]),
        ("notjson.json", "hello", ["not valid JSON"]),
        ("list.json", "[1, 2, 3]", ["traceEvents"]),
        ("noevents.json", '{"a": 1}', ["traceEvents"]),
        ("eventsnotlist.json", '{"traceEvents": 3}', ["traceEvents"]),
        ("wrongtype.json", json.dumps({"traceEvents": [dict(GOOD_EVENT, ts="abc")]}), ["`ts`", "wrong type"]),
        ("wrongtype2.json", json.dumps({"traceEvents": [dict(GOOD_EVENT, args={"correlation": "x"})]}), ["correlation"]),
        ("nogpu.json", json.dumps({"traceEvents": [dict(GOOD_EVENT, cat="cpu_op")]}), ["no GPU activity"]),
        ("noclose.json", '{"traceEvents": [' + json.dumps(GOOD_EVENT) + "]", ["truncated"]),
    ],
)
def test_bad_files(tmp_path, name, content, words):
    _assert_refused(run_cli("report", str(_write(tmp_path, name, content))), name, *words)


def _array_layout(tmp_path, name, end):
    """A real trace in the 2020 layout (the document is the array of events), its last `]` replaced by end."""
    text = json.dumps(complete_events(read_trace(sample_trace("graph"))))
    return write_raw(text[:-1].encode() + end, tmp_path / name)


@pytest.mark.parametrize(
    "name, end, words",
    [
        ("comma.json", b", ]", ["comma after the last trace event", "byte "]),
        ("comma.json.gz", b",\n]\n", ["comma after the last trace event", "byte "]),
        ("after.json", b'] {"traceEvents": []}', ["data after the array of trace events", "byte "]),
        ("after.json.gz", b"]]", ["data after the array of trace events", "byte "]),
    ],
)
def test_an_array_layout_trace_that_is_whole_says_what_is_wrong_not_truncated(tmp_path, name, end, words):
    """Every event is there; the reader said the file ended inside the events (truncated)."""
    line = _refused_line(run_cli("report", str(_array_layout(tmp_path, name, end))), name, *words)
    assert "truncated" not in line


def test_a_trailing_comma_in_the_object_layout_is_named_too(tmp_path):
    doc = read_trace(sample_trace("graph"))
    text = json.dumps(doc["traceEvents"])[:-1] + ", ]"
    path = write_raw(('{"traceEvents": ' + text + "}").encode(), tmp_path / "comma.json")
    assert "truncated" not in _refused_line(run_cli("report", str(path)), "comma.json", "comma after the last trace event")


@pytest.mark.parametrize("content", ["[]", " [ ]\n"])
def test_an_empty_array_says_it_holds_no_events(tmp_path, content):
    line = _refused_line(run_cli("report", str(_write(tmp_path, "empty.json", content))), "empty.json", "holds no events")
    assert "traceEvents" not in line


def test_truncated_gzip(tmp_path):
    data = sample_trace("overlap").read_bytes()
    _assert_refused(run_cli("report", str(_write(tmp_path, "cut.json.gz", data[: len(data) // 2]))), "cut.json.gz", "gzip")


def test_corrupt_gzip(tmp_path):
    """A flipped byte inside the deflate stream, and one in the member's CRC."""
    data = bytearray(sample_trace("overlap").read_bytes())
    middle = bytearray(data)
    middle[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    crc = bytearray(data)
    crc[-8] ^= 0xFF  # the CRC32 of the uncompressed data, in the gzip trailer
    for name, content in (("middle.json.gz", middle), ("crc.json.gz", crc)):
        _assert_refused(run_cli("report", "--json", str(_write(tmp_path, name, bytes(content)))), name, "gzip")


def test_truncated_plain_json(tmp_path):
    text = gzip.decompress(sample_trace("overlap").read_bytes())
    _assert_refused(run_cli("report", str(_write(tmp_path, "cut.json", text[: len(text) // 2]))), "cut.json", "truncated")


def test_missing_path_and_empty_folder(tmp_path):
    _assert_refused(run_cli("report", str(tmp_path / "nope")), "nope", "no such file")
    (tmp_path / "empty").mkdir()
    _assert_refused(run_cli("report", str(tmp_path / "empty")), "empty", "no traces")


def test_bundle_with_bad_manifest(tmp_path):
    shutil.copytree(SAMPLES / "serial", tmp_path / "b")
    (tmp_path / "b" / "manifest.json").write_text("{broken")
    _assert_refused(run_cli("report", str(tmp_path / "b")), "manifest.json")
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"format": "dbo-trace-bundle", "version": 99}))
    _assert_refused(run_cli("report", str(tmp_path / "b")), "manifest.json", "upgrade")


def test_bad_regex_is_refused():
    _assert_refused(run_cli("report", str(SAMPLES / "serial"), "--comm-kernels", "(unclosed"), "(unclosed", "regular expression")


def test_one_broken_rank_warns_and_reports_the_rest(tmp_path):
    shutil.copy(sample_trace("overlap-no-hooks"), tmp_path / "rank0.pt.trace.json.gz")
    _write(tmp_path, "rank1.pt.trace.json.gz", b"\x1f\x8b\x08\x00garbage")
    proc = run_cli("report", "--json", str(tmp_path), "--comm-kernels", "spin_kernel")
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "rank1.pt.trace.json.gz" in proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["ranks"]) == 1 and doc["verdict"]["label"] == "overlapped"


def test_output_file_is_never_overwritten(tmp_path):
    out = _write(tmp_path, "report.md", "my notes")
    _assert_refused(run_cli("report", str(SAMPLES / "serial"), "--markdown", "-o", str(out)), "report.md", "--force")
    assert out.read_text() == "my notes"
    proc = run_cli("report", str(SAMPLES / "serial"), "--markdown", "-o", str(out), "--force")
    assert proc.returncode == 0 and "not-overlapped" in out.read_text()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["-o", "{d}/same.html", "--html", "{d}/same.html"], "given for two outputs"),
        (["--timeline", "{d}/ok.png", "-o", "{d}/nodir/x.md"], "does not exist"),
        (["-o", "{d}"], "is a folder"),
    ],
)
def test_outputs_are_checked_together_before_any_work(tmp_path, extra, message):
    from conftest import SAMPLES, run_cli

    args = [a.format(d=tmp_path) for a in extra]
    proc = run_cli("report", str(SAMPLES / "overlap"), *args)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ok.png").exists() and not (tmp_path / "same.html").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--json", "--markdown"], "--json and --markdown choose one output each"),
        (["--step", "2"], "--step and --rank choose the step that --timeline draws"),
        (["--rank", "0"], "--step and --rank choose the step that --timeline draws"),
    ],
)
def test_options_that_would_be_ignored_are_refused(args, message):
    from conftest import SAMPLES, run_cli

    proc = run_cli("report", str(SAMPLES / "overlap"), *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""
    proc = run_cli("compare", "--json", "--markdown", str(SAMPLES / "overlap"), str(SAMPLES / "serial"))
    assert proc.returncode == 2 and "--json and --markdown" in proc.stderr


def test_the_same_run_given_twice_is_read_once_with_a_warning():
    """Two identical ranks would double every total (a newcomer's `report samples/overlap samples/overlap`)."""
    once = report_json(str(SAMPLES / "overlap"))
    proc = run_cli("report", "--json", str(SAMPLES / "overlap"), str(SAMPLES / "overlap"))
    assert proc.returncode == 0
    twice = json.loads(proc.stdout)
    assert len(twice["ranks"]) == 1 and twice["comm"]["exposed_us"] == once["comm"]["exposed_us"]
    assert any("given more than once" in w for w in twice["warnings"])
    trace = sample_trace("overlap")
    both = json.loads(run_cli("report", "--json", str(SAMPLES / "overlap"), str(trace)).stdout)
    assert len(both["ranks"]) == 1 and any("read once" in w for w in both["warnings"])


def test_a_tar_that_is_not_a_review_archive_says_so(tmp_path):
    import tarfile

    (tmp_path / "a.txt").write_text("hi")
    out = tmp_path / "other.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(tmp_path / "a.txt", arcname="a.txt")
    proc = run_cli("report", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "a tar archive, not a trace" in proc.stderr and "not valid JSON" not in proc.stderr


_EVENT = json.dumps(GOOD_EVENT)


@pytest.mark.parametrize(
    "content",
    [
        "[" * 200_000,  # a JSON Array trace that is only brackets
        "[" * 3_000 + "]" * 3_000,
        "[" + '{"a":' * 3_000 + "1" + "}" * 3_000 + "]",  # a nested event in the array layout
        '{"traceEvents": [' + _EVENT + '], "distributedInfo": ' + '{"a":' * 3_000 + "1" + "}" * 3_000 + "}",
        '{"traceEvents": [{"ph": "X", "args": {"x": ' + '{"a":' * 3_000 + "1" + "}" * 3_000 + "}}]}",
    ],
)
def test_json_nested_past_the_decoders_depth_is_refused(tmp_path, content):
    # msgspec raised RecursionError: an internal error (exit 3). Under Python 3.13 its decoders go
    # deeper (the interpreter's C recursion limit grew), so there a 3,000-deep document decodes and is
    # taken for what it holds (a report, or a refusal of its content); never a traceback.
    path = _write(tmp_path, "deep.json", content)
    proc = run_cli("report", str(path))
    if sys.version_info < (3, 13) or len(content) > 100_000:
        _assert_refused(proc, "deep.json", "nested over a thousand levels deep")
    else:
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        if proc.returncode == 2:
            _assert_refused(proc, "deep.json")


# Numbers past any sane bound: refused in one line before any work, never a figure made from them.


@pytest.mark.parametrize(
    "args, option",
    [
        (["report", "SAMPLE", "--layers", "99999999999999999999"], "--layers"),
        (["report", "SAMPLE", "--workers", "100000000000"], "--workers"),
        (["report", "SAMPLE", "--layers", "0"], "--layers"),
        (["report", "SAMPLE", "--layer", "99999999999999999999"], "--layer"),
        (["report", "SAMPLE", "--comm-stream", "99999999999999999999"], "--comm-stream"),
        (["report", "SAMPLE", "--comm-stream", "-5"], "--comm-stream"),
        (["report", "SAMPLE", "--timeline", "x.png", "--rank", "99999999999999999999"], "--rank"),
        (["compare", "SAMPLE", "SAMPLE", "--layers", "99999999999999999999"], "--layers"),
        (["archive", "SAMPLE", "--max-mb", "inf"], "--max-mb"),
        (["archive", "SAMPLE", "--max-mb", "nan"], "--max-mb"),
        (["archive", "SAMPLE", "--steps", "99999999999"], "--steps"),
        (["top", "SAMPLE", "--interval", "nan"], "--interval"),
        (["top", "SAMPLE", "--interval", "1e9"], "--interval"),
        (["record", "--num-prompts", "99999999999", "prog"], "--num-prompts"),
        (["record", "--grace", "nan", "prog"], "--grace"),
        (["record", "--seed", "-1", "prog"], "--seed"),
        (["demo", "--nproc", "100000000000"], "--nproc"),
        (["demo", "--comm-us", "inf"], "--comm-us"),
    ],
)
def test_absurd_numbers_are_refused_in_one_line(args, option, tmp_path):
    """The real sample stands where a path is asked: the option alone is refused, no report made."""
    args = [str(SAMPLES / "overlap") if a == "SAMPLE" else a for a in args]
    _assert_refused(run_cli(*args, cwd=tmp_path), option)
    assert not list(tmp_path.iterdir())  # nothing written (no --timeline picture)


def test_the_worker_count_from_the_environment_is_bounded_too(monkeypatch):
    monkeypatch.setenv("DBO_TRACE_WORKERS", "100000000000")
    _assert_refused(run_cli("report", str(SAMPLES / "overlap")), "DBO_TRACE_WORKERS", "1 to 1024")


def test_every_numeric_option_of_every_command_has_both_bounds():
    """The audit, kept: an int or float option without an upper bound accepts 10^20 silently."""
    import click

    from dbo_trace.cli import main

    unbounded = []
    for name, command in main.commands.items():
        for p in command.params:
            kind = p.type
            if isinstance(kind, (click.IntRange, click.FloatRange)):
                if kind.min is None or kind.max is None:
                    unbounded.append(f"{name} {p.opts[0]}")
            elif isinstance(kind, (type(click.INT), type(click.FLOAT))):
                unbounded.append(f"{name} {p.opts[0]}")
    assert not unbounded


def test_a_sweep_grid_out_of_range_is_refused():
    from dbo_trace.commands.demo import DemoRequest
    from dbo_trace.errors import UsageError

    for grid in ("1e999", "nan", "100,abc", ",".join(["100"] * 51), "0.5"):
        with pytest.raises(UsageError, match="--sweep-compute-us"):
            DemoRequest(sweep=True, sweep_compute_us=grid, device="cpu").checked()
