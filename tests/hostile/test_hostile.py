"""Hostile and corrupt traces: one line and exit 2 (or a counted warning), within seconds and bounded
memory. Each runs in a subprocess with a generous time-out that only a hang would meet."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from conftest import SAMPLES, unwrapped
from traces import read_trace, rewrite_trace, write_trace

HANG = 120  # seconds: a quadratic re-scan took 80-130 s on 2.7 MB; a linear read takes well under 5


def report(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "report", "--json", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG,
        cwd=cwd,
    )


def one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def real_events():
    (path,) = (SAMPLES / "vllm-eager-decode" / "traces").glob("*.json.gz")
    return read_trace(path)


def write(tmp_path, doc, name="t.json.gz"):
    return write_trace(doc, tmp_path / name)


def test_one_wrong_typed_event_near_the_start_is_found_at_once(tmp_path):
    doc = real_events()
    doc["traceEvents"][3]["ts"] = "not a number"
    path = write(tmp_path, doc)
    line = one_line_error(report(path), str(path), "byte", "`ts`", "wrong type")
    offset = int(line.split("at byte ")[1].split()[0])
    text = json.dumps(doc).encode()
    assert text[offset : offset + 1] == b"{" and b'"not a number"' in text[offset : offset + 4000]


def test_broken_json_in_the_middle_is_reported_with_its_offset(tmp_path):
    text = json.dumps(real_events())
    cut = len(text) // 2
    cut = text.index('"name"', cut)
    bad = text[:cut] + "@@" + text[cut:]
    path = tmp_path / "broken.json"
    path.write_text(bad)
    one_line_error(report(path), "invalid JSON", "byte")


def test_a_whitespace_bomb_is_read_in_bounded_memory(tmp_path):
    path = tmp_path / "spaces.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"traceEvents": [')
        chunk = b" " * (16 << 20)
        for _ in range(12):  # 192 MB of spaces: valid JSON, no events
            fh.write(chunk)
        fh.write(b"]}")
    one_line_error(report(path), "no GPU activity")


def test_a_giant_string_is_refused(tmp_path):
    path = tmp_path / "giant.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": "')
        chunk = b"a" * (16 << 20)
        for _ in range(6):  # a 96 MB kernel name
            fh.write(chunk)
        fh.write(b'"}]}')
    one_line_error(report(path), "larger than 64 MB")


def test_nan_is_refused_quickly(tmp_path):
    text = json.dumps(real_events())
    at = text.index('"dur": ') + len('"dur": ')
    path = tmp_path / "nan.json"
    path.write_text(text[:at] + "NaN" + text[at:].split(",", 1)[0][0:0] + text[at:][text[at:].index(",") :])
    one_line_error(report(path), "invalid JSON", "byte")


@pytest.mark.parametrize(
    "edit,reason",
    [
        (lambda k: k.pop("dur"), "without a duration"),
        (lambda k: k.update(dur=-5.0), "negative duration"),
        (lambda k: k.update(ts=1e300), "out of range"),
    ],
)
def test_values_that_would_flip_a_verdict_are_left_out_and_said(tmp_path, edit, reason):
    doc = real_events()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for k in kernels[:7]:
        edit(k)
    proc = report(write(tmp_path, doc))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["gpu"]["kernels"] == len(kernels) - 7
    assert any("7 events left out: " in n and reason in n for n in out["ranks"][0]["notes"])
    assert out["gpu"]["utilization"] is not None and 0 <= out["gpu"]["utilization"] <= 1


def test_integers_beyond_64_bits_do_not_crash(tmp_path):
    doc = real_events()
    for e in doc["traceEvents"][:50]:
        if "args" in e and "correlation" in e["args"]:
            e["args"]["correlation"] = 1 << 70
    e0 = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    e0["pid"] = 1 << 80
    assert report(write(tmp_path, doc)).returncode == 0


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_pipes_and_devices_are_refused(tmp_path, special):
    if special == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = special
    one_line_error(report(path), str(path), "not a regular file or folder")


def test_valid_json_with_brackets_in_strings_and_a_large_last_event(tmp_path):
    """`}]` and `},{` inside names, and a last event over 1 MB: read right, not refused."""
    doc = real_events()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["name"] = "weird }] name },{ here"
    kernels[-1]["name"] = "x}]" * 400_000
    doc["traceEvents"].remove(kernels[-1])
    doc["traceEvents"].append(kernels[-1])
    doc["deviceProperties"] = [{"id": 0}, {"id": 1}]  # a tail with `},{` after the array
    plain = report(write(tmp_path, real_events(), "plain.json.gz"))
    proc = report(write(tmp_path, doc))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gpu"]["kernels"] == json.loads(plain.stdout)["gpu"]["kernels"]


def _bundle(tmp_path, **manifest):
    import shutil

    b = tmp_path / "b"
    shutil.copytree(SAMPLES / "overlap", b)
    m = json.loads((b / "manifest.json").read_text())
    m.update(manifest)
    (b / "manifest.json").write_text(json.dumps(m))
    return b


@pytest.mark.parametrize(
    "manifest,words",
    [
        ({"comm_kernels": ["(unclosed"]}, ("comm_kernels", "not a valid regular expression")),
        ({"comm_kernels": "spin_kernel"}, ("comm_kernels must be a list",)),
        ({"layers": -3}, ("layers must be a positive whole number",)),
        ({"version": None}, ("no valid version",)),
    ],
)
def test_bad_manifests_are_one_line(tmp_path, manifest, words):
    one_line_error(report(_bundle(tmp_path, **manifest)), *words)


def test_a_deeply_nested_manifest_is_one_line(tmp_path):
    b = _bundle(tmp_path)
    (b / "manifest.json").write_text('{"format": "dbo-trace-bundle", "version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(report(b), "manifest")


@pytest.mark.parametrize(
    "record", ['[1e400, "x", 1, 1, 0, 1, null]', '["t", "x", 1, 1, 0, 1, null]', "[1, 2, 1, 1, 0, 1, null]", "[" * 100_000]
)
def test_bad_event_log_records_are_a_warning_not_a_crash(tmp_path, record):
    b = _bundle(tmp_path)
    (log,) = (b / "events").glob("*.jsonl")
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:5] + [record] + lines[5:]) + "\n")
    proc = report(b)
    assert proc.returncode == 0, proc.stderr
    assert any(
        "event log record must be" in w or "invalid JSON in the event log" in w for w in json.loads(proc.stdout)["warnings"]
    )


def test_a_nested_trace_events_key_elsewhere_is_not_the_events(tmp_path):
    doc = real_events()
    fake = [{"ph": "X", "cat": "kernel", "name": "fake", "ts": 1, "dur": 1}]
    path = write_trace({"meta": {"traceEvents": fake}, **doc}, tmp_path / "nested.json")
    plain = json.loads(report(write(tmp_path, real_events(), "plain.json.gz")).stdout)
    proc = report(path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gpu"]["kernels"] == plain["gpu"]["kernels"]


def _bundle_copy(tmp_path):
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(SAMPLES / "overlap", folder)
    return folder


@pytest.mark.parametrize("version", ["1", 1.5, -1, True, [1], 1 << 70])
def test_an_event_log_header_of_the_wrong_type_is_one_warning(tmp_path, version):
    """The log is skipped with one warning naming it; the trace is still reported."""
    folder = _bundle_copy(tmp_path)
    (log,) = (folder / "events").glob("*.jsonl")
    lines = log.read_text().splitlines()
    header = json.loads(lines[0])
    header["version"] = version
    log.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    proc = report(folder)
    assert proc.returncode == 0, proc.stderr
    (line,) = unwrapped(proc.stderr.strip())  # one warning, its wrapped lines joined
    assert str(log) in line and "version" in line and "not a whole number" in line
    assert json.loads(proc.stdout)["microbatch_source"] != "event log"


@pytest.mark.parametrize("base", [1e300, 1 << 70, -(1 << 65), "1795942397548009168", [1]])
def test_a_base_time_out_of_range_is_a_warning_not_a_crash(tmp_path, base):
    folder = _bundle_copy(tmp_path)
    (trace,) = (folder / "traces").glob("*.json.gz")
    rewrite_trace(trace, trace, lambda doc: doc.update(baseTimeNanoseconds=base))
    proc = report(folder)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert any("baseTimeNanoseconds" in w and str(trace) in w for w in out["warnings"]), out["warnings"]
    assert "baseTimeNanoseconds" in proc.stderr


def test_a_kernel_with_a_negative_duration_is_counted_in_the_warnings(tmp_path):
    """docs/performance.md: left out, counted and said, in the JSON's warnings and on stderr."""
    doc = real_events()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["dur"] = -3.0
    path = write(tmp_path, doc)
    proc = report(path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["gpu"]["kernels"] == len(kernels) - 1
    assert f"{path}: 1 events left out: negative duration" in out["warnings"]
    assert "1 events left out: negative duration" in proc.stderr


def test_an_oversized_bundle_manifest_is_refused_without_being_read(tmp_path):
    """A bundle's manifest.json is read bounded (bundle.read_bounded, as a sweep's files are): one past
    its cap is one line naming it, before a byte of it is parsed."""
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(SAMPLES / "overlap", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["padding"] = "x" * (17 << 20)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    one_line_error(report(bundle), "manifest.json", "cannot read the bundle manifest", "more than the 16 MiB")
