"""--html: one self-contained page (no network): the verdict and reasons, the tables, and a zoomable
CPU/GPU timeline per step. The page draws StepViews handed to it as JSON; it computes nothing."""

from __future__ import annotations

from dbo_trace.analysis.report import Report
from dbo_trace.analysis.view import median_step, step_view, steps_around_median
from dbo_trace.render import RenderOptions
from dbo_trace.render.document import build_document
from dbo_trace.render.format import RANK_HEADER, ROUND_TRIP_HEADER, figure_table, ms, pct, rank_cells, round_trip_cells
from dbo_trace.render.safe import html_text, script_json

MAX_STEPS = 20  # steps per rank embedded with their timelines (around the median step): keeps the page small
KINDS = ["compute", "comm", "copy", "launch", "yield"]


def _views(report: Report) -> list[dict]:
    out = []
    for rank in report.ranks:
        if not rank.steps or rank.detail is None:
            continue
        m = median_step(rank)
        for pos in steps_around_median(rank, MAX_STEPS):
            v = step_view(rank, pos)
            names: dict[str, int] = {}
            bars = [
                [
                    round(b.start, 3),
                    round(b.end, 3),
                    v.lanes.index(b.lane),
                    b.ubatch,
                    KINDS.index(b.kind),
                    names.setdefault(b.name, len(names)),
                ]
                for b in v.bars
            ]
            out.append(
                {
                    "rank": rank.rank,
                    "label": rank.steps[pos].label,
                    "median": pos == m,
                    "title": v.title,
                    "duration": v.duration,
                    "lanes": v.lanes,
                    "bars": bars,
                    "names": list(names),
                    "overlap": v.overlap,
                    "idle": v.host_idle,
                }
            )
    return out


def _table(header: list[str], rows: list[list[str]], row_attrs: list[str] | None = None) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    body = "".join(
        f"<tr{(row_attrs or [''] * len(rows))[i]}>" + "".join(f"<td>{html_text(c)}</td>" for c in r) + "</tr>"
        for i, r in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class HtmlRenderer:
    name, suffixes, binary = "html", (".html", ".htm"), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        d = build_document(report)
        views = _views(report)
        index = {(v["rank"], v["label"]): i for i, v in enumerate(views)}
        step_rows, attrs = [], []
        for s in d["steps"]:
            step_rows.append(
                [
                    str(s["rank"]),
                    s["label"],
                    s["path"] or "-",
                    ms(s["step_us"]),
                    pct(s["comm"]["hidden_fraction"]),
                    pct(s["host"]["idle_fraction"]),
                    str(s["host"]["launches"]),
                    s["verdict"]["label"],
                ]
            )
            i = index.get((s["rank"], s["label"]))
            attrs.append(f' class="pick" data-view="{i}"' if i is not None else "")
        rt = d["round_trips"]
        rt_html = "" if not rt else "<h2>Round trips</h2>" + _table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
        reasons = "".join(f"<li>{html_text(r)}</li>" for r in d["verdict"]["reasons"])
        data = script_json({"views": views, "kinds": KINDS})
        return _PAGE.format(
            verdict=html_text(d["verdict"]["label"]),
            reasons=reasons,
            inputs=html_text(", ".join(d["inputs"])),
            ranks=_table(RANK_HEADER, [rank_cells(r) for r in d["ranks"]]),
            figures=_table(*figure_table(d["ranks"])),
            round_trips=rt_html,
            steps=_table(["rank", "step", "path", "time", "comm hidden", "host idle", "launches", "verdict"], step_rows, attrs),
            version=html_text(d["dbo_trace_version"]),
            data=data,
        )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dbo-trace: {verdict}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; }}
