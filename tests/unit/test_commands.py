"""Each command's request checked without click (dbo_trace/commands/): every refusal its checked()
makes, with its message and exit status, and a request it accepts. The messages are the ones the
CLI tests see through click (test_errors.py and the others); here they are checked at the source."""

import io
import os
import tarfile
from pathlib import Path

import pytest
from conftest import SAMPLES, manifest, sample_trace

from dbo_trace.commands.archive import ArchiveRequest
from dbo_trace.commands.compare import CompareRequest
from dbo_trace.commands.demo import DemoRequest
from dbo_trace.commands.doctor import DoctorRequest
from dbo_trace.commands.record import RecordRequest
from dbo_trace.commands.report import ArchiveView, ReportRequest
from dbo_trace.commands.top import TopRequest
from dbo_trace.errors import UsageError

TRACE = sample_trace("overlap")


def refused(request, code: int = 2) -> str:
    with pytest.raises(UsageError) as caught:
        request.checked()
    assert caught.value.exit_code == code
    return str(caught.value)


def a_review_archive(path: Path) -> Path:
    """A tar whose first member is under dbo-trace/: what is_archive takes for pack's output."""
    with tarfile.open(path, "w:gz") as tar:
        body = b"{}"
        info = tarfile.TarInfo("dbo-trace/report.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return path


# report


def test_report_accepts_a_trace_with_every_output(tmp_path):
    request = ReportRequest(
        (TRACE,),
        comm_kernels=("my_a2a",),
        output=tmp_path / "r.md",
        timeline=tmp_path / "t.svg",
        perfetto=tmp_path / "p.pftrace",
        html=tmp_path / "r.html",
        step="#2",
        rank=0,
        all_ranks=True,
    )
    assert request.checked() is request
    assert request.format == "markdown" and request.picture is not None and request.picture.name == "svg"
    assert request.options.comm_patterns == ("my_a2a",) and not request.options.comm_only
    only = ReportRequest((TRACE,), comm_kernels_only=("x",)).checked()
    assert isinstance(only, ReportRequest) and only.options.comm_only and only.options.comm_patterns == ("x",)


def test_report_format_by_flag_or_suffix():
    assert ReportRequest((TRACE,)).format == "terminal"
    assert ReportRequest((TRACE,), as_json=True, output=Path("r.out")).format == "json"  # a suffix no renderer writes
    assert ReportRequest((TRACE,), format_given="markdown", output=Path("r.md")).format == "markdown"
    # a flag and a suffix that disagree: JSON in r.md is refused, not written under Markdown's name
    assert refused(ReportRequest((TRACE,), as_json=True, output=Path("r.md"))).startswith(
        "-o r.md: its name is for markdown but --json asks for json"
    )
    assert ReportRequest((TRACE,), output=Path("r.html")).format == "html"
    assert ReportRequest((TRACE,), output=Path("r.txt")).format == "terminal"


def test_report_refuses_json_with_markdown():
    message = refused(ReportRequest((TRACE,), as_json=True, as_markdown=True))
    assert message == ("--json and --markdown choose one output each; give one of them (or write one with -o and run again)")


@pytest.mark.parametrize(
    "option, message",
    [
        ({"step": "3"}, "--step and --rank choose the step that --timeline draws; add --timeline FILE.png (or drop them)"),
        ({"rank": 1}, "--step and --rank choose the step that --timeline draws; add --timeline FILE.png (or drop them)"),
        ({"all_ranks": True}, "--all-ranks draws every rank's step in --timeline; add --timeline FILE.png (or drop it)"),
        (
            {"comm_kernels": ("a",), "comm_kernels_only": ("b",)},
            "--comm-kernels adds to the built-in set and --comm-kernels-only replaces it: give one of them",
        ),
    ],
)
def test_report_refuses_a_combination(option, message):
    assert refused(ReportRequest((TRACE,), **option)) == message


@pytest.mark.parametrize("field", ["comm_kernels", "comm_kernels_only", "ubatch_patterns", "step_marker"])
def test_report_refuses_a_bad_regex_naming_its_option(field):
    value = "(unclosed" if field == "step_marker" else ("ok", "(unclosed")
    message = refused(ReportRequest((TRACE,), **{field: value}))
    option = {"ubatch_patterns": "--ubatch-pattern"}.get(field, "--" + field.replace("_", "-"))
    assert message == f"{option} '(unclosed': not a valid regular expression (missing ), unterminated subpattern at position 0)"


@pytest.mark.parametrize(
    "given, shown",
    [("99999999999999", "99999999999999"), ("0", "0"), ("1024", "1024"), ("9" * 5000, "9" * 12 + "... (5000 digits)")],
)
def test_report_says_what_if_sms_out_of_range(given, shown):
    """Issue 61 item 15b: sms=99999999999999 was answered with the syntax (round-trip=TIME ... or
    sms=N), as if the number were not one; the line names the value and the range (a value of 5000
    digits shortened, and never made an int: Python refuses ints of over 4300 digits)."""
    message = refused(ReportRequest((TRACE,), what_if=(f"sms={given}",)))
    assert message == f"--what-if sms={shown}: out of range; give N from 1 to 1023 SMs kept for comm, fewer than the GPU has"
    assert "\n" not in message and ReportRequest((TRACE,), what_if=("sms=1023", "sms=020")).checked()


def test_report_refuses_to_overwrite(tmp_path):
    out = tmp_path / "r.md"
    out.write_text("mine")
    assert refused(ReportRequest((TRACE,), output=out)) == (
        f"{out}: already exists; choose another path or pass --force to replace it"
    )
    assert ReportRequest((TRACE,), output=out, force=True).checked()
    assert refused(ReportRequest((TRACE,), output=tmp_path / "x.md", html=tmp_path / "x.md")) == (
        f"{tmp_path / 'x.md'}: given for two outputs; give each output its own file"
    )
    assert refused(ReportRequest((TRACE,), output=tmp_path)) == f"{tmp_path}: is a folder; give a file name for the output"
    missing = tmp_path / "no" / "r.md"
    assert refused(ReportRequest((TRACE,), perfetto=missing)) == (
        f"{missing}: the folder {missing.parent} does not exist; create it first"
    )
    assert out.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_report_refuses_an_unwritable_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert (
            refused(ReportRequest((TRACE,), output=folder / "r.md")) == f"{folder / 'r.md'}: the folder {folder} is not writable"
        )
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("name", ["t.pdf", "t.html", "t"])
def test_report_timeline_is_png_or_svg(tmp_path, name):
    path = tmp_path / name
    assert (
        refused(ReportRequest((TRACE,), timeline=path))
        == f"{path}: --timeline writes .png or .svg; name the file with one of those"
    )


def test_report_of_an_archive_is_an_archive_view(tmp_path):
    archive = a_review_archive(tmp_path / "a.tar.gz")
    view = ReportRequest((archive,), as_markdown=True, output=tmp_path / "a.md").checked()
    assert view == ArchiveView(archive, "markdown", tmp_path / "a.md", False)
    assert ReportRequest((archive, TRACE)).checked() == ReportRequest((archive, TRACE))  # two inputs: traces


@pytest.mark.parametrize(
    "option",
    [
        {"comm_kernels": ("a",)},
        {"comm_kernels_only": ("a",)},
        {"step_marker": "s"},
        {"comm_streams": (7,)},
        {"ubatch_patterns": ("a", "b")},
        {"layers": 2},
        {"workers": 2},
        {"timeline": Path("t.png")},
        {"perfetto": Path("t.pftrace")},
        {"html": Path("t.html")},
        {"step": "3"},
        {"rank": 1},
        {"all_ranks": True},
    ],
)
def test_report_of_an_archive_refuses_what_needs_the_traces(tmp_path, option):
    archive = a_review_archive(tmp_path / "a.tar.gz")
    assert refused(ReportRequest((archive,), **option)) == (
        f"{archive}: a review archive holds the finished report, not the traces: it can be shown as text, "
        "Markdown or JSON, not re-analysed or drawn; run those options on the recording"
    )


def test_archive_view_refusals(tmp_path):
    archive = a_review_archive(tmp_path / "a.tar.gz")
    assert refused(ReportRequest((archive,), output=tmp_path / "a.html")) == (
        f"{archive}: a review archive can be shown as text, Markdown or JSON, not as html"
    )
    taken = tmp_path / "a.json"
    taken.write_text("{}")
    assert refused(ArchiveView(archive, "json", taken)) == (
        f"{taken}: already exists; choose another path or pass --force to replace it"
    )
    assert refused(ReportRequest((archive,), as_json=True, as_markdown=True)).startswith("--json and --markdown")


def test_a_missing_step_or_rank_is_said_in_the_options_words():
    """render/pictures/step_view.py raises plain errors; drawn_step words them as --step and --rank."""
    from dbo_trace.analysis.model import Options
    from dbo_trace.render.pictures.step_view import ChoiceNotFound, chosen_step
    from dbo_trace.commands.report import drawn_step
    from dbo_trace.app.pipeline import analyze_paths

    report = analyze_paths([SAMPLES / "overlap"], Options())
    n = len(report.ranks[0].steps)
    labels = [s.label for s in report.ranks[0].steps]
    assert drawn_step(report, None, "#2")[1] == 1 and drawn_step(report, 0, labels[3])[1] == 3
    cases = {
        (None, "#9"): f"--step #9: rank 0 has {n} steps (#1 to #{n}: the per-step table's numbers)",
        (None, " 0 "): f"--step 0: rank 0 has {n} steps (#1 to #{n}: the per-step table's numbers)",
        (None, "fastest"): f"--step 'fastest': no step of rank 0 has this label; give a number (#1 to #{n}), a label, "
        "median or slowest",
        (3, None): "--rank 3: the input has ranks [0]",
    }
    for (rank, step), message in cases.items():
        with pytest.raises(ChoiceNotFound) as plain:
            chosen_step(report, rank, step)
        assert "--" not in str(plain.value)  # the analysis does not speak the CLI's vocabulary
        with pytest.raises(UsageError) as said:
            drawn_step(report, rank, step)
        assert str(said.value) == message and said.value.exit_code == 2


def test_a_repeated_label_lists_its_steps():
    from dbo_trace.analysis.model import Options
    from dbo_trace.commands.report import drawn_step
    from dbo_trace.app.pipeline import analyze_paths

    report = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options())
    label = "execute_context_0(0)_generation_16(16)"
    numbers = [i + 1 for i, s in enumerate(report.ranks[0].steps) if s.label == label]
    assert len(numbers) > 5
    with pytest.raises(UsageError) as said:
        drawn_step(report, None, label)
    shown = ", ".join(f"#{k}" for k in numbers[:5]) + ", ..."
    assert str(said.value) == f"--step {label!r}: {len(numbers)} steps of rank 0 have this label ({shown}); give a number"


