"""Renderers: each turns a finished Report into one output and computes nothing (see document.py).

One protocol, in render/base.py with the options and as_bytes (re-exported here), and one registry,
here. A new output is one module with one class that has a name, the file suffixes it writes,
whether it is binary, and render(report, options); registered in RENDERERS below, it is reachable
from `report` by its flag or by an output file's suffix, from `bundle`, and from the golden tests.
"""

from __future__ import annotations

from pathlib import Path

from dbo_trace.render.base import Renderer, RenderOptions, as_bytes

__all__ = ["RENDERERS", "Renderer", "RenderOptions", "as_bytes", "for_path"]


def _registry() -> dict[str, Renderer]:
    from dbo_trace.render.html import HtmlRenderer
    from dbo_trace.render.json_out import JsonRenderer
    from dbo_trace.render.markdown import MarkdownRenderer
    from dbo_trace.render.perfetto import PerfettoRenderer
    from dbo_trace.render.terminal import TerminalRenderer
    from dbo_trace.render.timeline import TimelineRenderer

    found: list[Renderer] = [
        TerminalRenderer(),
        JsonRenderer(),
        MarkdownRenderer(),
        HtmlRenderer(),
        PerfettoRenderer(),
        TimelineRenderer("png"),
        TimelineRenderer("svg"),
    ]
    return {r.name: r for r in found}


RENDERERS: dict[str, Renderer] = _registry()


def for_path(path: Path) -> Renderer | None:
    """The renderer an output file's suffix asks for, or None for a suffix none writes."""
    suffix = path.suffix.lower()
    return next((r for r in RENDERERS.values() if suffix in r.suffixes), None)
