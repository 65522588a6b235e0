"""Every string from input is inert in every output (docs/outputs.md, "Untrusted input").

A real recording (samples/overlap) rewritten so that its kernel names, step labels, UBatchWrapper
path and folder name carry every hostile shape: terminal control sequences (OSC 52 clipboard, OSC 0
title, OSC 8 link, cursor movement, BEL, CR, backspace, DEL, C1 CSI, bidi overrides), rich markup,
Markdown (a newline and heading, @mentions, images, raw HTML closing the <details>, pipes, backticks,
URLs), `<!--<script>` and `</script>` for the HTML page, `$...$` for matplotlib. It goes through
every renderer of the registry, the archive's document renderers, `compare` and `top`; the bytes
are checked here by rules written from the formats' definitions (and the Markdown parsed by
markdown-it, which rich depends on), and the HTML page is opened in a real headless Chromium.
"""

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest
from conftest import SAMPLES, run_cli, run_cli_process
from markdown_it import MarkdownIt
from traces import rewrite_events

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions, as_bytes
from dbo_trace.render.document import ReportDocument, build_document

ESC, BEL = "\x1b", "\x07"
SHAPES = [
    ESC + "]52;c;ZXZpbA==" + BEL,  # OSC 52: writes the reader's clipboard
    ESC + "]0;owned" + BEL,  # OSC 0: the window title
    ESC + "]8;;http://evil.example/" + ESC + "\\click" + ESC + "]8;;" + ESC + "\\",  # OSC 8: a hidden link
    ESC + "[2J" + ESC + "[1;1H",  # clear the screen, move the cursor
    "\r\b\x7f\x9b31m",  # carriage return, backspace, DEL, C1 CSI
    "\u202eevil\u202c\u2066x\u2069",  # bidi override, isolate
    "[link=http://evil.example/]x[/link] [/x] [bold red]:smile:",  # rich markup and emoji
    "\n# Heading @octocat ![t](http://evil.example/t.png)",  # a Markdown block, a mention, an image
    "</details><img src=x onerror=alert(1)>",  # raw HTML closing the report's <details>
    "a|b | c",  # pipes forging table cells
    "`tick`` ``",  # backticks
    "https://evil.example www.evil.example *em* _em_ ~~s~~",  # autolinks, emphasis
    "<!--<script>",  # the page's own script would never end
    "</script><script>document.body.dataset.error='injected'</script>",
    "&amp; \u2028\u2029",
    "$\\frac{$ $x^$",  # matplotlib math that does not parse
]
HOSTILE = " ".join(SHAPES)
FOLDER = "run " + ESC + "]0;owned" + BEL + "\u202e [/x] [link=x]y\n# @octocat <b>|</b> $x^$"
# What must never reach a text output raw: C0 but newline, DEL, C1, the separators, bidi controls.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _renamed(events):
    for event in events:
        if isinstance(event.get("name"), str):
            event["name"] = _rename(event["name"])
    return events


def _rename(name: str) -> str:
    if re.fullmatch(r"ProfilerStep#\d+", name):
        return f"{name} {HOSTILE}"
    if name.startswith("nvjet"):  # the compute kernel
        return f"{HOSTILE} {name}"
    if "spin_kernel" in name:  # the comm kernel (the manifest declares spin_kernel)
        return f"{name} {HOSTILE}"
    return name


@pytest.fixture(scope="module")
def hostile_bundle(tmp_path_factory):
    # The folder's name too (a file name may hold everything but `/` and NUL, in 255 bytes).
    folder = tmp_path_factory.mktemp("inert") / FOLDER
    shutil.copytree(SAMPLES / "overlap", folder)
    (trace,) = (folder / "traces").glob("*.json.gz")
    rewrite_events(trace, trace, _renamed)
    (log,) = (folder / "events").glob("*.jsonl")
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines[1:]]
    for r in records:
        if r[1] == "step_begin" and isinstance(r[6], dict):
            r[6]["path"] = "eager_microbatched " + HOSTILE  # the UBatchWrapper path, from the log
    log.write_text("\n".join([lines[0], *map(json.dumps, records)]) + "\n")
    return folder


