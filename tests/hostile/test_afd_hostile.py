"""An AFD pair's strings from input are inert in every output (docs/outputs.md, "Strings from input").

samples/afd-pair-graphs-nomps (attention and FFN traces, its manifest's roles, GPU sharing and timed
repeats) rewritten so that every kernel, CPU op and thread name ends with every hostile shape of
tests/hostile/test_inert.py and a few more, two names (the FFN's top compute kernel, the attention's most
expensive CPU op) 10,000 characters longer, and the manifest's free text (the repeats' tool, its
GPU-sharing check's answer, its settings' cudagraph mode, the pystacks roles) hostile too. The
analysis still sees the same pair: the names it matches exactly (vLLM's step annotations, the
yield op) are kept. Through the new surfaces: the roles and profiler-overhead lines, the verdict's
reasons and next step, the pair's timeline (picture, page, Perfetto) and `compare` of two AFD arms
(samples/afd-graphs-dbo rewritten the same way). Then manifests whose fields have the wrong type.
"""

import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
from conftest import SAMPLES, run_cli
from test_inert import HOSTILE, assert_no_raw_controls, check_markdown
from traces import read_trace, write_trace

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render.layout import Column, cells, stacked, table, wrap
from dbo_trace.render import RENDERERS, RenderOptions, as_bytes

EXTRA = " ](javascript:alert(1)) <script>alert(1)</script> $\\frac{a}{b}$ \x00\x01\x1f\r\n| x | y |\n" + "漢字カーネル名前" * 6 + " 🔥🔥 e\u0301"  # wide characters: two columns each; a combining accent
NAME_TAIL = " " + HOSTILE + EXTRA
LONG = "W" * 10_000
WIDE = "漢字カーネル名前" * 8  # 64 characters, 128 columns
KEPT = re.compile(r"execute_|vllm::manual_dbo_yield$")  # what the analysis matches by the whole name
LONG_NAMES = ("fused_moe_kernel", "aten::item")  # the FFN's top compute kernel, an expensive call


def _hostile(name: str) -> str:
    if name in LONG_NAMES:  # wide characters first, where a cut name still shows them
        return name + " " + WIDE + NAME_TAIL + LONG
    return name + NAME_TAIL


def _rewrite_trace(path):
    doc = read_trace(path)
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") in ("thread_name", "process_name") and isinstance(e.get("args"), dict):
            e["args"]["name"] = _hostile(str(e["args"].get("name")))
        elif e.get("cat") in ("kernel", "cpu_op", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "python_function"):
            if isinstance(e.get("name"), str) and not KEPT.match(e["name"]):
                e["name"] = _hostile(e["name"])
    write_trace(doc, path)


def _cudagraph_config(config: str) -> str:
    parsed = json.loads(config)
    parsed["cudagraph_mode"] = parsed.get("cudagraph_mode", "FULL") + NAME_TAIL + LONG
    return json.dumps(parsed)


def _rewrite_manifest(folder):
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    for r in m.get("repeats") or []:
        r["tool"] = (r.get("tool") or "") + NAME_TAIL + LONG
    sharing = m.setdefault("gpu_sharing", {})
    sharing["mps_check"] = {"answer": NAME_TAIL, "daemon": NAME_TAIL, "pipe_directory": NAME_TAIL}
    for p in m.get("pystacks") or []:
        p["role"] = str(p.get("role")) + NAME_TAIL
    for settings in [m.get("settings"), *((r or {}).get("settings") for r in (m.get("roles") or {}).values())]:
        if isinstance(settings, dict) and "compilation-config" in settings.get("cudagraph", {}):
            settings["cudagraph"]["compilation-config"] = _cudagraph_config(settings["cudagraph"]["compilation-config"])
    path.write_text(json.dumps(m))


def _hostile_copy(tmp_path_factory, sample, name=None):
    folder = tmp_path_factory.mktemp("afd-hostile") / (name or sample)
    shutil.copytree(SAMPLES / sample, folder)
    for trace in folder.rglob("*.json.gz"):
        _rewrite_trace(trace)
    _rewrite_manifest(folder)
    return folder


@pytest.fixture(scope="module")
def pair_bundle(tmp_path_factory):
    return _hostile_copy(tmp_path_factory, "afd-pair-graphs-nomps")


@pytest.fixture(scope="module")
def pair_report(pair_bundle):
    report = analyze_paths([pair_bundle], Options())
    doc = json.loads(RENDERERS["json"].render(report, RenderOptions()))
    assert doc["roles"] is not None and len(doc["ranks"]) == 2  # still the pair, read with its roles
    assert doc["disaggregated"]["round_trips"] > 0
    assert any("aten::item " + WIDE[:8] in r["text"] for r in doc["verdict"]["reasons"])  # an expensive call, its name cut
    assert doc["profiler"]["timed_by"].startswith("vllm bench serve " + HOSTILE[:20])
    return report


