"""`report ARCHIVE` reads an archive somebody attached: untrusted input, read in bounded time and
memory (the caps of docs/outputs.md), and a damaged one is one line and exit 2, never a crash.

Each hostile archive is built here with tarfile from a real one (`dbo-trace archive samples/late`):
a report member that inflates past the cap, thousands of members before the report, a huge member
first, links, devices and FIFOs, and report documents with missing keys, wrong types, deep
nesting and lone surrogates. The caps are lowered for the size cases, so that the members that
exceed them stay small enough to build in a test; the code path is the one the defaults take."""

import copy
import io
import json
import tarfile

import msgspec
import pytest
from conftest import SAMPLES, run_cli

from dbo_trace.app import review_archive as archive
from dbo_trace.render import RENDERERS, RenderOptions
from dbo_trace.render.document import ReportDocument

REPORT = "dbo-trace/report.json"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The members of a real archive, in order: (name, bytes)."""
    out = tmp_path_factory.mktemp("real") / "late.tar.gz"
    assert run_cli("archive", str(SAMPLES / "late"), "-o", str(out)).returncode == 0
    with tarfile.open(out) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def build(path, entries):
    """A gzipped tar of entries: (name, bytes) for a file, or a TarInfo of another type."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                name, data = entry
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def with_report(real, data):
    return [(n, data if n == REPORT else d) for n, d in real]


def document(real):
    return json.loads(dict(real)[REPORT])


def refused(path, *words):
    """The archive refused in one line naming it and saying `words`; returns the member headers read
    on the way (counted, not timed: what a hostile archive could make the reader do is the count)."""
    seen = 0
    proc_member = archive._BoundedTarInfo._proc_member

    def counted(self, tar):
        nonlocal seen
        seen += 1
        return proc_member(self, tar)

    archive._BoundedTarInfo._proc_member = counted
    try:
        proc = run_cli("report", str(path))
    finally:
        archive._BoundedTarInfo._proc_member = proc_member
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return seen


def million_objects(real, where):
    """The real report with a million empty objects (3 MB of JSON, a few kB gzipped) as its key where."""
    doc = document(real)
    doc[where] = []
    return json.dumps(doc).encode().replace(f'"{where}": []'.encode(), f'"{where}": ['.encode() + b"{}," * 999_999 + b"{}]")