@pytest.fixture(scope="module", params=["log steps", "marker steps"])
def hostile_report(request, hostile_bundle):
    """With the event log's steps (hostile paths) and with --step-marker's (hostile labels)."""
    marker = "^ProfilerStep" if request.param == "marker steps" else None
    report = analyze_paths([hostile_bundle], Options(step_marker=marker))
    assert any(r.steps for r in report.ranks)
    names = json.dumps(msgspec.to_builtins(build_document(report)))
    assert json.dumps(HOSTILE)[1:-1] in names  # the hostile strings did reach the report
    return report


def assert_no_raw_controls(text: str, colour_codes: bool = False) -> None:
    if colour_codes:  # rich's own SGR codes only: ESC [ digits;digits m
        text = re.sub("\x1b\\[[0-9;]*m", "", text)
    found = RAW_CONTROL.search(text)
    assert found is None, f"raw {found.group()!r} at {found.start()}: {text[max(0, found.start() - 80) : found.start() + 80]!r}"


def test_the_terminal_summary_shows_every_string_as_inert_text(hostile_report):
    for colour in (False, True):
        text = RENDERERS["terminal"].render(hostile_report, RenderOptions(color=colour, width=400))
        assert_no_raw_controls(text, colour_codes=colour)
        assert "\x1b]" not in text and "\x1b[2J" not in text  # no OSC, no cursor movement
    plain = RENDERERS["terminal"].render(hostile_report, RenderOptions(width=400))
    # Markup in data is printed as written, not parsed (and `[/x]` does not crash the summary).
    assert "[link=http://evil.example/]x[/link] [/x] [bold red]:smile:" in plain
    assert "\\x1b]52;c;ZXZpbA==\\x07" in plain  # the escape is shown, visibly


def _code_spans_removed(markdown: str) -> str:
    """The Markdown with its inline code spans taken out (CommonMark: a run of n backticks up to
    the next run of exactly n)."""
    out, i = [], 0
    while i < len(markdown):
        m = re.compile(r"`+").search(markdown, i)
        if m is None:
            out.append(markdown[i:])
            break
        out.append(markdown[i : m.start()])
        close = re.compile(r"(?<!`)" + m.group() + r"(?!`)").search(markdown, m.end())
        if close is None:
            out.append(m.group())
            i = m.end()
        else:
            i = close.end()
    return "".join(out)


def _parsed_prose(markdown: str) -> str:
    """The text a CommonMark parser reads outside code spans, escapes resolved: one line per inline
    block, a space where a code span or other element stood."""
    tokens = MarkdownIt("commonmark").enable("table").enable("strikethrough").parse(markdown)
    return "\n".join(
        "".join(c.content if c.type in ("text", "text_special") else " " for c in t.children or ())
        for t in tokens
        if t.type == "inline"
    )


def check_markdown(text: str, tables_rows: dict[str, int] | None = None) -> None:
    assert_no_raw_controls(text)
    html = MarkdownIt("commonmark").enable("table").enable("strikethrough").render(text)
    html = html.replace("<em>could</em>", "could")  # the report's own emphasis (the criterion's sentence)
    html = html.replace('<img src="timeline.png" alt="CPU/GPU timeline of one step" />', "")  # its own picture
    html = html.replace('<a href="docs/glossary.md">docs/glossary.md</a>', "")  # its own link, to the glossary
    # Nothing from input became structure: no image, link, raw HTML, heading but the report's own,
    # emphasis or strikethrough; the report's own <details> blocks are whole.
    for tag in ("<img", "<a ", "<script", "<h1", "<h2", "<em>", "<del>", "<s>"):
        assert tag not in html, (tag, html[html.find(tag) - 300 : html.find(tag) + 100])
    assert html.count("<details>") == html.count("</details>") == text.count("<details>")
    assert html.count("<h3>") == text.count("\n### ") + text.startswith("### ")
    # The hostile shapes are in the page as text (in code spans or escaped), whole.
    assert "&lt;!--&lt;script&gt;" in html and "[link=http://evil.example/]x[/link]" in html.replace("\\", "")
    # GitHub's autolinks and mentions: outside code spans, no URL scheme, www. or @name (a word
    # joiner, U+2060, stands between), in the source or in the text the escapes leave (as the
    # parser reads it: a backslash-escaped backtick opens no code span).
    proses = [_parsed_prose(text)]
    if "\\`" not in text:  # the source read by hand too, where no escaped backtick misleads the span finder
        proses.append(_code_spans_removed(text).replace("\\", ""))
    for prose in proses:
        assert "://" not in prose and not re.search(r"(?i)\bwww\.", prose), prose
        assert not re.search(r"@\w", prose)
    # Every table row has as many cells as its header (no pipe forged a cell).
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = len(re.split(r"(?<!\\)\|", lines[i - 1])) - 2
            for row in lines[i + 1 :]:
                if not row.startswith("|"):
                    break
                assert len(re.split(r"(?<!\\)\|", row)) - 2 == width, row


