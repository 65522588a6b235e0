"""--json: the document, for machines."""

from __future__ import annotations

from typing import Any

import msgspec

from dbo_trace.analysis.report import Report
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document import ReportDocument, build_document
from dbo_trace.render.safe import json_inert


def json_text(document: Any) -> str:
    """The document (a ReportDocument, or compare's dict) as indented JSON (UTF-8, keys in the
    document's order). msgspec writes it in C: on a trace with thousands of steps the standard
    encoder took a fifth of `report`'s time (docs/performance.md), for the same bytes on the samples.
    DEL, C1 and bidi characters in strings are written as \\u escapes (safe.json_inert): the same
    data, inert when printed."""
    return json_inert(msgspec.json.format(msgspec.json.encode(document), indent=2).decode()) + "\n"


class JsonRenderer:
    name, suffixes, binary = "json", (".json",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report), options)

    def render_document(self, d: ReportDocument, options: RenderOptions = RenderOptions()) -> str:
        return json_text(d)
