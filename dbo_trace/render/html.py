"""--html: one self-contained page (no network) with the whole diagnosis the terminal and the Markdown
give (verdict and reasons, each rank's findings, the per-rank, per-phase, comm-operation, round-trip
and per-step tables, the notes) and a zoomable CPU/GPU timeline per rank. The page draws StepViews
handed to it as JSON; it computes nothing."""

from __future__ import annotations

import json
from typing import Any

from dbo_trace.analysis.model import Report
from dbo_trace.render.pictures.step_view import FFN_GPU, afd_peer, median_step, step_view, steps_around_median
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document import ReportDocument, build_document
from dbo_trace.render.format import (
    label_of,
    LAYER_HEADER,
    LAYER_OPS_HEADER,
    OPERATION_HEADER,
    PHASE_HEADER,
    RANK_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    STACK_HEADER,
    all_notes,
    comm_layers_of,
    cross_rank_lines,
    dbo_arithmetic_applies,
    disaggregated_lines,
    disaggregated_ranks,
    figure_table,
    headline,
    hidden_cell,
    host_cause_lines,
    host_stack_lines,
    host_stack_rows,
    layer_cells,
    layer_ops_cells,
    ledger_lines,
    ledger_of,
    next_step_line,
    only_layer,
    operation_cells,
    pays_line,
    pipeline_line,
    predicted_line,
    pct,
    phase_cells,
    profiler_lines,
    rank_cells,
    reason_lines,
    roles_lines,
    round_trip_cells,
    step_number_cell,
    step_time_cell,
    step_verdict_cell,
    summary_tables,
    what_if_lines,
)
from dbo_trace.render.markdown import round_trip_note
from dbo_trace.render.safe import html_text, script_json, visible
from dbo_trace.render.pictures.timeline_png import (
    EXPOSED_COLOUR,
    FFN_COLOUR,
    HELD_COLOURS,
    HELD_LABELS,
    HIDDEN_COLOUR,
    HIDDEN_TRIP_COLOUR,
    HOST_COLOUR,
    UBATCH_COLOURS,
)

UNATTRIBUTED = "#8c8c8c"  # the page draws a kernel no microbatch launched in one grey (the PNG by its class)
from dbo_trace.render.pictures.timeline_png import pair_note, queue_full

MAX_STEPS = 20  # steps per rank embedded with their timelines (around the median step): keeps the page small
# the last three: an AFD rank's round trips, their hidden parts, the FFN's compute spans
KINDS = ["compute", "comm", "copy", "launch", "yield", "round trip", "hidden", "ffn compute"]


def _views(report: Report) -> list[dict[str, Any]]:
    out = []
    for rank in report.ranks:
        if not rank.steps or rank.detail is None:
            continue
        m = median_step(rank)
        peer = afd_peer(report, rank)  # an AFD attention rank's FFN, drawn on its clock
        for pos in steps_around_median(rank, MAX_STEPS):
            v = step_view(rank, pos, peer)
            names: dict[str, int] = {}
            bars = [
                [
                    round(b.start, 3),
                    round(b.end, 3),
                    v.lanes.index(b.lane),
                    b.ubatch,
                    KINDS.index(b.kind),
                    names.setdefault(b.name, len(names)),
                    int(queue_full(b)),  # a long launch whose GPU work began at once: drawn pale
                ]
                for b in v.bars
                # the page draws the step's own kernels, launches and yields; CPU ranges and other
                # steps' kernels in its window are the PNG's
                if b.kind in KINDS and b.own
            ]
            # The script shows these strings as text (textContent, the canvas's fillText): escaped
            # for that by visible(), as JSON.parse gives back every character script_json escaped.
            out.append(
                {
                    "rank": rank.rank,
                    "label": visible(rank.steps[pos].label),
                    "position": pos,
                    "median": pos == m,
                    "title": visible(v.title),
                    "note": visible(note.replace("\n", " ")) if (note := pair_note(v)) else "",
                    "origin": v.origin_us,
                    "duration": v.duration,
                    "lanes": [visible(lane) for lane in v.lanes],
                    "ffn": v.lanes.index(FFN_GPU) if FFN_GPU in v.lanes else -1,
                    "bars": bars,
                    "names": [visible(name) for name in names],
                    "overlap": v.overlap,
                    "idle": v.host_idle,
                    "exposed": v.exposed,
                    # held-back comm with its cause (HELD_CAUSES' index): the PNG's colour per cause
                    "held": [
                        [round(ready, 3), round(start, 3), v.lanes.index(lane), _held_cause(cause)]
                        for ready, start, lane, cause in v.held_back
                    ],
                }
            )
    return out


