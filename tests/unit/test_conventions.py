"""The conventions a CLI user expects (issue 56): NO_COLOR and FORCE_COLOR, `--format` beside the
flags and conflicting choices refused, `python -m dbo_trace`, the README's examples run twice (a
rerun replaces only what dbo-trace itself wrote), and a picture named relative to where the
Markdown that names it is."""

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, run_cli

OVERLAP = SAMPLES / "overlap"
ESC = b"\x1b["


def under_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes]:
    """The CLI as a process whose stdout is a pseudo-terminal (as a user's shell gives it): its
    status and every byte it wrote there."""
    main, child = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full.update(env, PYTHONPATH=str(ROOT), COLUMNS="100")
    command = [sys.executable, "-m", "dbo_trace", *args]
    proc = subprocess.Popen(command, stdout=child, stderr=subprocess.DEVNULL, env=full, cwd=cwd)
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            piece = os.read(main, 65536)
        except OSError:  # the child closed the terminal (Linux: EIO)
            break
        if not piece:
            break
        out += piece
    os.close(main)
    return proc.wait(timeout=60), out


def test_no_color_under_a_terminal_prints_no_escape(tmp_path):
    command = ["report", str(OVERLAP)]
    code, coloured = under_a_terminal(command, {}, tmp_path)
    assert code == 0 and ESC in coloured  # a terminal gets colour: the check below can fail
    code, plain = under_a_terminal(command, {"NO_COLOR": "1"}, tmp_path)
    assert code == 0 and b"verdict: overlapped" in plain
    assert ESC not in plain
    code, both = under_a_terminal(command, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, tmp_path)
    assert ESC not in both  # no-color.org: NO_COLOR wins


def test_force_color_colours_a_pipe_but_never_a_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    run = [sys.executable, "-m", "dbo_trace", "report", str(OVERLAP)]
    piped = subprocess.run(run, capture_output=True, env={**env, "PYTHONPATH": str(ROOT), "FORCE_COLOR": "1"}, cwd=tmp_path)
    assert piped.returncode == 0 and ESC in piped.stdout
    unset = subprocess.run(run, capture_output=True, env={**env, "PYTHONPATH": str(ROOT), "FORCE_COLOR": "0"}, cwd=tmp_path)
    assert unset.returncode == 0 and ESC not in unset.stdout
    forced = {**env, "PYTHONPATH": str(ROOT), "FORCE_COLOR": "1"}
    to_file = subprocess.run([*run, "-o", "r.txt"], capture_output=True, env=forced, cwd=tmp_path)
    assert to_file.returncode == 0 and ESC not in (tmp_path / "r.txt").read_bytes()


def test_python_dash_m_runs_the_cli():
    from dbo_trace import __version__

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "dbo_trace", "--version"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == f"dbo-trace, version {__version__}"