def refusal_peak(path, match=None):
    """The most memory Python allocated while read_report_document refused path (UsageError, its
    message matching match)."""
    import tracemalloc

    from dbo_trace.errors import UsageError

    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match=match):
            archive.read_report_document(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_real_archive_reads_back(real, tmp_path):
    proc = run_cli("report", str(build(tmp_path / "a.tar.gz", real)))
    assert proc.returncode == 0 and proc.stdout.startswith("verdict: ")


def test_a_report_member_past_the_cap_is_refused_from_its_header(real, tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_REPORT_BYTES", 1 << 20)
    bomb = b" " * (2 << 20) + dict(real)[REPORT]  # valid JSON, 2 MiB of spaces first
    refused(build(tmp_path / "bomb.tar.gz", with_report(real, bomb)), "over the 1 MiB")


def test_many_members_before_the_report_stop_the_listing(real, tmp_path):
    empties = [(f"dbo-trace/empty-{i}", b"") for i in range(5000)]
    path = build(tmp_path / "many.tar.gz", [real[0], *empties, *real[1:]])
    assert refused(path, "first 16 members") <= 17  # of 5,000: the listing stopped


def test_a_huge_member_first_is_not_inflated_to_find_the_report(real, tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_BYTES_BEFORE_REPORT", 1 << 20)
    path = build(tmp_path / "big.tar.gz", [("dbo-trace/zeros", bytes(4 << 20)), *real])
    refused(path, "1 MiB")


def _special(kind):
    info = tarfile.TarInfo(REPORT)
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "dbo-trace/summary.md"
    elif kind == "device":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 5  # /dev/zero
    else:
        info.type = tarfile.FIFOTYPE
    return info


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "device", "fifo"])
def test_links_devices_and_fifos_are_refused_in_one_line(real, tmp_path, kind):
    entries = [e if e[0] != REPORT else _special(kind) for e in real]
    refused(build(tmp_path / f"{kind}.tar.gz", entries), "an archive holds only files")


def _set(doc, where, value):
    target = doc
    for key in where[:-1]:
        target = target[key]
    if value is KeyError:
        del target[where[-1]]
    else:
        target[where[-1]] = value


@pytest.mark.parametrize(
    "where,value,words",
    [
        (("verdict",), KeyError, "report: object missing required field `verdict`"),
        (("ranks", 0, "verdict", "label"), 7, "report.ranks[0].verdict.label: expected `str | null`, got `int`"),
        (("steps", 0, "step_us"), "12 ms", "report.steps[0].step_us: expected `float | null`, got `str`"),
        (("steps", 0, "gpu", "utilization"), "busy", "report.steps[0].gpu.utilization: expected `float | null`, got `str`"),
        (("ranks", 0, "comm_operations"), {"a": 1}, "report.ranks[0].comm_operations: expected `array`, got `object`"),
        (("ranks", 0, "comm_operations", 0, "reason"), "bogus", "report.ranks[0].comm_operations[0].reason: invalid enum"),
        (("ranks", 0, "time", "window_us"), None, "report.ranks[0].time.window_us: expected `float`, got `null`"),
        (("round_trips",), [], "report.round_trips: expected `object | null`, got `array`"),
        (("ranks", 0, "held_back_comm", "late_record_example"), None, "held_back_comm: late_record_example is missing"),
        (("ranks", 0, "steps", 0, "gpu", "utilization"), 10**400, "steps[0].gpu.utilization: number out of range"),
        (("ranks", 0, "steps", 0, "host", "launches"), 10**400, "report.ranks[0].steps[0].host.launches: expected `int` <="),
        (("ranks", 0, "phases"), [], "report.ranks[0].phases: expected `object`, got `array`"),
        (("warnings",), [["nested"]], "report.warnings[0]: expected `str`, got `array`"),
        (("verdict", "qualifier"), "no_such_finding", "report.verdict.qualifier: invalid enum value 'no_such_finding'"),
        (("ranks", 0, "verdict", "findings"), ["crowded", "x"], "report.ranks[0].verdict.findings[1]: invalid enum value 'x'"),
        (("steps", 0, "verdict", "label"), "fine", "report.steps[0].verdict.label: invalid enum value 'fine'"),
        (("gpu", "kernels"), -5, "report.gpu.kernels: expected `int` >= 0"),
        (("graphs", "steps_replayed"), -1, "report.graphs.steps_replayed: expected `int` >= 0"),
        (("ranks", 0, "steps", 0, "comm_ops"), -3, "report.ranks[0].steps[0].comm_ops: expected `int` >= 0"),
        (("ranks", 0, "steps", 0, "number"), 0, "report.ranks[0].steps[0].number: expected `int` >= 1"),
        (("ranks", 0, "comm_kernel_names", 0, "count"), -1, "report.ranks[0].comm_kernel_names[0].count: expected `int` >= 0"),
    ],
)
def test_a_damaged_document_is_named_in_one_line(real, tmp_path, where, value, words):
    doc = document(real)
    _set(doc, where, value)
    data = json.dumps(doc).encode()
    refused(build(tmp_path / "damaged.tar.gz", with_report(real, data)), "is damaged", words)


@pytest.mark.parametrize("version", [99, 2, "3", None])
def test_a_schema_version_this_dbo_trace_does_not_read_is_named(real, tmp_path, version):
    doc = document(real)
    doc["schema_version"] = version
    data = json.dumps(doc).encode()
    path = build(tmp_path / "version.tar.gz", with_report(real, data))
    refused(path, f"schema version {version!r}", "reads 3, 4, 5, 6, 7, 8, 9, 10 and 11")


def verdicts(doc):
    """Every verdict block of a document: the run's, its phases', its steps', each rank's and theirs."""
    for block in [doc, *doc["ranks"]]:
        yield block["verdict"]
        yield from (p["verdict"] for p in block["phases"].values())
        yield from (s["verdict"] for s in block["steps"])


def test_a_version_5_archive_still_reads(real, tmp_path):
    """Version 5 gave a reason as its text alone and no next step: an archive written then renders
    its reasons, without a next step; a version 6 document shaped so, or the other way round, is damage."""
    doc = document(real)
    assert all(v["next_step"]["text"] for v in verdicts(doc))
    _as_version_5(doc)
    damaged = build(tmp_path / "v6-damaged.tar.gz", with_report(real, json.dumps(doc).encode()))
    refused(damaged, "report.verdict: next_step is a key of version 6, missing in version 11")
    doc["schema_version"] = 5
    old = build(tmp_path / "v5.tar.gz", with_report(real, json.dumps(doc).encode()))
    shown = run_cli("report", str(old))
    assert shown.returncode == 0, shown.stderr
    assert "next step:" not in shown.stdout and doc["verdict"]["reasons"][0] in " ".join(shown.stdout.split())
    assert json.loads(run_cli("report", str(old), "--json").stdout) == doc
    doc["verdict"]["next_step"] = {"kind": "overlap_works", "text": "x"}
    refused(build(tmp_path / "v5-damaged.tar.gz", with_report(real, json.dumps(doc).encode())), "not of version 5")


def test_a_version_3_archive_still_reads(real, tmp_path):
    """Version 3 had a rank's microbatch and step sources twice, also in its attribution block: an
    archive written then renders as one of version 4 with the same values does (the extra keys ignored)."""
    doc = document(real)
    assert doc["schema_version"] == 11 and set(doc["ranks"][0]["attribution"]) == {"profile_all_threads"}
    _as_version_5(doc)  # versions 3 to 5: each reason's text alone, no next step
    for r in doc["ranks"]:
        del r["dbo_ledger"], r["comm_layers"], r["sm_evidence"]  # version 5's: versions 3 and 4 are compared without them
        for op in r["comm_operations"]:
            del op["layer"], op["role"]
    del doc["what_if"]
    doc["schema_version"] = 4
    new = build(tmp_path / "v4.tar.gz", with_report(real, json.dumps(doc).encode()))
    for r in doc["ranks"]:
        r["attribution"] = {"ubatch_source": r["microbatch_source"], "step_source": r["steps_source"], **r["attribution"]}
    doc["schema_version"] = 3
    old = build(tmp_path / "v3.tar.gz", with_report(real, json.dumps(doc).encode()))
    for flag in ([], ["--markdown"]):
        shown = [run_cli("report", str(path), *flag) for path in (old, new)]
        assert [p.returncode for p in shown] == [0, 0], shown[0].stderr
        assert shown[0].stdout == shown[1].stdout
    assert json.loads(run_cli("report", str(old), "--json").stdout) == doc  # its --json: the stored document


@pytest.mark.parametrize("depth,words", [(40, "unknown field `extra`"), (200_000, "not valid JSON")])
def test_deep_nesting_is_refused(real, tmp_path, depth, words):
    doc = document(real)
    data = json.dumps(doc).encode()
    data = data[:-1] + b', "extra": ' + b"[" * depth + b"]" * depth + b"}"
    refused(build(tmp_path / "deep.tar.gz", with_report(real, data)), words)


def test_a_lone_surrogate_is_refused(real, tmp_path):
    data = dict(real)[REPORT].replace(b'"dbo_trace_version": "', b'"dbo_trace_version": "\\ud800', 1)
    assert b"\\ud800" in data
    refused(build(tmp_path / "surrogate.tar.gz", with_report(real, data)), "not valid JSON")


def _paths(value, where=()):
    """Every place in a document, the first element of each list only (the others have its shape)."""
    yield where
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*where, k))
    elif isinstance(value, list) and value:
        yield from _paths(value[0], (*where, 0))