HELD_CAUSES = list(HELD_COLOURS)  # the page's held-back colours: the PNG's (render/pictures/timeline_png.py), by cause


def _held_cause(cause: str) -> int:
    return HELD_CAUSES.index(cause) if cause in HELD_CAUSES else HELD_CAUSES.index("held")


def _legend(views: list[dict[str, Any]]) -> str:
    """The timeline's key, in the PNG's colours (render/pictures/timeline_png.py), listing only what the page's
    views draw: no AFD entries for a run without an FFN or round trips, the held-back causes seen."""

    def item(colour: str, label: str, extra: str = "") -> str:
        return f'<span><i style="background:{colour}{extra}"></i>{html_text(label)}</span>'

    kinds = {KINDS[b[4]] for v in views for b in v["bars"]}
    ubatches = sorted({b[3] for v in views for b in v["bars"] if b[3] in UBATCH_COLOURS})
    out = [item(UBATCH_COLOURS[u], f"microbatch {u}") for u in ubatches]
    out += [item(UNATTRIBUTED, "not attributed"), item("#555", "communication (outlined)", ";outline:2px dashed #000")]
    out += [item(HIDDEN_COLOUR, "comm under compute"), item(EXPOSED_COLOUR, "exposed comm"), item(HOST_COLOUR, "GPU idle, host-caused")]
    causes = sorted({h[3] for v in views for h in v["held"]})
    out += [item(HELD_COLOURS[HELD_CAUSES[c]], HELD_LABELS[HELD_CAUSES[c]] + " (ready, not started)") for c in causes]
    if "round trip" in kinds:
        out.append(item("#aec7e8", "AFD round trip, send start to receive end (pale, its microbatch's colour)"))
    if "hidden" in kinds:  # its own colour: green is comm under compute
        out.append(item(HIDDEN_TRIP_COLOUR, "round trip under the other microbatch's compute"))
    if "ffn compute" in kinds:
        out.append(item(FFN_COLOUR, "FFN compute, one span per round trip"))
    elif any(v["ffn"] >= 0 for v in views):
        out.append(item(FFN_COLOUR, "FFN GPU"))
    if any(b[6] for v in views for b in v["bars"]):
        out.append(item("#3b3b3b", "launch call whose GPU work began at once (a full queue)", ";opacity:0.3"))
    return "".join(out)