def test_the_markdown_escapes_every_string_from_input(hostile_report):
    for options in (RenderOptions(), RenderOptions(image="timeline.png")):
        text = RENDERERS["markdown"].render(hostile_report, options)
        check_markdown(text)  # with the picture: the report's own <img> is the only one


def test_the_json_keeps_the_data_exactly_and_prints_inert(hostile_report):
    text = RENDERERS["json"].render(hostile_report, RenderOptions())
    assert_no_raw_controls(text)
    doc = json.loads(text)
    assert any(s["label"].endswith(HOSTILE) for s in doc["steps"]) or any(
        (s["path"] or "").endswith(HOSTILE) for s in doc["steps"]
    )


def test_the_archive_documents_render_inert(hostile_report):
    """What `report ARCHIVE` shows comes from the stored document alone: the same escaping."""
    document = msgspec.json.decode(RENDERERS["json"].render(hostile_report, RenderOptions()), type=ReportDocument)
    text = RENDERERS["terminal"].render_document(document, RenderOptions(width=400))
    assert_no_raw_controls(text)
    assert "[/x]" in text
    check_markdown(RENDERERS["markdown"].render_document(document, RenderOptions()))


def test_the_pictures_draw_without_parsing_math(hostile_report):
    png = as_bytes(RENDERERS["png"].render(hostile_report, RenderOptions()))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = as_bytes(RENDERERS["svg"].render(hostile_report, RenderOptions())).decode()
    assert_no_raw_controls(svg.replace("\t", " "))
    ET.fromstring(svg)  # well-formed XML (XML has no control characters)
    assert len(as_bytes(RENDERERS["perfetto"].render(hostile_report, RenderOptions()))) > 1000


def test_every_renderer_of_the_registry_is_covered(hostile_report):
    """A renderer added to the registry must be added to the checks above."""
    checked = {"terminal", "markdown", "json", "html", "png", "svg", "perfetto"}
    assert set(RENDERERS) == checked


def test_the_html_page_escapes_every_string_and_its_script_runs(hostile_report, tmp_path):
    from test_html import rendered_dom

    page = tmp_path / "report.html"
    source = RENDERERS["html"].render(hostile_report, RenderOptions())
    assert_no_raw_controls(source)
    script = source[source.index('<script id="data"') : source.index("</script>")]
    assert "<" not in script[len('<script id="data" type="application/json">') :]  # nothing the parser reads
    assert "<img src=x" not in source and "<!--<script>" not in source
    page.write_text(source)
    dom = rendered_dom(page)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-ready="1"' in body and "data-error" not in body, body
    assert "<img src=" not in dom and dom.count("<script") == 2  # the page's own two scripts only


def test_compare_renders_hostile_arm_labels_inert(hostile_bundle):
    for flag in ([], ["--markdown"], ["--json"]):
        proc = run_cli("compare", *flag, "--label", HOSTILE, "--label", "b", str(hostile_bundle), str(SAMPLES / "overlap"))
        assert proc.returncode == 0, proc.stderr
        assert_no_raw_controls(proc.stdout)
        assert_no_raw_controls(proc.stderr)
        if flag == ["--markdown"]:
            check_markdown(proc.stdout)
        if not flag:
            assert "[/x]" in proc.stdout


def test_the_command_lines_stderr_is_inert(hostile_bundle, tmp_path):
    """Warnings and errors quote paths and names: inert on stderr too (a process: the real streams)."""
    missing = tmp_path / FOLDER
    proc = run_cli_process("report", str(missing))
    assert proc.returncode == 2
    assert_no_raw_controls(proc.stderr.rstrip("\n"))
    timeline = tmp_path / "t.png"
    proc = run_cli_process("report", str(hostile_bundle), "--step-marker", "^ProfilerStep", "--timeline", str(timeline))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_no_raw_controls(proc.stderr.rstrip("\n").replace("\n", " "))
    assert_no_raw_controls(proc.stdout.replace("\n", " "))


