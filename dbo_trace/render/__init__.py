"""Renderers: each turns a finished Report into one output and computes nothing (see document.py).

One protocol and one registry. A new output is one module with one class that has a name, the file
suffixes it writes, whether it is binary, and render(report, options); registered in RENDERERS
below, it is reachable from `report` by its flag or by an output file's suffix, from `bundle`, and
from the golden tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dbo_trace.analysis.report import Report


@dataclass(frozen=True)
class RenderOptions:
    color: bool = False  # terminal: ANSI colour
    width: int | None = None  # terminal: columns (None: the terminal's, at least 80)
    image: str | None = None  # markdown: a picture to link, relative to where the Markdown will live
    step: int | str | None = None  # pictures: the step to draw, as --step names it (None: the median step)
    rank: int | None = None  # pictures: the rank to draw (None: the first with steps)
    all_ranks: bool = False  # pictures: every rank's step on one aligned time axis, waits marked
    windows: dict[int, tuple[float, float]] | None = None  # perfetto: only these (start, end) per rank


class Renderer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def suffixes(self) -> tuple[str, ...]: ...  # output files with these suffixes get this renderer

    @property
    def binary(self) -> bool: ...

    def render(self, report: Report, options: RenderOptions) -> str | bytes: ...


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


def as_bytes(rendered: str | bytes) -> bytes:
    """A renderer's output as the bytes of a file (text as UTF-8)."""
    return rendered.encode() if isinstance(rendered, str) else rendered


def for_path(path: Path) -> Renderer | None:
    """The renderer an output file's suffix asks for, or None for a suffix none writes."""
    suffix = path.suffix.lower()
    return next((r for r in RENDERERS.values() if suffix in r.suffixes), None)