def test_format_names_each_output_as_its_flag_or_suffix_does(tmp_path):
    as_json = run_cli("report", str(OVERLAP), "--format", "json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == json.loads(run_cli("report", str(OVERLAP), "--json").stdout)
    markdown = run_cli("report", str(OVERLAP), "--format", "markdown")
    assert markdown.returncode == 0 and markdown.stdout == run_cli("report", str(OVERLAP), "--markdown").stdout
    html = run_cli("report", str(OVERLAP), "--format", "html")
    run_cli("report", str(OVERLAP), "-o", str(tmp_path / "r.html"))
    assert html.returncode == 0 and html.stdout == (tmp_path / "r.html").read_text()
    text = run_cli("report", str(OVERLAP), "--format", "text")
    assert text.returncode == 0 and text.stdout == run_cli("report", str(OVERLAP)).stdout
    agreeing = run_cli("report", str(OVERLAP), "--format", "json", "--json", "-o", str(tmp_path / "r.json"))
    assert agreeing.returncode == 0 and json.loads((tmp_path / "r.json").read_text())["schema"] == "dbo-trace-report"
    compared = run_cli("compare", str(OVERLAP), str(SAMPLES / "serial"), "--format", "json")
    assert compared.returncode == 0 and json.loads(compared.stdout)["schema"] == "dbo-trace-compare"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "json", "--markdown"], "--format json and --markdown choose one output each"),
        (["-o", "x.html", "--markdown"], "-o x.html: its name is for html but --markdown asks for markdown"),
        (["-o", "x.txt", "--json"], "-o x.txt: its name is for text but --json asks for json"),
        (["-o", "x.md", "--format", "html"], "-o x.md: its name is for markdown but --format html asks for html"),
    ],
)
def test_report_refuses_conflicting_output_choices(args, message, tmp_path):
    proc = run_cli("report", str(OVERLAP), *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written under the wrong name


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "c.html"], "-o c.html: this command does not write html; give -o a name that ends in .txt, .json or .md"),
        (["-o", "c.md", "--json"], "-o c.md: its name is for markdown but --json asks for json"),
        (["--format", "markdown", "--json"], "--format markdown and --json choose one output each"),
    ],
)
def test_compare_refuses_conflicting_output_choices(args, message, tmp_path):
    proc = run_cli("compare", str(OVERLAP), str(SAMPLES / "serial"), *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_readme_examples_run_twice(tmp_path):
    """--timeline, --html, --perfetto and archive -o a second time: each replaces the file dbo-trace
    wrote the first time (the README's commands, rerun), with the report printed again."""
    outputs = ["--timeline", "step.png", "--html", "run.html", "--perfetto", "run.pftrace"]
    first = run_cli("report", str(OVERLAP), "--markdown", *outputs, cwd=tmp_path)
    again = run_cli("report", str(OVERLAP), "--markdown", *outputs, cwd=tmp_path)
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert again.stdout == first.stdout and "### dbo-trace" in again.stdout
    svg = [run_cli("report", str(OVERLAP), "--timeline", "step.svg", cwd=tmp_path).returncode for _ in range(2)]
    assert svg == [0, 0]
    archived = [run_cli("archive", str(OVERLAP), "-o", "run.tar.gz", cwd=tmp_path).returncode for _ in range(2)]
    assert archived == [0, 0]


@pytest.mark.parametrize("name", ["step.png", "step.svg", "run.html", "run.pftrace", "run.tar.gz"])
def test_a_rerun_never_replaces_a_file_dbo_trace_did_not_write(name, tmp_path):
    """The user's own file of that name (here a text file, and a real PNG another tool drew for the
    picture) still needs --force, and is left as it was."""
    theirs = tmp_path / name
    theirs.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64 if name.endswith(".png") else b"my notes\n")
    before = theirs.read_bytes()
    flag = {".png": "--timeline", ".svg": "--timeline", ".html": "--html", ".pftrace": "--perfetto"}.get(Path(name).suffix)
    args = ["report", str(OVERLAP), flag, name] if flag else ["archive", str(OVERLAP), "-o", name]
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2 and f"{name}: already exists" in proc.stderr and "--force" in proc.stderr
    assert theirs.read_bytes() == before


def test_text_outputs_still_need_force(tmp_path):
    """A Markdown report may have been edited for a pull request: -o never replaces it unasked."""
    assert run_cli("report", str(OVERLAP), "-o", "r.md", cwd=tmp_path).returncode == 0
    proc = run_cli("report", str(OVERLAP), "-o", "r.md", cwd=tmp_path)
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_the_picture_is_named_relative_to_where_the_markdown_is(tmp_path):
    (tmp_path / "out").mkdir()
    piped = run_cli("report", str(OVERLAP), "--markdown", "--timeline", "out/step.png", cwd=tmp_path)
    assert "`out/step.png` (its path is relative to the folder dbo-trace ran in, not to this file)" in piped.stdout
    run_cli("report", str(OVERLAP), "--timeline", "out/step2.png", "-o", "out/x.md", cwd=tmp_path)
    written = (tmp_path / "out" / "x.md").read_text()
    assert "`step2.png` (its path is relative to this Markdown file's folder)" in written
    assert (tmp_path / "out" / "x.md").parent.joinpath("step2.png").is_file()


def test_compare_help_and_the_glossary_describe_the_columns_compare_shows():
    """Every column header of compare's table is in the glossary; --help describes the median
    period with its interval that the table shows, not a mean and standard deviation it does not."""
    import re

    from dbo_trace.render.compare import HEADER

    glossary = (ROOT / "docs" / "glossary.md").read_text()
    line = glossary[glossary.index("`dbo-trace compare`") : glossary.index("`dbo-trace top`")]
    named = set(re.findall(r"`([^`]+)`", line))
    assert not [h for h in HEADER if h not in named]
    assert "mean" not in line
    text = " ".join(run_cli("compare", "--help").stdout.split())
    assert "median (p90, max)" in text and "95% interval" in text and "mean" not in text


@pytest.mark.parametrize("command", ["", "report", "compare", "archive", "record", "demo", "doctor", "top"])
def test_every_help_fits_80_columns(command, monkeypatch):
    """`top --help` had lines of 81 and 82 characters: click rewraps options but not a \\b block."""
    monkeypatch.setenv("COLUMNS", "80")
    text = run_cli(*[c for c in [command] if c], "--help").stdout
    assert text and not [line for line in text.splitlines() if len(line) > 80]