# compare


def test_compare_checks(tmp_path):
    arms = (SAMPLES / "overlap", SAMPLES / "serial")
    assert CompareRequest(arms, labels=("a", "b")).checked().names == ["a", "b"]
    assert CompareRequest(arms).names == ["overlap", "serial"]
    assert refused(CompareRequest(arms, output=Path("c.html"))).startswith("-o c.html: this command does not write html")
    assert refused(CompareRequest(arms[:1])) == "compare needs at least two arms (bundles or traces)"
    assert refused(CompareRequest(arms, labels=("a",))) == "--label given once for 2 arms; give one per arm or none"
    assert refused(CompareRequest(arms, as_json=True, as_markdown=True)).startswith("--json and --markdown choose one")
    taken = tmp_path / "c.md"
    taken.write_text("")
    assert refused(CompareRequest(arms, output=taken)).endswith(
        "already exists; choose another path or pass --force to replace it"
    )


# archive


def test_archive_checks(tmp_path):
    out = tmp_path / "run.tar.gz"
    assert ArchiveRequest(SAMPLES / "overlap", out).checked().archive == out
    assert ArchiveRequest(SAMPLES / "overlap").archive == Path("overlap-dbo-trace.tar.gz")
    out.write_bytes(b"")
    assert refused(ArchiveRequest(SAMPLES / "overlap", out)) == (
        f"{out}: already exists; choose another path or pass --force to replace it"
    )
    assert ArchiveRequest(SAMPLES / "overlap", out, force=True).checked()