def test_the_terminal_keeps_an_afd_pair_inert_and_at_80_columns(pair_report):
    """The roles, profiler and reasons lines wrap at the width asked for; nothing acts."""
    for colour in (False, True):
        for width in (80, 400):
            text = RENDERERS["terminal"].render(pair_report, RenderOptions(color=colour, width=width))
            assert_no_raw_controls(text, colour_codes=colour)
            assert "\x1b]" not in text and "\x1b[2J" not in text
            if not colour:
                assert max(map(cells, text.splitlines())) <= width  # columns: a wide character takes two
    plain = RENDERERS["terminal"].render(pair_report, RenderOptions(width=80))
    assert "roles: rank 0 attention" in plain and "profiler overhead" in plain
    assert "\\x1b]52;c;ZXZpbA==\\x07" in plain  # the escape shown, visibly
    wide = RENDERERS["terminal"].render(pair_report, RenderOptions(width=400))
    assert "[link=http://evil.example/]x[/link]" in wide  # markup printed as written


def test_the_markdown_of_an_afd_pair_escapes_every_string(pair_report):
    text = RENDERERS["markdown"].render(pair_report, RenderOptions())
    check_markdown(text)
    assert "roles: rank 0 attention" in text and "profiler overhead" in text


def test_the_pair_page_shows_its_names_inert(pair_report):
    """The page's script shows the timeline's kernel names (hover), lanes and titles as text:
    what JSON.parse gives it back holds no control or bidi character either."""
    source = RENDERERS["html"].render(pair_report, RenderOptions())
    assert_no_raw_controls(source)
    assert "<img src=x" not in source and "<!--<script>" not in source and "<script>alert" not in source
    opening = '<script id="data" type="application/json">'
    data = source[source.index(opening) + len(opening) :]
    data = json.loads(data[: data.index("</script>")])
    views = data["views"]
    assert any("FFN GPU (same clock)" in v["lanes"] for v in views)  # the pair's lanes
    shown = [s for v in views for s in (v["title"], v["label"], *v["lanes"], *v["names"])]
    assert any("\\x1b]52;c;ZXZpbA==\\x07" in s for s in shown)  # the names are there, escaped
    for s in shown:
        assert_no_raw_controls(s)


def test_the_pair_pictures_draw_hostile_names_literally(pair_report):
    png = as_bytes(RENDERERS["png"].render(pair_report, RenderOptions()))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = as_bytes(RENDERERS["svg"].render(pair_report, RenderOptions())).decode()
    assert_no_raw_controls(svg.replace("\t", " "))
    ET.fromstring(svg)
    assert "FFN GPU (same clock)" in svg


def test_the_pair_perfetto_trace_keeps_the_names_as_data(pair_report, tmp_path):
    """Perfetto holds the data as it is (a viewer shows it as text): valid protobuf strings, the
    names exactly, the FFN's round-trip tracks beside them."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace.FromString(as_bytes(RENDERERS["perfetto"].render(pair_report, RenderOptions())))
    names = {p.track_event.name for p in trace.packet if p.HasField("track_event")}
    tracks = {p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    assert "fused_moe_kernel " + WIDE + NAME_TAIL + LONG in names
    assert any(t.startswith("round trips") for t in tracks)


# A folder's name is in the report too (its samples file titles a host-stacks table): every
# character but `/` and NUL.
FOLDER = "afd <img src=x onerror=alert(1)> [a](javascript:alert(1)) @octocat http:x $x^$ \x1b]0;owned\x07 \u202e |\n# h"


@pytest.fixture(scope="module")
def dbo_bundle(tmp_path_factory):
    return _hostile_copy(tmp_path_factory, "afd-graphs-dbo", FOLDER)


def test_an_afd_dbo_run_in_a_hostile_folder_is_inert(dbo_bundle):
    """The folded host-stacks tables' titles name the samples file, folder and all, on a
    `<details><summary>` line: an HTML block, where a Markdown escape escapes nothing (a folder
    named `b<img src=x onerror=alert(1)>` put that tag into the Markdown)."""
    report = analyze_paths([dbo_bundle], Options())
    markdown = RENDERERS["markdown"].render(report, RenderOptions())
    assert "host idle by Python frame (" in markdown and "&lt;img src=x onerror=alert(1)&gt;" in markdown
    check_markdown(markdown)
    for width in (80, 400):
        text = RENDERERS["terminal"].render(report, RenderOptions(width=width, host_stacks=True))
        assert_no_raw_controls(text)
        assert max(map(cells, text.splitlines())) <= width
    source = RENDERERS["html"].render(report, RenderOptions())
    assert_no_raw_controls(source)
    assert "<img src=x" not in source


def test_compare_of_hostile_afd_arms_is_inert_and_bounded(pair_bundle, dbo_bundle, monkeypatch):
    """The round-trip and unprofiled tables show the manifest's cudagraph mode and timing tool, and
    the arms' labels: inert, and a name of 10,000 characters is not a 10,000-character cell."""
    arms = ["--label", HOSTILE, "--label", "dbo", str(pair_bundle), str(dbo_bundle)]
    for flag in ([], ["--markdown"], ["--json"]):
        proc = run_cli("compare", *flag, *arms)
        assert proc.returncode == 0, proc.stderr
        assert_no_raw_controls(proc.stdout)
        assert_no_raw_controls(proc.stderr)
        assert "W" * 200 not in re.sub(r"\s", "", proc.stdout)
        if flag == ["--markdown"]:
            check_markdown(proc.stdout)
    for width in (80, 400):
        monkeypatch.setenv("COLUMNS", str(width))
        text = run_cli("compare", *arms).stdout
        assert "disaggregated round trips" in text and "unprofiled" in text
        assert max(map(cells, text.splitlines())) <= width