AFD_ARMS = [str(SAMPLES / name) for name in ("afd-eager", "afd-eager-dbo", "afd-graphs-dbo")]


def test_compare_at_80_columns_keeps_each_arm_name_whole_and_its_warnings_come_after_it():
    """Before: `afd-eager-` over `dbo` in the arm column, and seven warning lines above the table
    (the terminal showed them first). Now every name is whole on its line and the warnings follow
    the output (stderr and stdout as one stream, as a terminal shows them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "dbo_trace", "compare", *AFD_ARMS], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    first = [i for i, line in enumerate(lines) if line.startswith("dbo-trace: warning:")]
    # the pairs' conclusions first (does DBO pay; the one-arm model beside the graphs pair), then the table's title
    assert len(first) >= 3 and "dbo-trace compare" in lines[:16] and min(first) > 10  # one per cause (item 15a)
    warnings = [i for i in range(min(first), len(lines)) if i in first or lines[i].startswith("  ")]  # wrapped: indented
    assert warnings == list(range(min(first), len(lines)))  # all of them at the end
    assert all(len(line) <= 80 for line in lines)
    output = lines[: min(warnings)]
    assert all(len(line) <= 80 for line in output)
    assert not [line for line in output if line.rstrip().endswith("-") and not line.rstrip().endswith(" -")]
    for name in ("afd-eager", "afd-eager-dbo", "afd-graphs-dbo"):
        assert any(f"arm {name}," in line or f" {name} " in f"{line} " for line in output)


def test_a_wrapping_column_breaks_at_spaces_never_inside_a_name_that_fits():
    from dbo_trace.render.layout import Column, table

    columns = [Column("arm", right=False, wrap=True), Column("figure"), Column("note", right=False, wrap=True)]
    rows = [["afd-eager-dbo", "1.00", "a long sentence that has to wrap somewhere"], ["x", "2.00", "short"]]
    lines = table(None, columns, rows, 40)
    assert all(len(line) <= 40 for line in lines)
    assert any("afd-eager-dbo" in line for line in lines)
    long_name = "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT_and_more-of-it"  # past MAX_WORD: must break
    assert all(len(line) <= 40 for line in table(None, columns, [[long_name, "1.00", "ok"]], 40))


def test_host_stacks_at_80_columns_shows_each_frame_whole_or_broken_at_its_dots():
    """Before: the frame names were table cells, cut into 12-character pieces over up to 9 lines
    (`...deeps` over `eek_scaling_rope`). Now a tree: each frame on its own line, a name longer than
    the line broken only after a `.` or `:`, so joining a name's lines gives it back."""
    import re

    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.render import RENDERERS, RenderOptions
    from dbo_trace.render.document import build_document

    report = analyze_paths([SAMPLES / "afd-eager"], Options())
    text = RENDERERS["terminal"].render(report, RenderOptions(width=80, host_stacks=True))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("rank 0: host idle by Python frame"))
    section = "\n".join(lines[start:])
    joined = re.sub(r"([.:])\n +", r"\1", section)  # a name's continuation lines back onto it
    doc = build_document(report)
    rows = doc.ranks[0].host_stacks.window.rows
    frames = {name for row in rows for name in (row.project, row.library, row.inner) if name}
    assert len(frames) >= 10
    for name in frames:
        assert re.search(rf"^ +(> )?{re.escape(name)}$", joined, re.M), name
    for row in rows[:5]:  # each row's figures on its first line, beside its cause
        assert re.search(rf"^ +[\d.]+ ms +\d+%  {re.escape(row.cause.replace('_', ' '))}$", section, re.M)


# A page's script run by node against a stand-in DOM whose canvas records each rectangle's colour:
# what the page draws, without a browser.
PAGE_HARNESS = r"""
const fs = require("fs");
const html = fs.readFileSync(process.argv[2], "utf8");
const data = html.match(/<script id="data" type="application\/json">([\s\S]*?)<\/script>/)[1];
const script = html.match(/<script>([\s\S]*?)<\/script>\s*<\/body>/)[1];
const fills = [];
const ctx = new Proxy({}, {
  get: (o, k) => k in o ? o[k] : k === "fillRect" ? (...a) => fills.push([o.fillStyle, ...a]) : () => {},
  set: (o, k, v) => { o[k] = v; return true; },
});
const el = () => ({ textContent: data, style: {}, dataset: { rank: "0" }, classList: { toggle() {} }, addEventListener() {},
                    getContext: () => ctx, clientWidth: 1000 });
const canvases = [...html.matchAll(/<canvas class="timeline"[^>]*data-rank="(\d+)"/g)].map(m => ({ ...el(), dataset: { rank: m[1] } }));
global.window = { addEventListener() {} };
global.document = { getElementById: el, body: { dataset: {} },
  querySelectorAll: q => q === "canvas.timeline" ? canvases : [] };
eval(script);
console.log(JSON.stringify(fills));
"""


