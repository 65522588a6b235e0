"""One reader per file format (issue 60): manifest.json is read by the bundle module (bundle.py: the
typed Manifest, the archive's redacted copy, the demo's amendment) and by the recording side that
writes it; sweep.json by sweep_folder.py alone, bounded, whose reader the recorder's --resume uses
too; compare decodes each arm's manifest once, in the analysis's discovery."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

PACKAGE = ROOT / "dbo_trace"
MODULES = sorted(PACKAGE.rglob("*.py"))
SWEEP = SAMPLES / "afd-sweep"


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _reads_a_raw_manifest(source: str) -> list[int]:
    """Lines that call (or import) read_manifest, or read `.raw` of anything (the typed Manifest's raw
    dict was the way round the typed fields)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("raw", "read_manifest"):
            found.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "read_manifest":
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name == "read_manifest" for a in node.names):
            found.append(node.lineno)
    return sorted(set(found))


def _owns_the_manifest(path: Path) -> bool:
    rel = _relative(path)
    return rel == "bundle.py" or rel.startswith("record/")


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_only_the_bundle_module_and_the_recorder_read_a_manifest_raw(path):
    if _owns_the_manifest(path):
        return
    lines = _reads_a_raw_manifest(path.read_text())
    assert not lines, (
        f"dbo_trace/{_relative(path)} reads a manifest as a raw dict (lines {lines}): take the typed "
        "bundle.Manifest's fields (add one there), bundle.archived_manifest or bundle.amend_manifest"
    )


def test_the_raw_manifest_finder_finds_each_form():
    source = (
        "from dbo_trace.bundle import read_manifest\n"
        "def f(fmt, m, b):\n"
        "    x = fmt.read_manifest(b)\n"
        "    return m.raw.get('gpus'), read_manifest(b)\n"
    )
    assert _reads_a_raw_manifest(source) == [1, 3, 4]
    assert _reads_a_raw_manifest("def f(m):\n    return m.status, m.gpu_name\n") == []


_READS = {"loads", "load", "read_bytes", "read_text", "open", "read_bounded"}


def _names_sweep_json(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "SWEEP_NAME") or (isinstance(n, ast.Constant) and n.value == "sweep.json")
        for n in ast.walk(node)
    )


def _reads_sweep_json(source: str, named_only: bool = False) -> list[int]:
    """Lines that read a file named by SWEEP_NAME or "sweep.json" (json.loads of it, read_bytes,
    read_text, open, read_bounded), and, unless named_only, that decode JSON at all."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        decodes = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "json"
        if decodes and name in ("loads", "load") and not named_only:
            found.append(node.lineno)
        elif name in _READS and _names_sweep_json(node):
            found.append(node.lineno)
    return sorted(set(found))


def test_the_recorder_reads_sweep_json_through_the_sweep_reader():
    """record/sweep.py decodes no JSON of its own (its read_state takes sweep_folder.read_sweep_document)."""
    source = (PACKAGE / "record" / "sweep.py").read_text()
    assert not _reads_sweep_json(source), _reads_sweep_json(source)
    assert "read_sweep_document" in source


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_only_the_sweep_reader_reads_sweep_json(path):
    if _relative(path) == "sweep_folder.py":
        return
    lines = _reads_sweep_json(path.read_text(), named_only=True)
    assert not lines, f"dbo_trace/{_relative(path)} reads sweep.json itself (lines {lines}): use dbo_trace/sweep_folder.py"


def test_the_sweep_json_finder_finds_a_read():
    source = (
        "import json\n"
        "def f(out, SWEEP_NAME):\n"
        "    a = json.loads((out / SWEEP_NAME).read_bytes()[: 16 << 20])\n"
        "    b = (out / 'sweep.json').read_text()\n"
        "    return a, b, (out / 'other.json').read_text()\n"
    )
    assert _reads_sweep_json(source) == [3, 4]
    assert _reads_sweep_json("import json\ndef f(b):\n    return json.loads(b)\n", named_only=True) == []


# ---- the bound -----------------------------------------------------------------------------------


def _oversized_sweep(folder: Path, bound: int) -> Path:
    """The sample sweep's sweep.json, valid JSON still, padded with spaces to one byte over the bound."""
    data = (SWEEP / "sweep.json").read_bytes().rstrip()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sweep.json"
    path.write_bytes(data + b" " * (bound + 1 - len(data)))
    assert path.stat().st_size == bound + 1
    return path