def test_every_field_damaged_in_every_way_is_refused_or_shown(real):
    """The document's types cover what the renderers read: for each place of a real document, removed
    or replaced by each wrong type, either decoding names a problem or every document renderer
    shows it without an exception (the terminal's, the slowest, with the four most different)."""
    base = document(real)
    shown = 0
    for where in list(_paths(base))[1:]:
        for value in (KeyError, None, "x", {}, 1, True, []):
            doc = copy.deepcopy(base)
            try:
                _set(doc, where, value)
            except (TypeError, IndexError):
                continue
            try:
                typed = msgspec.convert(doc, ReportDocument)  # what the archive's reader does
            except msgspec.ValidationError:
                continue
            names = ("markdown", "json", "terminal") if value in (KeyError, None, "x") or value == {} else ("markdown", "json")
            for name in names:
                RENDERERS[name].render_document(typed, RenderOptions(width=120))
            shown += 1
    assert shown > 100  # most of the document is free text and counts that any value renders


@pytest.mark.parametrize(
    "where,words",
    [
        ((), "report: object contains unknown field `extra`"),
        (("ranks", 0), "report.ranks[0]: object contains unknown field `extra`"),
        (("ranks", 0, "steps", 0, "gpu"), "report.ranks[0].steps[0].gpu: object contains unknown field `extra`"),
    ],
)
def test_an_unknown_key_is_named(real, tmp_path, where, words):
    """Every key a version writes is its document's (a new key bumps the version), so an unknown one
    is damage; kept, it would be dropped silently from the --json that shows the stored document."""
    doc = document(real)
    target = doc
    for key in where:
        target = target[key]
    target["extra"] = [1]
    refused(build(tmp_path / "unknown.tar.gz", with_report(real, json.dumps(doc).encode())), "is damaged", words)


_PAYS = {
    "measured": False, "hidden_per_step_us": None, "hidden_of": "comm", "handover_per_step_us": None, "startup_per_step_us": None,
    "yield_op_per_step_us": None, "yield_wait_per_step_us": None, "imbalance_per_step_us": None, "text": "t",
}  # fmt: skip


@pytest.mark.parametrize(
    "where,key,value,words",
    [
        ("ranks", "label", None, "report.ranks[0].verdict: label is null, as only a phase's may be"),
        ("steps", "per_rank", ["serial"], "report.steps[0].verdict: per_rank is a key of a phase's verdict only"),
    ],
)
def test_a_phase_verdicts_keys_are_a_phases_only(real, tmp_path, where, key, value, words):
    """A phase's verdict and the others' are one type (render/document/verdict.py): only a phase's may
    lack a label (per_rank, each rank's), and a phase's has no pays."""
    doc = document(real)
    doc[where][0]["verdict"][key] = value
    refused(build(tmp_path / "verdict.tar.gz", with_report(real, json.dumps(doc).encode())), "is damaged", words)


