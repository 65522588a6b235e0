"""Renderers: each turns a finished Report into one output and computes nothing (see document.py).

One protocol, in render/base.py with the options and as_bytes (re-exported here), and one registry,
here. A new output is one module with one class that has a name, the file suffixes it writes,
whether it is binary, and render(report, options); registered in _TABLE below (its module imported
when first used), it is reachable from `report` by its flag or by an output file's suffix, from
`bundle`, and from the golden tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from dbo_trace.render.base import Renderer, RenderOptions, as_bytes

__all__ = ["RENDERERS", "Renderer", "RenderOptions", "as_bytes", "for_path"]


# name: (module under dbo_trace.render, class, its argument or None, the output suffixes it writes). A
# renderer's module is imported when the renderer is first asked for, not when the registry is: a
# terminal report does not import the HTML, Perfetto and picture renderers (issue 55: start-up).
# tests/unit/test_render_registry.py checks each class's own name and suffixes against this table.
_TABLE: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {
    "terminal": ("terminal", "TerminalRenderer", None, (".txt",)),
    "json": ("json_out", "JsonRenderer", None, (".json",)),
    "markdown": ("markdown", "MarkdownRenderer", None, (".md",)),
    "html": ("html", "HtmlRenderer", None, (".html", ".htm")),
    "perfetto": ("pictures.perfetto", "PerfettoRenderer", None, (".pftrace", ".perfetto-trace")),
    "png": ("pictures.timeline_png", "TimelineRenderer", "png", (".png",)),
    "svg": ("pictures.timeline_png", "TimelineRenderer", "svg", (".svg",)),
}


class _Registry(Mapping[str, Renderer]):
    """The renderers by name, each built (its module imported) on first use."""

    def __init__(self) -> None:
        self._built: dict[str, Renderer] = {}

    def __getitem__(self, name: str) -> Renderer:
        if name not in self._built:
            module, cls, argument = _TABLE[name][:3]
            made = getattr(importlib.import_module(f"dbo_trace.render.{module}"), cls)
            self._built[name] = made() if argument is None else made(argument)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_TABLE)

    def __len__(self) -> int:
        return len(_TABLE)


RENDERERS: Mapping[str, Renderer] = _Registry()


def suffixes() -> dict[str, tuple[str, ...]]:
    """Each renderer's output suffixes, by name, without importing any renderer."""
    return {name: entry[3] for name, entry in _TABLE.items()}


def for_path(path: Path) -> Renderer | None:
    """The renderer an output file's suffix asks for, or None for a suffix none writes."""
    suffix = path.suffix.lower()
    return next((RENDERERS[name] for name, entry in _TABLE.items() if suffix in entry[3]), None)