def _table(header: list[str], rows: list[list[str]], row_attrs: list[str] | None = None) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    body = "".join(
        f"<tr{(row_attrs or [''] * len(rows))[i]}>" + "".join(f"<td>{html_text(c)}</td>" for c in r) + "</tr>"
        for i, r in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _list(items: list[str], css: str) -> str:
    return f'<ul class="{css}">' + "".join(f"<li>{html_text(x)}</li>" for x in items) + "</ul>" if items else ""


def _folded(summary: str, table: str, css: str) -> str:
    return f'<details class="{css}"><summary>{html_text(summary)}</summary>{table}</details>'


def _diagnosis(d: ReportDocument) -> str:
    """What the terminal and the Markdown say beyond the verdict, in their order: each rank's findings
    (time, overlap cost, exposure causes, held-back comm, kernels), the host time by Python frame, the
    ranks' comm operations (per microbatch and per layer), the per-phase table, the cross-rank view."""
    out = [_list([line for line_of in RANK_LINES for r in d.ranks if (line := line_of(r))], "findings")]
    for title, rows in host_stack_rows(d):
        out.append(_folded(title, _table(list(STACK_HEADER), rows), "host-stacks"))
    for r in d.ranks:
        ops = r.comm_operations
        if ops:
            out.append(
                _folded(
                    f"Rank {r.rank} comm operations ({len(ops)}: per microbatch, in step order; time: median over steps; hidden, exposed: shares of all its time)",
                    _table(list(OPERATION_HEADER), [operation_cells(op) for op in ops]),
                    "operations",
                )
            )
        layers = comm_layers_of(r)
        if layers:
            out.append(
                f"<p>Rank {r.rank} comm operations per layer (both microbatches; layers alike grouped):</p>"
                + _table(list(LAYER_OPS_HEADER), [layer_ops_cells(row) for row in layers])
            )
    if d.phases:
        out.append("<h2>Per phase <small>(vLLM's step annotations; the steady steps' figures, stalls counted apart)</small></h2>")
        out.append(_table(list(PHASE_HEADER), [phase_cells(name, ph, disaggregated=bool(disaggregated_ranks(d))) for name, ph in d.phases.items()]))
    cross = d.cross_rank
    if cross is not None:
        out.append(
            f'<p id="cross-rank">Across ranks: {html_text(cross.summary)}</p>'
            + _list(cross_rank_lines(d)[1:] + [f"note: {n}" for n in cross.notes], "cross-rank-lines")
        )
    return "\n".join(out)


def _ledger(d: ReportDocument) -> str:
    """The DBO ledger under the DBO arithmetic, as the Markdown gives it: its sentences and each rank's
    hand-overs per layer, then the what-if estimates."""
    out = []
    for r in d.ranks:
        ledger = ledger_of(r)
        out.append(_list(ledger_lines(r.rank, ledger), "ledger"))
        if ledger is not None and ledger.layers:
            out.append(
                _folded(
                    f"Rank {r.rank} hand-overs per layer",
                    _table(list(LAYER_HEADER), [layer_cells(row) for row in ledger.layers]),
                    "ledger-layers",
                )
            )
    out.append(_list(what_if_lines(d), "what-if"))
    return "".join(out)


def _timelines(views: list[dict[str, Any]]) -> str:
    """One canvas per rank with steps drawn: each shows its median step, a click on a step row its step."""
    ranks = list(dict.fromkeys(v["rank"] for v in views))
    return "\n".join(
        f'<h3 class="view-title" id="view-title-{r}">rank {r}</h3>'
        f'<canvas class="timeline" id="timeline-{r}" data-rank="{r}"></canvas>'
        for r in ranks
    )


class HtmlRenderer:
    name, suffixes, binary = "html", (".html", ".htm"), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        d = only_layer(build_document(report), options.layer)
        views = _views(report)
        # A step's row by its rank and place (labels repeat: vLLM's decode steps share one).
        index = {(v["rank"], v["position"]): i for i, v in enumerate(views)}
        step_rows, attrs = [], []
        afd = disaggregated_ranks(d)
        for s in d.steps:
            step_rows.append(
                [
                    str(s.rank),
                    step_number_cell(s),
                    s.label,
                    s.path or "-",
                    step_time_cell(s),
                    hidden_cell(s.comm.hidden_fraction, s.rank in afd),
                    pct(s.host.idle_fraction),
                    str(s.host.launches),
                    step_verdict_cell(s),
                ]
            )
            i = index.get((s.rank, s.number - 1))  # number: the step's place in its rank, from 1
            attrs.append(f' class="pick" data-view="{i}"' if i is not None else "")
        rt = d.round_trips
        rt_html = (
            ""
            if rt is None or not dbo_arithmetic_applies(d)
            else "<h2>Round trips</h2>"
            + _table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
            + f'<p id="round-trip-note">{html_text(round_trip_note(rt))}</p>'
        )
        if d.disaggregated is not None or d.roles is not None:
            lines = roles_lines(d) + (disaggregated_lines(d.disaggregated) if d.disaggregated is not None else [])
            rt_html += "<h2>Disaggregated round trips</h2>" + _list(lines, "round-trips")
        reasons = "".join(
            f"<li>{html_text(r)}</li>"
            for r in [
                *reason_lines(d.verdict), *[x for x in (pipeline_line(d),) if x is not None], *profiler_lines(d), *(f"host time: {line}" for line in host_cause_lines(d)),
                *host_stack_lines(d),
            ]
        )
        step = next_step_line(d.verdict)
        pays = pays_line(d.verdict)
        predicted = predicted_line(d)
        notes = all_notes(d)
        data = script_json({"views": views, "kinds": KINDS})
        return _PAGE.format(
            verdict=html_text(label_of(d.verdict)),
            finding=html_text(headline(d.verdict)[len(label_of(d.verdict)) :]),
            reasons=reasons,
            next_step=("" if pays is None else f'<p id="pays"><b>Does DBO pay:</b> {html_text(pays)}</p>')
            + ("" if predicted is None else f'<p id="predicted"><b>DBO\'s effect predicted:</b> {html_text(predicted)}</p>')
            + ("" if step is None else f'<p id="next-step"><b>Next step:</b> {html_text(step)}</p>'),
            inputs=html_text(", ".join(d.inputs)),
            ranks=_table(RANK_HEADER, [rank_cells(r) for r in d.ranks]),
            diagnosis=_diagnosis(d),
            figures=_table(*figure_table(d)),
            summaries="".join(
                _folded(title, _table(header, rows), "summary") if folded else f"<p>{html_text(title)}</p>" + _table(header, rows)
                for title, folded, header, rows in summary_tables(d)
            ),
            round_trips=rt_html + _ledger(d),
            timelines=_timelines(views),
            legend=_legend(views),
            steps=_table(
                ["rank", "#", "step", "path", "time", "comm hidden", "host idle", "launches", "verdict"], step_rows, attrs
            ),
            notes=("<h2>Notes</h2>" + _list(notes, "notes")) if notes else "",
            sources=html_text(f"microbatches from: {d.microbatch_source}; steps from: {d.steps_source}"),
            version=html_text(d.dbo_trace_version),
            data=data,
            colours=json.dumps({**{str(u): c for u, c in UBATCH_COLOURS.items()}, "-1": UNATTRIBUTED}),
            held_colours=json.dumps([HELD_COLOURS[c] for c in HELD_CAUSES]),
            ffn=FFN_COLOUR, hidden=HIDDEN_COLOUR, trip=HIDDEN_TRIP_COLOUR, exposed=EXPOSED_COLOUR, host=HOST_COLOUR,
        )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="dbo-trace"><title>dbo-trace: {verdict}{finding}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; }}