def test_a_phase_verdict_has_no_pays(real):
    """(The sample has no phase: the verdict is checked as a phase's would be.)"""
    from dbo_trace.render.document import VerdictBlock

    verdict = document(real)["verdict"] | {"pays": _PAYS}
    v = msgspec.json.decode(json.dumps(verdict).encode(), type=VerdictBlock)
    assert archive._verdict_problem(v, "report.phases['decode']", 9, phase=False) is None
    words = "report.phases['decode'].verdict: pays is a key of a run's or a rank's verdict, not of a phase's"
    assert archive._verdict_problem(v, "report.phases['decode']", 9, phase=True) == words


@pytest.mark.parametrize("where", ["extra", "warnings"])
def test_a_document_is_read_in_memory_bounded_by_its_types(real, tmp_path, where):
    """A million empty objects (3 MB of JSON, a few kB gzipped) where the types allow none, under an
    unknown key or as a list of strings: refused without building them (as Python dicts: 64 MB)."""
    data = million_objects(real, where)
    path = build(tmp_path / "objects.tar.gz", with_report(real, data))
    peak = refusal_peak(path, match="is damaged")
    assert peak < 4 * len(data), (peak, len(data))


def test_the_stored_bytes_are_what_json_shows(real, tmp_path):
    proc = run_cli("report", str(build(tmp_path / "a.tar.gz", real)), "--json")
    assert proc.returncode == 0 and proc.stdout.encode() == dict(real)[REPORT]


def test_the_terminal_shows_long_lists_of_an_archive_in_bounded_lines(real):
    """Each sentence costs the terminal ~0.1 ms to lay out, and an archive can hold millions of them
    in a few bytes each (reasons, notes, warnings, phases): the terminal shows the first of each list
    and says how many more there are, as for steps; the Markdown and the JSON list all."""
    doc = document(real)
    n = 20_000
    doc["verdict"]["reasons"] = [f"reason {i}" for i in range(n)]
    doc["warnings"] = [f"warning {i}" for i in range(n)]
    doc["ranks"][0]["notes"] = [f"note {i}" for i in range(n)]
    phase = {"steps": 1, "median_step_us": 1.0, "gpu_utilization": None, "host_idle_fraction": None,
             "comm_hidden_fraction": None, "replayed_kernel_fraction": None, "graph_launches": 0, "step_us": None,
             "host_causes": None, "verdict": {"label": None, "qualifier": None, "headline": None, "findings": [],
                                              "reasons": [], "per_rank": ["overlapped"]}}  # fmt: skip
    doc["phases"] = {f"phase {i}": phase for i in range(n)}
    typed = msgspec.convert(doc, ReportDocument)
    text = RENDERERS["terminal"].render_document(typed, RenderOptions(width=100))
    lines = text.splitlines()
    assert len(lines) < 600, len(lines)
    assert "reason 0" in text and "note 0" in text and "phase 0" in text
    assert "reason 19999" not in text and "phase 19999" not in text and "warning 0" not in text  # the rank's notes first
    assert "  ... 19950 more (--json or --markdown lists all)" in lines  # the reasons
    assert "  ... 39950 more notes (--json or --markdown lists all)" in lines  # the rank's, then the warnings
    assert "  ... 19950 more phases (--json or --markdown lists all)" in lines
    markdown = RENDERERS["markdown"].render_document(typed, RenderOptions())
    assert "reason 19999" in markdown and "warning 19999" in markdown and "phase 19999" in markdown


@pytest.mark.parametrize(
    "version", ["A" * 100_000, list(range(50_000)), "digits"], ids=["long string", "long list", "huge number"]
)
def test_a_huge_schema_version_is_named_in_a_short_line(real, tmp_path, version):
    doc = document(real)
    doc["schema_version"] = None
    data = json.dumps(doc).encode()
    shown = b"9" * 5000 if version == "digits" else json.dumps(version).encode()
    data = data.replace(b'"schema_version": null', b'"schema_version": ' + shown)
    path = build(tmp_path / "version.tar.gz", with_report(real, data))
    refused(path, "schema")  # `schema version 'AAA...` or `report.schema_version: integer value out of range`
    assert len(run_cli("report", str(path)).stderr) < 400


@pytest.mark.parametrize("where", ["qualifier", "key"])
def test_a_huge_bad_value_is_named_in_a_short_line(real, tmp_path, where):
    """msgspec's message quotes the value (an unknown enum value, an unknown key): cut, the place kept."""
    doc = document(real)
    if where == "qualifier":
        doc["ranks"][0]["verdict"]["qualifier"] = "A" * 100_000
    else:
        doc["ranks"][0]["A" * 100_000] = 1
    path = build(tmp_path / "huge.tar.gz", with_report(real, json.dumps(doc).encode()))
    refused(path, "is damaged", "report.ranks[0]")
    assert len(run_cli("report", str(path)).stderr) < 400


