"""--html: one self-contained page, loaded in a real headless Chromium: it runs without errors, draws
the median step's timeline of every rank, and shows the verdict the JSON report gives and the whole
diagnosis the Markdown report gives (read from the rendered DOM, not from the page's source)."""

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from conftest import SAMPLES, run_cli


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found:
        return found
    if os.environ.get("DBO_TRACE_REQUIRE_BROWSER"):
        raise RuntimeError("no Chromium, but DBO_TRACE_REQUIRE_BROWSER is set (see .ci/run)")
    pytest.skip("Chromium is not installed (apt-get install chromium)")


def rendered_dom(page) -> str:
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("variant", ["overlap", "hostbound", "graph"])
def test_html_report_loads_in_a_browser_and_shows_the_verdict(tmp_path, variant):
    page = tmp_path / "report.html"
    proc = run_cli("report", str(SAMPLES / variant), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    source = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", source), "the page must need no network"
    dom = rendered_dom(page)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-ready="1"' in body and "data-error" not in body
    expected = json.loads(run_cli("report", "--json", str(SAMPLES / variant)).stdout)
    assert f'<span id="verdict">{expected["verdict"]["label"]}</span>' in dom
    assert f'data-views="{len(expected["steps"])}"' in body
    # The script picked the median step: its row is highlighted and its title shown.
    assert dom.count('class="pick current"') == 1
    assert re.search(r'<h3 class="view-title" id="view-title-0">rank 0 · #\d+ step \d+', dom)  # the step's number, then its label


class _Dom(HTMLParser):
    """The rendered page's list items, table rows (by table) and whole text."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._li: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "li":
            self._li = []
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "li" and self._li is not None:
            self.items.append("".join(self._li))
            self._li = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        for part in (self._li, self._cell):
            if part is not None:
                part.append(data)


def _markdown_plain(text: str) -> str:
    """A Markdown line as it reads: its escapes (a backslash before punctuation) undone."""
    return re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>~])", r"\1", text)


@pytest.mark.parametrize("variant", ["overlap", "late", "two-gpu-overlap", "vllm-graphs-decode"])
def test_the_rendered_page_holds_the_whole_diagnosis(tmp_path, variant):
    page = tmp_path / "report.html"
    assert run_cli("report", str(SAMPLES / variant), "--html", str(page)).returncode == 0
    dom_text = rendered_dom(page)
    dom = _Dom()
    dom.feed(dom_text)
    expected = json.loads(run_cli("report", "--json", str(SAMPLES / variant)).stdout)
    markdown = run_cli("report", "--markdown", str(SAMPLES / variant)).stdout
    # Every finding the Markdown lists (reasons, each rank's time, overlap cost, exposure causes,
    # held-back comm, kernels) is a list item of the page, word for word.
    findings = [_markdown_plain(html.unescape(line[2:])) for line in markdown.splitlines() if line.startswith("- ")]
    assert findings
    for line in findings:
        assert line in dom.items, f"the page lacks: {line[:100]}"
    for r in expected["ranks"]:  # and the findings the JSON has are among them
        has = {
            "overlap cost": r["contention"],
            "exposed comm": (r["exposed_comm_reasons"] or {}).get("exposed_us"),
            "comm held back": (r["held_back_comm"] or {}).get("kernels"),
        }
        for kind in (k for k, v in has.items() if v):
            assert any(i.startswith(f"rank {r['rank']} {kind}") for i in dom.items), (kind, r["rank"])
    # The per-phase table: a row per phase, with its step count.
    if expected["phases"]:
        phase_table = next(t for t in dom.tables if t[0][:2] == ["phase", "steps"])
        # a cell "113 (9 stalled)": its steady steps first, never more than the phase's steps
        shown = {row[0]: int(row[1].split()[0]) for row in phase_table[1:]}
        assert set(shown) == set(expected["phases"])
        assert all(0 <= shown[p] <= v["steps"] for p, v in expected["phases"].items())
    # The comm operations of each rank: a row per operation.
    operations = [t for t in dom.tables if t[0][:2] == ["microbatch", "op"]]
    assert [len(t) - 1 for t in operations] == [len(r["comm_operations"]) for r in expected["ranks"] if r["comm_operations"]]
    # Every table the Markdown has (per layer, hand-overs per layer, host stacks ...) has its twin on the
    # page, headed alike, with as many rows.
    md_tables = _markdown_tables(markdown)
    assert md_tables
    for header, rows in md_tables:
        if header[:2] == ["rank", "#"]:
            continue  # the per-step table: the page's has no phase column and lists every step
        twins = [t for t in dom.tables if [_markdown_plain(c) for c in t[0]] == header]
        assert any(len(t) - 1 == rows for t in twins), f"the page lacks the table headed {header} ({rows} rows)"
    # Every rank with steps has its timeline, drawn, showing its median step; the legend names held-back comm.
    drawn = [r["rank"] for r in expected["ranks"] if r["steps"]]
    body = re.search(r"<body([^>]*)>", dom_text).group(1)
    assert f'data-drawn="{len(drawn)}"' in body and "data-error" not in body
    for rank in drawn:
        assert re.search(rf'id="view-title-{rank}">rank {rank} · ', dom_text)
    assert dom_text.count('class="pick current"') == len(drawn)
    text = "".join(dom.text)
    # the legend lists what the page draws (the PNG's colours): held-back comm by its cause where the
    # drawn steps hold any, and no held-back entry where none does
    held = any(r.get("held_back_comm") for r in expected["ranks"])
    legend = text[text.index("microbatch 0") if "microbatch 0" in text else 0 :]
    assert ("comm held back: " in legend and "(ready, not started)" in legend) or not held
    if expected["cross_rank"]:
        assert f"Across ranks: {expected['cross_rank']['summary']}" in text
    for note in expected["warnings"] + [n for r in expected["ranks"] for n in r["notes"]]:
        assert note in dom.items
    assert f"microbatches from: {expected['microbatch_source']}" in text
    if expected["round_trips"]:  # the note under the DBO arithmetic, as the Markdown words it
        note = next(line for line in markdown.splitlines() if line.startswith("Round trips counted from"))
        assert note.replace("*could*", "could") in text


def _markdown_tables(markdown: str) -> list[tuple[list[str], int]]:
    """Each Markdown table: its header cells, as plain text, and its number of body rows."""
    out: list[tuple[list[str], int]] = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            if i > 0 and lines[i - 1].startswith("|"):
                continue
            header = [_markdown_plain(html.unescape(c.strip())) for c in line.strip().strip("|").split("|")]
            rows = 0
            for follow in lines[i + 2 :]:
                if not follow.startswith("|"):
                    break
                rows += 1
            out.append((header, rows))
    return out