h1 span {{ padding: 2px 10px; border-radius: 6px; background: #eef; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
tr.pick {{ cursor: pointer; }} tr.pick:hover {{ background: #f3f3ff; }} tr.current {{ background: #e3e3ff; }}
canvas.timeline {{ border: 1px solid #ccc; width: 100%; height: 200px; }}
ul.findings li, ul.notes li {{ margin: 2px 0; }}
div.scroll {{ max-height: 480px; overflow-y: auto; display: inline-block; }}
#tip {{ position: fixed; pointer-events: none; background: #222; color: #fff; padding: 3px 6px; font-size: 12px; display: none; }}
.legend span {{ display: inline-block; margin-right: 14px; }} .legend i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }}
</style></head>
<body data-ready="0">
<h1>dbo-trace: <span id="verdict">{verdict}</span><small id="finding">{finding}</small></h1>
{next_step}
<ul id="reasons">{reasons}</ul>
<p>Inputs: {inputs}</p>
<h2>Ranks</h2>{ranks}
{diagnosis}
{round_trips}
<h2>Timeline</h2>
<p class="legend">{legend}
&mdash; wheel: zoom, drag: pan, double-click: reset, click a step below to show it</p>
{timelines}<div id="tip"></div>
<h2>Steps</h2><div class="scroll">{steps}</div>
{notes}
<p id="sources"><small>{sources}</small></p>
{summaries}
<details><summary>Every figure, per rank</summary>{figures}</details>
<p><small>dbo-trace {version}</small></p>
<script id="data" type="application/json">{data}</script>
<script>
window.onerror = function (msg) {{ document.body.dataset.error = String(msg); }};
(function () {{
  const D = JSON.parse(document.getElementById("data").textContent);
  const tip = document.getElementById("tip");
  const COL = {colours}, HELD = {held_colours}, FFN = "{ffn}", HID = "{hidden}", TRIP = "{trip}", EXP = "{exposed}", IDLE = "{host}", LEFT = 190, ROW = 26;
  const panes = {{}};  // rank -> its canvas and the step it shows
  function show(i) {{
    const view = D.views[i], p = panes[view.rank];
    p.view = view; p.lo = 0; p.hi = view.duration;
    document.getElementById("view-title-" + view.rank).textContent = view.title + (view.note ? " \u2014 " + view.note : "");
    document.querySelectorAll("tr.pick").forEach(tr => {{
      const v = D.views[Number(tr.dataset.view)];
      if (v.rank === view.rank) tr.classList.toggle("current", Number(tr.dataset.view) === i);
    }});
    draw(p);
  }}
  function draw(p) {{
    const canvas = p.canvas, ctx = canvas.getContext("2d"), view = p.view, lanes = view.lanes.length + 1;
    const x = t => LEFT + (t - p.lo) / (p.hi - p.lo) * (canvas.width - LEFT - 10);
    canvas.width = canvas.clientWidth; canvas.height = lanes * ROW + 30; canvas.style.height = canvas.height + "px";
    ctx.clearRect(0, 0, canvas.width, canvas.height); ctx.font = "12px sans-serif";
    view.lanes.concat(["comm hidden, exposed; host idle"]).forEach((name, r) => {{ ctx.fillStyle = "#222"; ctx.fillText(name, 6, r * ROW + 17); }});
    ctx.save(); ctx.beginPath(); ctx.rect(LEFT, 0, canvas.width - LEFT, canvas.height); ctx.clip();
    for (const b of view.bars) {{
      if (b[1] < p.lo || b[0] > p.hi) continue;
      const kind = D.kinds[b[4]], x0 = x(b[0]), w = Math.max(1, x(b[1]) - x0), y = b[2] * ROW + 4;
      ctx.globalAlpha = kind === "yield" || b[6] ? 0.25 : kind === "copy" ? 0.45 : kind === "round trip" ? 0.35 : 0.95;
      ctx.fillStyle = kind === "hidden" ? TRIP : b[2] === view.ffn ? FFN : COL[String(b[3])] || COL["-1"]; ctx.fillRect(x0, y, w, ROW - 8);
      if (kind === "comm") {{ ctx.globalAlpha = 1; ctx.strokeStyle = "#000"; ctx.setLineDash([3, 2]); ctx.strokeRect(x0, y, w, ROW - 8); ctx.setLineDash([]); }}
    }}
    ctx.globalAlpha = 1;
    for (const [s, e, lane, cause] of view.held) {{ ctx.fillStyle = HELD[cause]; ctx.fillRect(x(s), lane * ROW + ROW - 4, Math.max(1, x(e) - x(s)), 3); }}
    const band = view.lanes.length * ROW;
    ctx.fillStyle = HID; for (const [s, e] of view.overlap) ctx.fillRect(x(s), band + 4, Math.max(1, x(e) - x(s)), 8);
    ctx.fillStyle = EXP; for (const [s, e] of view.exposed) ctx.fillRect(x(s), band + 4, Math.max(1, x(e) - x(s)), 8);
    ctx.fillStyle = IDLE; for (const [s, e] of view.idle) ctx.fillRect(x(s), band + 13, Math.max(1, x(e) - x(s)), 8);
    ctx.restore();
    ctx.fillStyle = "#555";
    // The end ticks' labels align to their edge, so the last one is not cut at the canvas's right.
    for (let k = 0; k <= 5; k++) {{ const t = p.lo + (p.hi - p.lo) * k / 5; ctx.textAlign = k === 0 ? "left" : k === 5 ? "right" : "center"; ctx.fillText(((t - view.origin) / 1000).toFixed(2) + " ms", x(t), canvas.height - 6); }}
    ctx.textAlign = "left";
  }}
  document.querySelectorAll("canvas.timeline").forEach(canvas => {{
    const p = panes[Number(canvas.dataset.rank)] = {{canvas: canvas, view: null, lo: 0, hi: 1}};
    const at = ev => p.lo + (ev.offsetX - LEFT) / (canvas.width - LEFT - 10) * (p.hi - p.lo);
    canvas.addEventListener("wheel", ev => {{
      ev.preventDefault();
      const t = at(ev), f = ev.deltaY > 0 ? 1.25 : 0.8;
      p.lo = Math.max(0, t - (t - p.lo) * f); p.hi = Math.min(p.view.duration, t + (p.hi - t) * f); draw(p);
    }});
    let drag = null;
    canvas.addEventListener("mousedown", ev => {{ drag = [ev.offsetX, p.lo, p.hi]; }});
    window.addEventListener("mouseup", () => {{ drag = null; }});
    canvas.addEventListener("mousemove", ev => {{
      if (drag) {{
        const dt = (ev.offsetX - drag[0]) / (canvas.width - LEFT - 10) * (drag[2] - drag[1]);
        p.lo = drag[1] - dt; p.hi = drag[2] - dt; draw(p); return;
      }}
      const r = Math.floor(ev.offsetY / ROW), t = at(ev), view = p.view;
      const hit = view.bars.find(b => b[2] === r && b[0] <= t && t <= b[1]);
      if (!hit) {{ tip.style.display = "none"; return; }}
      tip.textContent = view.names[hit[5]] + " · " + (hit[1] - hit[0]).toFixed(1) + " us · " + D.kinds[hit[4]] + (hit[3] >= 0 ? " · microbatch " + hit[3] : "");
      tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; tip.style.display = "block";
    }});
    canvas.addEventListener("dblclick", () => {{ p.lo = 0; p.hi = p.view.duration; draw(p); }});
  }});
  document.querySelectorAll("tr.pick").forEach(tr => tr.addEventListener("click", () => show(Number(tr.dataset.view))));
  D.views.forEach((v, i) => {{ if (v.median) show(i); }});  // each rank's median step
  document.body.dataset.ready = "1";
  document.body.dataset.views = String(D.views.length);
  document.body.dataset.drawn = String(Object.values(panes).filter(p => p.view).length);
}})();
</script>
</body></html>
"""