@pytest.mark.parametrize("version,keys,words", [
    (4, ("ubatch_source",), "report.ranks[0].attribution: ubatch_source is a key of version 3"),
    (3, ("step_source",), "report.ranks[0].attribution: ubatch_source is missing (version 3 has it)"),
])  # fmt: skip
def test_keys_of_the_other_version_are_named(real, tmp_path, version, keys, words):
    """Version 3 and 4 differ in two keys of a rank's attribution block: a document with one
    version's number and the other's keys was written by neither."""
    doc = _without_version_5(document(real))
    doc["schema_version"] = version
    for r in doc["ranks"]:
        r["attribution"] = {**{k: r["microbatch_source"] for k in keys}, **r["attribution"]}
    refused(build(tmp_path / "mixed.tar.gz", with_report(real, json.dumps(doc).encode())), "is damaged", words)


def _as_version_10(doc):
    """The document as version 10 wrote it: the roles' GpuSharing words flat (shared_from, mps_daemon),
    no sharing and no missing roles."""
    roles = doc.get("roles")
    if roles is not None:
        sharing = roles.pop("sharing")
        del roles["missing"]
        roles["shared_from"] = None if sharing is None else sharing["shared_from"]
        roles["mps_daemon"] = None if sharing is None else sharing["mps_daemon"]
    return doc


def _as_version_9(doc):
    """The document as version 9 wrote it: no clocks.lag_median_us, incomplete.activities, nor
    launch_delay's host_idle_us, last_us and window_us."""
    _as_version_10(doc)
    for rank in doc["ranks"]:
        (rank.get("clocks") or {}).pop("lag_median_us", None)
        (rank.get("incomplete") or {}).pop("activities", None)
        for key in ("host_idle_us", "last_us", "window_us"):
            (rank.get("launch_delay") or {}).pop(key, None)
    return doc


def _as_version_8(doc):
    """The document as version 8 wrote it: no pipeline, overlap or prediction, no overlapped share,
    no contention.kernels_us."""
    _as_version_9(doc)
    for key in ("overlap", "pipeline", "dbo_what_if"):
        doc.pop(key, None)
    for rank in doc["ranks"]:
        (rank.get("contention") or {}).pop("kernels_us", None)
    for block in [doc, *doc["ranks"]]:
        for key in ("overlapped_share", "beside_us"):
            (block.get("disaggregated") or {}).pop(key, None)
    return doc


def _as_version_7(doc):
    """The document as version 7 wrote it: no pays, the words version 8 added as before, no exposed shares."""
    _as_version_8(doc)
    _without_version_8_shares(doc)
    for key in ("basis", "unprofiled_itl_ms", "below", "tpot_prefills"):
        doc.get("profiler", {}).pop(key, None)
    for block in [doc, *doc["ranks"]]:
        for key in ("host_lag_median_us", "host_lag_total_us", "lag_hidden_us", "lag_op"):
            (block.get("disaggregated") or {}).pop(key, None)
    for verdict in verdicts(doc):
        verdict.pop("pays", None)
        if verdict["label"] == "single-batch":
            verdict["label"] = "not-overlapped"
        verdict["findings"] = [f for f in verdict["findings"] if f != "exposed_comm"]
        if verdict["qualifier"] == "exposed_comm":
            verdict["qualifier"] = verdict["findings"][0] if verdict["findings"] else None
        if verdict.get("next_step") and verdict["next_step"]["kind"] == "measure_pays":
            verdict["next_step"]["kind"] = "dbo_cannot_pay"
    return doc


def _without_version_8_shares(doc):
    """Without version 8's exposed shares of the comm operations and layers."""
    for r in doc["ranks"]:
        for op in r["comm_operations"]:
            op.pop("exposed_fraction", None)
        for row in r.get("comm_layers") or []:
            row.pop("exposed_fraction", None)
    return doc


def _as_version_5(doc):
    """The document's verdicts as version 5 wrote them: each reason its text alone, no next step."""
    _as_version_7(doc)
    for verdict in verdicts(doc):
        del verdict["next_step"]
        verdict["reasons"] = [r["text"] for r in verdict["reasons"]]
    return doc


def _without_version_5(doc):
    """The document as version 4 wrote it: without the DBO ledger's keys."""
    _as_version_5(doc)
    del doc["what_if"]
    for r in doc["ranks"]:
        del r["dbo_ledger"], r["comm_layers"], r["sm_evidence"]
        for op in r["comm_operations"]:
            del op["layer"], op["role"]
    return doc