# record


def test_record_checks(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    message = refused(RecordRequest(("vllm", "serve", "m"), full))
    assert message == f"{full}: already exists and is not empty; choose another --out (nothing there was changed)"
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert refused(RecordRequest(("prog",), a_file)).startswith(f"{a_file}: already exists and is not empty")
    served = RecordRequest(("vllm", "serve", "m"), tmp_path / "new").checked()
    assert served.server is True and served.out == tmp_path / "new"
    program = RecordRequest(("python", "x.py"), tmp_path / "new").checked()
    assert program.server is False
    assert RecordRequest(("python", "x.py"), tmp_path / "new", server=True).checked().server is True


def test_record_names_a_default_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = RecordRequest(("prog",)).checked().out
    assert out is not None and out.name.startswith("dbo-trace-") and not out.exists()


# demo (torch present: the CPU device passes the GPU checks, as CI runs it)


def test_demo_checks(tmp_path, monkeypatch):
    import importlib.util

    pytest.importorskip("torch")
    cpu = {"device": "cpu", "out": tmp_path / "demo"}
    assert DemoRequest(**cpu).checked().out == tmp_path / "demo"
    assert refused(DemoRequest(comm="all_to_all", **cpu)) == (
        "--comm all_to_all needs --nproc 2 or more: over a world of one, torch turns the all_to_all into a "
        "device-to-device copy, which is not communication (measured on the H200, docs/demo.md)"
    )
    assert refused(DemoRequest(sweep=True, nproc=2, **cpu)) == "--sweep runs on one GPU; drop --nproc"
    plot = tmp_path / "p.png"
    plot.write_bytes(b"")
    assert refused(DemoRequest(plot=plot, **cpu)) == f"{plot}: already exists; choose another --plot path"
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "x").write_text("")
    assert refused(DemoRequest(**cpu)).endswith(
        "already exists and is not empty; choose another --out (nothing there was changed)"
    )
    import torch

    if not torch.cuda.is_available():
        assert refused(DemoRequest(out=tmp_path / "d2")) == (
            "no CUDA GPU is visible: dbo-trace demo runs its workload on a GPU (`dbo-trace report` runs anywhere)"
        )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert refused(DemoRequest(out=tmp_path / "d3")) == (
        "dbo-trace demo needs torch and a CUDA GPU (pip install torch); `dbo-trace report` needs neither"
    )