def page_fills(page: Path, tmp_path: Path) -> list:
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    harness = tmp_path / "harness.js"
    harness.write_text(PAGE_HARNESS)
    proc = subprocess.run([node, str(harness), str(page)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_html_timeline_speaks_the_pngs_colours(tmp_path):
    """Before: no exposed-comm colour; held-back comm purple whatever its cause, where the PNG and
    docs/outputs.md draw SMs crowded brown; the AFD entries in every page's legend. Now the page
    takes its colours from render/pictures/timeline_png.py and its legend lists what it draws."""
    from dbo_trace.render.pictures.timeline_png import EXPOSED_COLOUR, FFN_COLOUR, HELD_COLOURS

    run_cli("report", str(OVERLAP), "--html", "o.html", cwd=tmp_path)
    page = (tmp_path / "o.html").read_text()
    legend = page[page.index('<p class="legend">') : page.index("&mdash; wheel")]
    assert f"background:{EXPOSED_COLOUR}" in legend and "exposed comm" in legend
    assert f"background:{HELD_COLOURS['crowded']}" in legend and "SMs crowded" in legend
    assert "AFD" not in legend and "FFN" not in legend and HELD_COLOURS["late_record"] not in legend
    drawn = {colour for colour, *_ in page_fills(tmp_path / "o.html", tmp_path)}
    assert {EXPOSED_COLOUR, HELD_COLOURS["crowded"]} <= drawn and HELD_COLOURS["late_record"] not in drawn
    run_cli("report", str(SAMPLES / "afd-pair-graphs-dbo"), "--html", "p.html", cwd=tmp_path)
    pair = (tmp_path / "p.html").read_text()
    pair_legend = pair[pair.index('<p class="legend">') : pair.index("&mdash; wheel")]
    assert "FFN compute, one span per round trip" in pair_legend  # the FFN's lane as its spans (issue 54)
    from dbo_trace.render.pictures.timeline_png import HIDDEN_COLOUR, HIDDEN_TRIP_COLOUR

    # one colour, one meaning: the round trip's hidden part is not comm under compute's green
    assert f"background:{HIDDEN_TRIP_COLOUR}" in pair_legend and HIDDEN_TRIP_COLOUR != HIDDEN_COLOUR
    assert FFN_COLOUR in {colour for colour, *_ in page_fills(tmp_path / "p.html", tmp_path)}


def _drawn(sample: str, window: str | None = None):
    from dbo_trace.analysis.model import Options
    from dbo_trace.render.pictures.step_view import chosen_step, parse_window, step_view, window_view
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.render.pictures.timeline_png import timeline_figure

    report = analyze_paths([SAMPLES / sample], Options())
    rank, position = chosen_step(report, None, None)
    view = step_view(rank, position) if window is None else window_view(rank, *parse_window(rank, window))
    return view, timeline_figure(view)


def test_the_pngs_lead_in_label_stays_over_the_lead_in_and_the_last_kernel_clears_the_edge():
    """samples/overlap's median step: before, the red label ran 7 ms past its 5.91 ms lead-in, over
    the first comm bars; and the last comm kernel, which ends the step's window, ended on the
    axis' right spine, as if cut. Measured on the drawn figure."""
    view, fig = _drawn("overlap")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    (label,) = [t for t in ax.texts if t.get_text().startswith("lead-in")]
    left, right = (ax.transData.transform((x, 0))[0] for x in (0.0, view.lead_in_us / 1000))
    box = label.get_window_extent(renderer)
    assert view.lead_in_idle and left - 1 <= box.x0 and box.x1 <= right
    last = max(b.end for b in view.bars if b.own and b.kind == "comm")
    assert last == pytest.approx(view.duration)  # the window ends with it
    assert ax.get_xlim()[1] * 1000 > last * 1.01


def test_a_window_one_stall_fills_says_so_and_names_the_window_of_the_others():
    """vllm-graphs-decode `--window '#2:#4'`: #2 is an 846.74 ms stall, #3 and #4 about 12 ms
    between them; the title says the stall fills the window and which window draws the others."""
    view, fig = _drawn("vllm-graphs-decode", "#2:#4")
    number, us, first, last = view.dominant
    assert (number, first, last) == (2, 2, 4) and us == pytest.approx(846_740, abs=10)
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "#2 (846.74 ms) fills 99% of it: --window '#3:#4' draws the others" in title
    plain, _ = _drawn("afd-graphs-dbo", "#2:#4")  # three steps alike: nothing to say
    assert plain.dominant is None