@pytest.mark.parametrize("version,drop,words", [
    (4, None, "report: what_if is a key of version 5, not of version 4"),
    (5, "what_if", "report: what_if is a key of version 5, missing in version 5"),
    (5, "dbo_ledger", "report.ranks[0]: dbo_ledger is missing (version 5 has it)"),
])  # fmt: skip
def test_the_ledger_keys_belong_to_version_5(real, tmp_path, version, drop, words):
    doc = _as_version_5(document(real))
    doc["schema_version"] = version
    if drop == "what_if":
        del doc["what_if"]
    elif drop:
        for r in doc["ranks"]:
            del r[drop]
    refused(build(tmp_path / "mixed.tar.gz", with_report(real, json.dumps(doc).encode())), "is damaged", words)


def test_a_huge_extended_header_is_refused_before_it_is_read(real, tmp_path):
    """A pax header's data is read into memory whole by tarfile, before any member is listed: 300 MB
    of it gzips to 0.4 MB. Refused from its size, before a byte of it is read (here 16 MiB)."""
    path = tmp_path / "pax.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=1) as tar:
        for k, (name, data) in enumerate(real):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if k == 0:
                info.pax_headers = {"comment": "A" * (16 << 20)}
            tar.addfile(info, io.BytesIO(data))
    refused(path, "header")
    peak = refusal_peak(path, match="header")
    assert peak < 4 << 20, peak
    assert archive.is_archive(path)  # so that `report` names the problem, not the trace reader


def test_a_pax_sparse_map_is_refused_before_it_is_read(real, tmp_path):
    """A pax header may declare its member a GNU sparse file (format 1.0), whose map tarfile reads
    number after number from the member's data, as many as the map's first line says, before the
    listing goes on: a trillion declared, "1" lines to the end (240 kB of gzip) took 27 s and 650 MB,
    then escaped as a ValueError (exit 3). Refused from the header alone."""
    path = tmp_path / "sparse.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=1) as tar:
        for k, (name, data) in enumerate(real):
            info = tarfile.TarInfo(name)
            if k == 0:
                info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name}
                data = b"1000000000000\n" + b"1\n" * (1 << 20)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    refused(path, "sparse")
    assert refusal_peak(path) < 32 << 20  # refused from its header: reading the map took 650 MB


@pytest.mark.parametrize("where", ["schema", "schema_version"])
def test_the_head_is_read_in_memory_bounded_by_its_types(real, tmp_path, where):
    """The schema and its version are read before the document's types: as a string and a scalar,
    so that a million empty objects in their place are refused as met, not built."""
    data = million_objects(real, where)
    path = build(tmp_path / "head.tar.gz", with_report(real, data))
    refused(path, "not a dbo-trace report", f"report.{where}: expected")
    peak = refusal_peak(path)
    assert peak < 4 * len(data), (peak, len(data))


# Issue 38: a member held twice. tar -x (and every other reader) gives its last copy, this reader
# had shown the first: the archive is refused, naming the member, wherever the copies are.
@pytest.mark.parametrize(
    "second",
    [REPORT, f"./{REPORT}", f"dbo-trace//report.json", "dbo-trace/summary.md"],
    ids=["report", "report-dot", "report-slashes", "summary"],
)
def test_a_member_held_twice_is_refused_naming_it(real, tmp_path, second):
    doc = document(real)
    doc["ranks"] = []
    other = json.dumps(doc).encode()  # a valid report, another one
    path = build(tmp_path / "twice.tar.gz", [*real, (second, other)])
    name = "dbo-trace/summary.md" if "summary" in second else REPORT
    refused(path, f"'{name}' twice")


def test_a_member_held_twice_before_the_report_is_refused(real, tmp_path):
    first = real[0]
    path = build(tmp_path / "twice.tar.gz", [first, first, *real[1:]])
    refused(path, f"'{first[0]}' twice")


def test_members_after_the_report_are_bounded(real, tmp_path, monkeypatch):
    empties = [(f"dbo-trace/empty-{i}", b"") for i in range(5000)]
    assert refused(build(tmp_path / "many.tar.gz", [*real, *empties]), "more than 64 members") <= 66  # of 5,000
    monkeypatch.setattr(archive, "MAX_LISTING_BYTES", 1 << 20)
    refused(build(tmp_path / "big.tar.gz", [*real, ("dbo-trace/zeros", bytes(4 << 20))]), "past 1 MiB")