h1 span {{ padding: 2px 10px; border-radius: 6px; background: #eef; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
tr.pick {{ cursor: pointer; }} tr.pick:hover {{ background: #f3f3ff; }} tr.current {{ background: #e3e3ff; }}
#timeline {{ border: 1px solid #ccc; width: 100%; height: 360px; }}
#tip {{ position: fixed; pointer-events: none; background: #222; color: #fff; padding: 3px 6px; font-size: 12px; display: none; }}
.legend span {{ display: inline-block; margin-right: 14px; }} .legend i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }}
</style></head>
<body data-ready="0">
<h1>dbo-trace: <span id="verdict">{verdict}</span></h1>
<ul id="reasons">{reasons}</ul>
<p>Inputs: {inputs}</p>
<h2>Ranks</h2>{ranks}
{round_trips}
<h2>Timeline <small id="view-title"></small></h2>
<p class="legend"><span><i style="background:#1f77b4"></i>microbatch 0</span><span><i style="background:#ff7f0e"></i>microbatch 1</span>
<span><i style="background:#8c8c8c"></i>not attributed</span><span><i style="background:#555;outline:2px dashed #000"></i>communication (outlined)</span>
<span><i style="background:#2ca02c"></i>comm under compute</span><span><i style="background:#d62728"></i>GPU idle, host-caused</span>
&mdash; wheel: zoom, drag: pan, double-click: reset, click a step below to show it</p>
<canvas id="timeline"></canvas><div id="tip"></div>
<h2>Steps</h2>{steps}
<details><summary>Every figure, per rank</summary>{figures}</details>
<p><small>dbo-trace {version}</small></p>
<script id="data" type="application/json">{data}</script>
<script>
window.onerror = function (msg) {{ document.body.dataset.error = String(msg); }};
(function () {{
  const D = JSON.parse(document.getElementById("data").textContent);
  const canvas = document.getElementById("timeline"), ctx = canvas.getContext("2d"), tip = document.getElementById("tip");
  const COL = {{"0": "#1f77b4", "1": "#ff7f0e", "-1": "#8c8c8c"}}, LEFT = 190, ROW = 26;
  let view = null, lo = 0, hi = 1;
  function show(i) {{
    view = D.views[i]; lo = 0; hi = view.duration;
    document.getElementById("view-title").textContent = view.title;
    document.querySelectorAll("tr.pick").forEach(tr => tr.classList.toggle("current", Number(tr.dataset.view) === i));
    draw();
  }}
  function x(t) {{ return LEFT + (t - lo) / (hi - lo) * (canvas.width - LEFT - 10); }}
  function draw() {{
    const lanes = view.lanes.length + 1;
    canvas.width = canvas.clientWidth; canvas.height = lanes * ROW + 30; canvas.style.height = canvas.height + "px";
    ctx.clearRect(0, 0, canvas.width, canvas.height); ctx.font = "12px sans-serif";
    view.lanes.concat(["overlap / host idle"]).forEach((name, r) => {{ ctx.fillStyle = "#222"; ctx.fillText(name, 6, r * ROW + 17); }});
    ctx.save(); ctx.beginPath(); ctx.rect(LEFT, 0, canvas.width - LEFT, canvas.height); ctx.clip();
    for (const b of view.bars) {{
      if (b[1] < lo || b[0] > hi) continue;
      const kind = D.kinds[b[4]], x0 = x(b[0]), w = Math.max(1, x(b[1]) - x0), y = b[2] * ROW + 4;
      ctx.globalAlpha = kind === "yield" ? 0.25 : kind === "copy" ? 0.45 : 0.95;
      ctx.fillStyle = COL[String(b[3])] || COL["-1"]; ctx.fillRect(x0, y, w, ROW - 8);
      if (kind === "comm") {{ ctx.globalAlpha = 1; ctx.strokeStyle = "#000"; ctx.setLineDash([3, 2]); ctx.strokeRect(x0, y, w, ROW - 8); ctx.setLineDash([]); }}
    }}
    ctx.globalAlpha = 1;
    const band = view.lanes.length * ROW;
    ctx.fillStyle = "#2ca02c"; for (const [s, e] of view.overlap) ctx.fillRect(x(s), band + 4, Math.max(1, x(e) - x(s)), 8);
    ctx.fillStyle = "#d62728"; for (const [s, e] of view.idle) ctx.fillRect(x(s), band + 13, Math.max(1, x(e) - x(s)), 8);
    ctx.restore();
    ctx.fillStyle = "#555";
    for (let k = 0; k <= 5; k++) {{ const t = lo + (hi - lo) * k / 5; ctx.fillText((t / 1000).toFixed(2) + " ms", x(t) - 20, canvas.height - 6); }}
  }}
  canvas.addEventListener("wheel", ev => {{
    ev.preventDefault();
    const t = lo + (ev.offsetX - LEFT) / (canvas.width - LEFT - 10) * (hi - lo), f = ev.deltaY > 0 ? 1.25 : 0.8;
    lo = Math.max(0, t - (t - lo) * f); hi = Math.min(view.duration, t + (hi - t) * f); draw();
  }});
  let drag = null;
  canvas.addEventListener("mousedown", ev => {{ drag = [ev.offsetX, lo, hi]; }});
  window.addEventListener("mouseup", () => {{ drag = null; }});
  canvas.addEventListener("mousemove", ev => {{
    if (drag) {{
      const dt = (ev.offsetX - drag[0]) / (canvas.width - LEFT - 10) * (drag[2] - drag[1]);
      lo = drag[1] - dt; hi = drag[2] - dt; draw(); return;
    }}
    const r = Math.floor(ev.offsetY / ROW), t = lo + (ev.offsetX - LEFT) / (canvas.width - LEFT - 10) * (hi - lo);
    const hit = view.bars.find(b => b[2] === r && b[0] <= t && t <= b[1]);
    if (!hit) {{ tip.style.display = "none"; return; }}
    tip.textContent = view.names[hit[5]] + " · " + (hit[1] - hit[0]).toFixed(1) + " us · " + D.kinds[hit[4]] + (hit[3] >= 0 ? " · microbatch " + hit[3] : "");
    tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; tip.style.display = "block";
  }});
  canvas.addEventListener("dblclick", () => {{ lo = 0; hi = view.duration; draw(); }});
  document.querySelectorAll("tr.pick").forEach(tr => tr.addEventListener("click", () => show(Number(tr.dataset.view))));
  const start = D.views.findIndex(v => v.median);
  if (start >= 0) show(start);
  document.body.dataset.ready = "1";
  document.body.dataset.views = String(D.views.length);
}})();
</script>
</body></html>
"""
