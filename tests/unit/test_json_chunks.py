"""--json written in pieces (render/json_out.py json_chunks): the step lists encoded a few blocks at
a time into the text around them must give exactly the bytes of the whole document encoded and
indented at once, with safe.json_inert applied, whatever the number of steps, ranks and pieces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import json_out
from dbo_trace.render.document import build_document
from dbo_trace.render.safe import json_inert

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def whole(document) -> bytes:
    """The reference: the document encoded and indented in one piece (msgspec), made inert, a newline."""
    return (json_inert(msgspec.json.format(msgspec.json.encode(document), indent=2).decode()) + "\n").encode()


@pytest.mark.parametrize("sample", ["two-gpu-overlap", "vllm-big-mixed", "afd-graphs-dbo", "hostbound"])
@pytest.mark.parametrize("at_once", [1, 2, 3, 128])
def test_pieces_are_the_whole_documents_bytes(sample, at_once, monkeypatch):
    report = analyze_paths([SAMPLES / sample], Options())
    want = whole(build_document(report))
    monkeypatch.setattr(json_out, "STEP_BLOCKS_AT_ONCE", at_once)
    pieces = list(json_out.json_chunks(build_document(report, lazy_steps=True)))
    assert b"".join(pieces) == want
    steps = sum(len(r.steps) for r in report.ranks)
    assert steps >= 3 and len(pieces) > 2 * steps // at_once  # the lists did come in pieces
    assert b"dbo-trace-steps-" not in want


def test_a_document_without_steps_and_compares_dict():
    for document in ({"a": [1, {"b": "\x85"}], "steps": []}, []):
        assert b"".join(json_out.json_chunks(document)) == whole(document)


def test_hostile_strings_in_pieces_are_as_inert_as_whole(monkeypatch):
    from test_inert import HOSTILE

    report = analyze_paths([SAMPLES / "overlap"], Options())
    document = build_document(report)
    label = HOSTILE + "\x7f\u202e\u2028 dbo-trace-steps-0"
    rank = msgspec.structs.replace(
        document.ranks[0], steps=[msgspec.structs.replace(s, label=label) for s in document.ranks[0].steps]
    )
    hostile = msgspec.structs.replace(document, ranks=[rank], steps=list(rank.steps))
    monkeypatch.setattr(json_out, "STEP_BLOCKS_AT_ONCE", 2)
    got = b"".join(json_out.json_chunks(hostile))
    assert got == whole(hostile)
    assert b"\x7f" not in got and "\u202e".encode() not in got


def test_report_json_to_a_file_and_to_stdout_are_the_same_bytes(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", str(SAMPLES / "two-gpu-overlap")]
    subprocess.run([*cmd, "-o", str(out)], check=True, capture_output=True)
    piped = subprocess.run(cmd, check=True, capture_output=True).stdout
    report = analyze_paths([SAMPLES / "two-gpu-overlap"], Options())
    assert out.read_bytes() == piped == whole(build_document(report))


def test_stdout_takes_the_pieces_through_its_text_layer():
    """A caller's stdout without a byte layer (io.StringIO), and stdout's own encoding, as a whole
    str is written (a review found both broken when the pieces went to the byte layer)."""
    import contextlib
    import io

    from dbo_trace.cli import main

    report = analyze_paths([SAMPLES / "overlap"], Options())
    caught = io.StringIO()
    with contextlib.redirect_stdout(caught):
        main(["report", str(SAMPLES / "overlap"), "--json"], standalone_mode=False)
    assert caught.getvalue().encode() == whole(build_document(report))
    cmd = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", str(SAMPLES / "overlap")]
    utf16 = subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONIOENCODING": "utf-16"}).stdout
    assert utf16.decode("utf-16").encode() == whole(build_document(report))


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """`report --json | head -c 100`: exit 0 and nothing on stderr, as when the text went in one write."""
    cmd = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", str(SAMPLES / "dsv2lite-eager-prefill")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100).startswith(b"{")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert err == b""