# doctor, top


def test_doctor_takes_no_options():
    assert DoctorRequest().checked() == DoctorRequest()


def test_top_checks(tmp_path, monkeypatch):
    monkeypatch.delenv("DBO_TRACE_DIR", raising=False)
    assert refused(TopRequest()) == (
        "top: no folder given and $DBO_TRACE_DIR is not set; give the server's DBO_TRACE_DIR or a recording"
    )
    assert refused(TopRequest(tmp_path / "none")) == (
        f"{tmp_path / 'none'}: no such folder; give the server's DBO_TRACE_DIR or a recording"
    )
    assert TopRequest(tmp_path).checked().folder == tmp_path
    monkeypatch.setenv("DBO_TRACE_DIR", str(tmp_path))
    assert TopRequest().checked().folder == tmp_path


@pytest.mark.parametrize("name", ["run.zip", "run.tar", "run.gz", "run.tgz"])
def test_archive_is_named_tar_gz(tmp_path, name):
    out = tmp_path / name
    assert refused(ArchiveRequest(SAMPLES / "overlap", out)) == (
        f"{out}: dbo-trace archive writes a gzipped tar; give -o a name that ends in .tar.gz"
    )
    assert ArchiveRequest(SAMPLES / "overlap", tmp_path / "RUN.TAR.GZ").checked()


def test_top_knows_a_finished_recording(tmp_path):
    import json

    from dbo_trace.commands.top import finished

    assert finished(SAMPLES / "recorded-overlap") == manifest("recorded-overlap")["status"]
    assert finished(tmp_path) is None  # a server's DBO_TRACE_DIR: no manifest
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "dbo-trace-bundle", "version": 1, "status": "recording"}))
    assert finished(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "dbo-trace-bundle", "version": 1, "status": "failed"}))
    assert finished(tmp_path) == "failed"
    (tmp_path / "manifest.json").write_text("{not json")
    assert finished(tmp_path) is None  # says nothing: top goes on refreshing


def test_dash_as_output_is_stdout(tmp_path):
    """Before: `report -o -` and `compare -o -` wrote a file named `-`. Now stdout, as for most tools."""
    from conftest import SAMPLES, run_cli

    direct = run_cli("report", "--json", str(SAMPLES / "overlap"), cwd=tmp_path)
    dashed = run_cli("report", "--json", str(SAMPLES / "overlap"), "-o", "-", cwd=tmp_path)
    assert dashed.returncode == 0 and dashed.stdout == direct.stdout
    compared = run_cli("compare", str(SAMPLES / "serial"), str(SAMPLES / "overlap"), "-o", "-", cwd=tmp_path)
    assert compared.returncode == 0 and compared.stdout.startswith("dbo-trace compare")
    assert list(tmp_path.iterdir()) == []


def test_the_collector_setting_ends_with_the_report(tmp_path):
    """report raises the collector's threshold only while it runs (cli._few_collections): the
    process's setting is as it was afterwards (record times latencies in its own process)."""
    import gc

    from conftest import SAMPLES, run_cli

    before = gc.get_threshold()
    assert run_cli("report", "--json", str(SAMPLES / "overlap")).returncode == 0
    assert gc.get_threshold() == before