def _pair_with(tmp_path, edit):
    folder = tmp_path / "pair"
    shutil.copytree(SAMPLES / "afd-pair-graphs-nomps", folder)
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    return folder


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(roles=["attention", "ffn"]),
        lambda m: m.update(roles="attention"),
        lambda m: m["roles"]["ffn"].update(traces=[["a"], 3, "/etc/passwd", "../x"]),
        lambda m: m["gpu_sharing"].update(mps_check=5, mps_daemon=["answered"]),
        lambda m: m.update(gpu_sharing="yes"),
        lambda m: m["gpu_sharing"].update(visible_devices=[0, {"a": 1}], shared_gpu="yes"),
        lambda m: m.update(afd=[1], command="vllm serve", peer="x"),
        lambda m: m.update(repeats=[1, "x", {"tool": 5, "median_tpot_ms": "fast", "duration_s": [1]}]),
        lambda m: m.update(settings=[1]),
        lambda m: m["settings"].update(cudagraph={"compilation-config": 5}, dbo="on"),
        # JSON in a flag's value nested past Python's recursion limit: json raised RecursionError (exit 3)
        lambda m: m["settings"].update(cudagraph={"compilation-config": "[" * 200_000}),
        lambda m: (m.pop("roles"), m.update(afd=None, command=["vllm", "serve", "m", "--additional-config", "[" * 200_000])),
    ],
    ids=["roles list", "roles text", "roles traces", "mps types", "sharing text", "devices", "afd", "repeats", "settings",
         "cudagraph", "deep compilation config", "deep additional config"],
)
def test_a_manifest_field_of_the_wrong_type_is_ignored(tmp_path, edit):
    folder = _pair_with(tmp_path, edit)
    for args in (["report"], ["report", "--markdown"], ["compare", str(SAMPLES / "afd-graphs-dbo")]):
        proc = run_cli(*args, str(folder))
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


def test_negative_repeat_timings_are_not_figures(tmp_path):
    """A repeat's TPOT or duration below zero is no timing: no profiler overhead from it (it gave
    'profiler overhead -2703% ... against -5.00 ms unprofiled')."""

    def negative(m):
        for r in m["repeats"]:
            r["median_tpot_ms"] = -5.0
            r["median_itl_ms"] = -5.0

    proc = run_cli("report", "--json", str(_pair_with(tmp_path, negative)))
    assert proc.returncode == 0, proc.stderr
    profiler = json.loads(proc.stdout)["profiler"]
    assert profiler is None or profiler["overhead"] is None



def test_wide_characters_count_two_columns_in_the_terminal_layout():
    """A kernel name in CJK is as wide again as its characters: the wrapped lines, a table and its
    stacked form still fit the width (rich's cell widths), and every character is still there."""
    from rich.cells import cell_len

    lines = wrap(f"top compute kernels: {WIDE} x1040 18.26 ms, {WIDE}🔥 x520", 80, "  - ", "    ")
    assert max(map(cell_len, lines)) <= 80 and len(lines) >= 4
    assert "".join(lines).count("漢") == 16 and "18.26 ms" in "".join(lines)  # a number with its unit, whole
    rows = [[WIDE[:30], "1040", "18.26 ms"], ["fused_moe_kernel", "520", "4.75 ms"]]
    columns = [Column("kernel", right=False, wrap=True), Column("count"), Column("total")]
    for width in (40, 80):
        out = table("kernels", columns, rows, width)
        assert max(map(cell_len, out)) <= width, out
    assert max(map(cell_len, stacked(columns, rows, 30))) <= 30
    assert cells("e\u0301") == 1 and cells("🔥") == 2 and cells("abc") == 3
