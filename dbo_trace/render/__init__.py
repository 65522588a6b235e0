"""Renderers: each reads a Report and returns text. No arithmetic lives here; see document.py."""

from dbo_trace.render.json_out import JsonRenderer
from dbo_trace.render.markdown import MarkdownRenderer
from dbo_trace.render.terminal import TerminalRenderer

RENDERERS = {"terminal": TerminalRenderer, "json": JsonRenderer, "markdown": MarkdownRenderer}
