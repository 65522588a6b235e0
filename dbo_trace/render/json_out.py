"""--json: the document, for machines."""

from __future__ import annotations

import json

from dbo_trace.analysis.report import Report
from dbo_trace.render.document import build_document


class JsonRenderer:
    def render(self, report: Report) -> str:
        return json.dumps(build_document(report), indent=2) + "\n"