@pytest.mark.parametrize("name", ["`", "a`b", "``x``", " lead", "trail ", "` both `", "a|b", "<b>", "*x*", "x\ny", "$x^2$"])
def test_a_name_in_markdown_reads_back_exactly(name):
    """As code, the span's content is the name, whatever backticks it holds; as text, what a reader
    sees is the name (as prose: without the spaces at its ends). A newline is shown as \\x0a."""
    from dbo_trace.render.safe import markdown_code, markdown_text

    def shown(line):
        return re.sub(r"</?(code|li|ul|p)>", "", MarkdownIt("commonmark").render(line)).strip("\n")

    expected = name.replace("\n", "\\x0a").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert shown(f"- {markdown_code(name)}") == expected
    assert shown(f"- {markdown_text(name)}") == expected.strip()
    assert "$" not in markdown_text(name).replace("\\$", "")  # escaped: GitHub parses $...$ as math


def test_the_archive_of_a_hostile_recording_packs_and_reads_back_inert(hostile_bundle, tmp_path):
    """`archive` draws the picture (math in names killed it) and writes the same escaped Markdown
    into summary.md; `report ARCHIVE` shows the stored document inert."""
    import tarfile

    out = tmp_path / "review.tar.gz"
    proc = run_cli("archive", str(hostile_bundle), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert_no_raw_controls(proc.stdout.replace("\n", " "))
    with tarfile.open(out) as tar:
        summary = tar.extractfile("dbo-trace/summary.md").read().decode()
    check_markdown(summary)
    for flag in ([], ["--markdown"], ["--json"]):
        shown = run_cli("report", *flag, str(out))
        assert shown.returncode == 0, shown.stderr
        assert_no_raw_controls(shown.stdout)


def _every_string_hostile(value, info):
    """The document (builtins) with HOSTILE after every string its types allow anywhere: every str
    field, list item and str-keyed dict's key and value (the types say where, msgspec.inspect reads them)."""
    import msgspec.inspect as mi

    if isinstance(info, mi.UnionType):
        kinds = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if value is None or len(kinds) != 1:
            return value if not isinstance(value, str) or not any(isinstance(t, mi.StrType) for t in kinds) else value + HOSTILE
        info = kinds[0]
    if isinstance(info, mi.StrType):
        return value + HOSTILE
    if isinstance(info, (mi.StructType, mi.DataclassType)):  # a block, or an analysis dataclass the document holds
        return {f.encode_name: _every_string_hostile(value[f.encode_name], f.type) for f in info.fields if f.encode_name in value}
    if isinstance(info, mi.ListType):
        return [_every_string_hostile(v, info.item_type) for v in value]
    if isinstance(info, mi.DictType):
        key = (lambda k: k + HOSTILE) if isinstance(info.key_type, mi.StrType) else (lambda k: k)
        return {key(k): _every_string_hostile(v, info.value_type) for k, v in value.items()}
    return value  # numbers, flags, Literals (the analyses' fixed vocabularies, checked on decoding)


@pytest.mark.parametrize("golden", ["late", "two-gpu-overlap", "dsv2lite-graphs-prefill", "afd-pair-graphs-nomps"])
def test_an_archive_holding_any_string_anywhere_renders_inert(golden):
    """A trace puts untrusted text only in names; an archive's report.json can hold any text in any
    string of the document (a verdict, a source, a phase's name, a note): the document renderers
    keep every one inert, whatever field it is in (a round-trip count's source, a cross-rank line,
    an AFD pair's roles, its profiler block, the samples file a host-stacks table is titled by)."""
    import msgspec.inspect as mi

    stored = json.loads((Path(__file__).parent.parent / "golden" / f"{golden}.json").read_text())
    forged = _every_string_hostile(stored, mi.type_info(ReportDocument))
    # str_keys: a dict's keys are strings in the JSON, decoded to the document's key type (a rank's
    # number, where the document holds an analysis dataclass keyed by rank) as the archive's reader does
    document = msgspec.convert(forged, ReportDocument, str_keys=True)
    assert json.dumps(HOSTILE)[1:-1] in json.dumps(forged)
    for width in (80, 400):
        assert_no_raw_controls(RENDERERS["terminal"].render_document(document, RenderOptions(width=width)))
    check_markdown(RENDERERS["markdown"].render_document(document, RenderOptions()))
    assert_no_raw_controls(RENDERERS["json"].render_document(document, RenderOptions()))


def test_sampled_python_frames_render_inert(tmp_path):
    """py-spy's frame and file names come from the recorded program: the AFD recording's sampled
    stacks rewritten so that its most-sampled project frame and the library call under it carry
    every hostile shape, through the host-stack lines and tables of every text renderer, the page
    and the Perfetto track."""
    bundle = tmp_path / "afd"
    shutil.copytree(SAMPLES / "afd-graphs-dbo", bundle)
    samples = bundle / "pystacks" / "attention.json"
    events = json.loads(samples.read_text())
    hit = 0
    for event in events:
        if event.get("name") in ("GPUModelRunner.synchronize_input_prep", "Event.synchronize"):
            event["name"] += " " + HOSTILE
            event["args"]["filename"] = HOSTILE + ".py"
            hit += 1
    assert hit
    samples.write_text(json.dumps(events))
    report = analyze_paths([bundle], Options())
    names = json.dumps(msgspec.to_builtins(build_document(report)))
    assert json.dumps(HOSTILE)[1:-1] in names  # the hostile frames reached the report
    for colour in (False, True):
        text = RENDERERS["terminal"].render(report, RenderOptions(color=colour, width=400, host_stacks=True))
        assert_no_raw_controls(text, colour_codes=colour)
        assert "\x1b]" not in text and "\x1b[2J" not in text
    assert "[bold red]:smile:" in RENDERERS["terminal"].render(report, RenderOptions(width=400, host_stacks=True))
    check_markdown(RENDERERS["markdown"].render(report, RenderOptions()))
    source = RENDERERS["html"].render(report, RenderOptions())
    assert_no_raw_controls(source)
    assert "<img src=x" not in source and "<!--<script>" not in source
    assert_no_raw_controls(RENDERERS["json"].render(report, RenderOptions()))
    assert len(as_bytes(RENDERERS["perfetto"].render(report, RenderOptions()))) > 1000


def test_host_time_operator_names_render_inert(tmp_path):
    """The host-time lines name CPU operators from the trace, top-level and innermost: the
    host-bound sample with its operators renamed to every hostile shape (the outer one, and one
    nested inside it, so that the innermost line names something the top-level one does not)."""
    folder = tmp_path / "hostbound"
    shutil.copytree(SAMPLES / "hostbound", folder)
    (trace,) = (folder / "traces").glob("*.json.gz")

    def renamed(events):
        for event in events:
            if event.get("cat") == "cpu_op" and isinstance(event.get("name"), str):
                # the markup first: a name in a sentence is cut to 160 characters (render/words/notes.py
                # NAME_IN_LINE), here inside the shapes' escapes, which must stay inert cut
                event["name"] = f"{event['name']} [bold red]:smile: {HOSTILE}"
        return events

    rewrite_events(trace, trace, renamed)
    report = analyze_paths([folder], Options())
    doc = build_document(report)
    assert doc.verdict.label == "host-bound"
    assert any(HOSTILE in x.name for x in doc.host_causes.cpu_ops_innermost)  # the names did reach it
    for colour in (False, True):
        text = RENDERERS["terminal"].render(report, RenderOptions(color=colour, width=80))
        assert_no_raw_controls(text, colour_codes=colour)
        assert "\x1b]" not in text and "\x1b[2J" not in text
    plain = RENDERERS["terminal"].render(report, RenderOptions(width=80))
    assert "host time" in plain and "[bold red]:smile:" in plain
    assert max(len(line) for line in plain.splitlines()) <= 80
    check_markdown(RENDERERS["markdown"].render(report, RenderOptions()))
    source = RENDERERS["html"].render(report, RenderOptions())
    assert_no_raw_controls(source)
    assert "<img src=x" not in source and "<!--<script>" not in source