@pytest.fixture
def reads(monkeypatch):
    """The sizes os.read was asked for (read_bounded's one read)."""
    import os

    asked: list[int] = []
    real = os.read

    def read(fd, n):
        asked.append(n)
        return real(fd, n)

    monkeypatch.setattr(os, "read", read)
    return asked


def _one_line(exc: BaseException, path: Path) -> str:
    said = str(exc)
    assert "\n" not in said and said.startswith(str(path)), said
    return said


def _refused_in_one_line(path, *readers):
    """sweep.json at path refused in one line naming it: by each of the sweep view's readers, as
    more than the bound, and by `sweep --resume`'s."""
    from dbo_trace.record.sweep import SweepRefused, read_state
    from dbo_trace.sweep_folder import SweepError

    for read in readers:
        with pytest.raises(SweepError) as caught:
            read(path.parent)
        assert "more than the 4 MiB" in _one_line(caught.value, path)
    with pytest.raises(SweepRefused) as refused:
        read_state(path.parent)
    _one_line(refused.value, path)


def test_an_oversized_sweep_json_is_refused_by_both_readers_unread(tmp_path, reads):
    from dbo_trace.sweep_folder import MAX_SWEEP_BYTES, read_spec, read_sweep_document

    path = _oversized_sweep(tmp_path / "out", MAX_SWEEP_BYTES)
    _refused_in_one_line(path, read_spec, read_sweep_document)
    assert all(n <= MAX_SWEEP_BYTES + 1 for n in reads), reads  # its size refused it before any read


def test_a_sweep_json_that_grows_past_its_size_is_read_one_byte_over_the_bound(tmp_path, monkeypatch, reads):
    """Where the size said is not the size read (a file still being written), the one read asks for
    one byte over the bound and refuses what it got; nothing reads the whole file."""
    import os

    from dbo_trace.sweep_folder import MAX_SWEEP_BYTES, read_sweep_document

    path = _oversized_sweep(tmp_path / "out", 2 * MAX_SWEEP_BYTES)
    real = os.fstat

    def fstat(fd):
        st = real(fd)
        return os.stat_result((st.st_mode, *st[1:6], 100, *st[7:]))  # st_size: 100 bytes, as when opened

    monkeypatch.setattr(os, "fstat", fstat)
    _refused_in_one_line(path, read_sweep_document)
    assert reads and all(n == MAX_SWEEP_BYTES + 1 for n in reads), reads


def test_the_recorder_and_the_report_read_one_sweep_json_alike(tmp_path):
    """The sample sweep's sweep.json: the recorder's state is the document the sweep reader decodes, and
    JSON that is not an object is refused by the recorder as before (not a sweep's document)."""
    from dbo_trace.record.sweep import SweepRefused, read_state
    from dbo_trace.sweep_folder import read_spec, read_sweep_document

    assert read_state(SWEEP) == read_sweep_document(SWEEP) == json.loads((SWEEP / "sweep.json").read_text())
    assert [a.name for a in read_spec(SWEEP).arms] == [a["name"] for a in read_sweep_document(SWEEP)["arms"]]
    (tmp_path / "sweep.json").write_text("[1, 2]")
    with pytest.raises(SweepRefused, match="not a dbo-trace-sweep version 1 document; choose another --out"):
        read_state(tmp_path)
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(SweepRefused, match="not readable as JSON; not a sweep folder this dbo-trace can resume"):
        read_state(tmp_path)


# ---- compare ---------------------------------------------------------------------------------------


def test_compare_decodes_each_arm_s_manifest_once(monkeypatch, capsys):
    """compare takes each arm's manifest from its analysis's discovery, not from a second read."""
    from dbo_trace import bundle
    from dbo_trace.commands.compare import CompareRequest, run

    arms = (SAMPLES / "overlap", SAMPLES / "serial")
    decoded: list[Path] = []
    real = bundle.read_manifest

    def read_manifest(path: Path):
        decoded.append(Path(path))
        return real(path)

    monkeypatch.setattr(bundle, "read_manifest", read_manifest)
    request = CompareRequest(arms=arms, format_given="json").checked()
    assert isinstance(request, CompareRequest)
    run(request)
    document = json.loads(capsys.readouterr().out)
    assert document  # the comparison was written
    for arm in arms:
        assert decoded.count(arm) == 1, decoded