def test_a_version_6_archive_still_reads(real, tmp_path):
    """Version 7 added words and a key version 6 never wrote (docs/report-schema.md): an archive of
    version 6, which has none of them, reads and renders as written."""
    doc = _as_version_7(document(real))
    doc["schema_version"] = 6
    old = build(tmp_path / "v6.tar.gz", with_report(real, json.dumps(doc).encode()))
    shown = run_cli("report", str(old), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == doc


@pytest.fixture(scope="module")
def afd_pair(tmp_path_factory):
    """The members of samples/afd-pair-graphs-dbo's archive: version 7's late_us and an FFN server."""
    out = tmp_path_factory.mktemp("afd") / "afd.tar.gz"
    assert run_cli("archive", str(SAMPLES / "afd-pair-graphs-dbo"), "-o", str(out)).returncode == 0
    with tarfile.open(out) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def test_a_version_6_document_with_version_7_content_is_damage(afd_pair, tmp_path):
    """Version 6 never wrote the FFN server's next step or the round trip's late receive: a document
    numbered 6 that has them was written by neither, and is refused naming the first."""
    doc = _as_version_7(document(afd_pair))
    assert doc["ranks"][1]["verdict"]["next_step"]["kind"] == "ffn_server"
    doc["schema_version"] = 6
    refused(build(tmp_path / "a.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "ffn_server is a word of version 7, not of version 6")  # fmt: skip
    for r in [doc, *doc["ranks"]]:
        for v in [r["verdict"], *(s["verdict"] for s in r["steps"]), *(p["verdict"] for p in r["phases"].values())]:
            if v.get("next_step") and v["next_step"]["kind"] == "ffn_server":
                v["next_step"]["kind"] = "one_microbatch"
    refused(build(tmp_path / "b.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "disaggregated.parts: late_us is a key of version 7, not of version 6")  # fmt: skip


def test_a_version_7_archive_still_reads_and_version_8_words_in_it_are_damage(real, tmp_path):
    """Version 8 added the verdict's pays, the label single-batch, the finding exposed_comm and the next
    step measure_pays, and dropped dbo_cannot_pay: a version 7 archive reads as written; one numbered 7
    that holds pays was written by neither, nor one numbered 8 that holds dbo_cannot_pay."""
    doc = document(real)
    assert doc["schema_version"] == 11 and "pays" in doc["verdict"]
    _as_version_8(doc)
    doc["schema_version"] = 7
    refused(build(tmp_path / "a.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "report.verdict: pays is a key of version 8, not of version 7")  # fmt: skip
    _as_version_7(doc)
    old = build(tmp_path / "v7.tar.gz", with_report(real, json.dumps(doc).encode()))
    shown = run_cli("report", str(old), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == doc
    doc["schema_version"] = 8
    doc["verdict"]["next_step"]["kind"] = "dbo_cannot_pay"
    refused(build(tmp_path / "b.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "dbo_cannot_pay is a word before version 8")  # fmt: skip


def test_version_8_exposed_shares_belong_to_version_8(real, tmp_path):
    """Version 8 added the comm operations' exposed shares: one numbered 7 that holds them, or one
    numbered 8 that lacks them, was written by neither (a version 7 archive reads: the test above)."""
    doc = _as_version_7(document(real))
    doc["ranks"][0]["comm_operations"][0]["exposed_fraction"] = 0.5
    doc["schema_version"] = 7
    refused(build(tmp_path / "a.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "exposed_fraction is a key of version 8, not of version 7")  # fmt: skip
    doc = _without_version_8_shares(_as_version_8(document(real)))
    doc["schema_version"] = 8
    refused(build(tmp_path / "b.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "exposed_fraction is a key of version 8, missing in version 8")  # fmt: skip


def test_a_comm_operations_layer_and_role_belong_to_version_5(real, tmp_path):
    """Version 5 added a comm operation's layer and role (the analysis's row, held as it is: the
    strict decoding tells their absence from null): a version 3 row that holds one, or a row of the
    version written that lacks one, was written by neither."""
    from pathlib import Path

    old = json.loads((Path(__file__).parent.parent / "data" / "report-v3-two-gpu-overlap.json").read_text())
    assert old["schema_version"] == 3 and "layer" not in old["ranks"][0]["comm_operations"][0]
    old["ranks"][0]["comm_operations"][0]["layer"] = None
    refused(build(tmp_path / "a.tar.gz", with_report(real, json.dumps(old).encode())),
            "is damaged", "comm_operations[0]: layer is a key of version 5, not of version 3")  # fmt: skip
    doc = document(real)
    assert doc["ranks"][0]["comm_operations"], "the sample has comm operations"
    del doc["ranks"][0]["comm_operations"][0]["role"]
    refused(build(tmp_path / "b.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "comm_operations[0]: role is a key of version 5, missing in version")  # fmt: skip


def test_version_10_keys_belong_to_version_10(real, tmp_path):
    """Version 10 added a rank's clocks.lag_median_us, incomplete.activities and launch_delay's
    host_idle_us, last_us and window_us (the analysis's figures held as they are): a version 9 archive reads, shown as stored; one
    numbered 9 that holds one, or one numbered 10 that lacks it, was written by neither."""
    doc = document(real)
    assert doc["schema_version"] == 11 and "lag_median_us" in doc["ranks"][0]["clocks"]
    old = _as_version_9(document(real))
    old["schema_version"] = 9
    data = json.dumps(old, indent=2).encode()
    shown = run_cli("report", str(build(tmp_path / "v9.tar.gz", with_report(real, data))), "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.encode() == data  # as stored: no null for the key it lacks
    assert run_cli("report", str(build(tmp_path / "v9t.tar.gz", with_report(real, data)))).returncode == 0
    doc["schema_version"] = 9
    refused(build(tmp_path / "a.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "clocks: lag_median_us is a key of version 10, not of version 9")  # fmt: skip
    doc = document(real)
    del doc["ranks"][0]["clocks"]["lag_median_us"]
    refused(build(tmp_path / "b.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "clocks: lag_median_us is a key of version 10, missing in version 11")  # fmt: skip
    doc = _as_version_9(document(real))
    doc["ranks"][0]["launch_delay"]["window_us"] = 1.0
    doc["schema_version"] = 9
    refused(build(tmp_path / "d.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "launch_delay: window_us is a key of version 10, not of version 9")  # fmt: skip
    doc = document(real)
    doc["ranks"][0]["contention"].pop("kernels_us")
    refused(build(tmp_path / "c.tar.gz", with_report(real, json.dumps(doc).encode())),
            "is damaged", "contention: kernels_us is a key of version 9, missing in version 11")  # fmt: skip


def test_version_9_pipeline_belongs_to_version_9(afd_pair, tmp_path):
    """Version 9 added an AFD arm's pipeline, its overlap and the overlapped share: a version 8 archive
    reads as written; one numbered 8 that holds them, or one numbered 9 that lacks the share, was
    written by neither."""
    doc = document(afd_pair)
    assert doc["schema_version"] == 11 and {"overlap", "pipeline"} <= set(doc)
    old = _as_version_8(document(afd_pair))
    old["schema_version"] = 8
    shown = run_cli("report", str(build(tmp_path / "v8.tar.gz", with_report(afd_pair, json.dumps(old).encode()))), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == old
    doc["schema_version"] = 8
    refused(build(tmp_path / "a.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "report: overlap is a key of version 9, not of version 8")  # fmt: skip
    doc = _as_version_9(document(afd_pair))
    doc["schema_version"] = 9
    del doc["disaggregated"]["overlapped_share"]
    refused(build(tmp_path / "b.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "overlapped_share is a key of version 9, missing in version 9")  # fmt: skip


def test_version_11_roles_hold_the_analysis_roles(afd_pair, tmp_path):
    """Version 11's roles block is the analysis's RolesInfo: its GpuSharing in `sharing` (the flat
    shared_from and mps_daemon of versions 3 to 10 gone) and the missing roles. A version 10 archive
    reads, shown as stored, and renders as it did (its flat mps_daemon still says MPS answered); one
    numbered 10 that holds sharing, or one numbered 11 with the flat words or without sharing, was
    written by neither."""
    doc = document(afd_pair)
    assert doc["schema_version"] == 11 and doc["roles"]["sharing"]["mps_daemon"] == "answered"
    assert "mps_daemon" not in doc["roles"] and doc["roles"]["missing"] == []
    old = _as_version_10(document(afd_pair))
    old["schema_version"] = 10
    data = json.dumps(old, indent=1).encode()
    shown = run_cli("report", str(build(tmp_path / "v10.tar.gz", with_report(afd_pair, data))), "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.encode() == data
    as_stored = run_cli("report", str(build(tmp_path / "v10t.tar.gz", with_report(afd_pair, data))))
    now = run_cli("report", str(build(tmp_path / "v11t.tar.gz", afd_pair)))
    assert as_stored.returncode == now.returncode == 0, as_stored.stderr
    assert "GPU sharing: one GPU, MPS answered" in " ".join(now.stdout.split())
    assert as_stored.stdout == now.stdout
    doc["schema_version"] = 10
    refused(build(tmp_path / "a.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "report.roles: missing is a key of version 11, not of version 10")  # fmt: skip
    doc = document(afd_pair)
    doc["roles"]["mps_daemon"] = "answered"
    refused(build(tmp_path / "b.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "report.roles: mps_daemon is a key before version 11")  # fmt: skip
    doc = document(afd_pair)
    del doc["roles"]["sharing"]
    refused(build(tmp_path / "c.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "report.roles: sharing is a key of version 11, missing in version 11")  # fmt: skip
    doc = document(afd_pair)
    doc["roles"]["sharing"]["verified"] = True
    refused(build(tmp_path / "d.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
            "is damaged", "unknown field `verified`")  # fmt: skip
    for path, where in ((("sharing", "mps_claimed"), "roles.sharing.mps_claimed"), (("pair",), "roles.pair")):
        doc = document(afd_pair)
        block = doc["roles"]
        for key in path[:-1]:
            block = block[key]
        del block[path[-1]]
        refused(build(tmp_path / "e.tar.gz", with_report(afd_pair, json.dumps(doc).encode())),
                "is damaged", f"report.{where} is missing (version 11 has it)")  # fmt: skip
