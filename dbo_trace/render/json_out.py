"""--json: the document, for machines."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from dbo_trace.analysis.model import Report
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document import ReportDocument, StepBlock, build_document
from dbo_trace.render.safe import json_inert_utf8

STEP_BLOCKS_AT_ONCE = 128  # step blocks encoded and written together (json_chunks)


def json_text(document: Any) -> str:
    """The document (a ReportDocument, or compare's dict) as indented JSON (UTF-8, keys in the
    document's order). msgspec writes it in C: on a trace with thousands of steps the standard
    encoder took a fifth of `report`'s time (docs/performance.md), for the same bytes on the samples.
    DEL, C1 and bidi characters in strings are written as \\u escapes (safe.json_inert): the same
    data, inert when printed."""
    return b"".join(json_chunks(document)).decode()


def json_chunks(document: Any) -> Iterator[bytes]:
    """json_text's bytes, exactly, in pieces: a ReportDocument's step lists (its own and each
    rank's, built lazily in a long run's document) are encoded STEP_BLOCKS_AT_ONCE blocks at a time
    into the text around them. The whole document was encoded, indented, decoded, given its newline
    and encoded again, five copies of a text that is 17 MB at 3,245 steps, which set `report
    --json`'s peak (docs/performance.md). The lists are cut out by a placeholder with a random
    token, which no string from a trace can forge."""
    if not isinstance(document, ReportDocument):
        yield json_inert_utf8(msgspec.json.format(msgspec.json.encode(document), indent=2))
        yield b"\n"
        return
    token = secrets.token_hex(16)
    lists: dict[bytes, Sequence[StepBlock]] = {}

    def placeholder(steps: Sequence[StepBlock]) -> Any:
        key = f"dbo-trace-steps-{token}-{len(lists)}"
        lists[b'"' + key.encode() + b'"'] = steps
        return key

    shell = msgspec.structs.replace(
        document,
        steps=placeholder(document.steps),
        ranks=[msgspec.structs.replace(rank, steps=placeholder(rank.steps)) for rank in document.ranks],
    )
    text = msgspec.json.format(msgspec.json.encode(shell), indent=2)
    done = 0
    for at, key in sorted((text.index(key), key) for key in lists):
        line = text[text.rfind(b"\n", 0, at) + 1 : at]
        yield json_inert_utf8(text[done:at])
        yield from _list_chunks(lists[key], len(line) - len(line.lstrip(b" ")))
        done = at + len(key)
    yield json_inert_utf8(text[done:])
    yield b"\n"


def _list_chunks(items: Sequence[Any], indent: int) -> Iterator[bytes]:
    """A list as msgspec's indented format writes it where its key's line is `indent` deep: each
    part formatted alone (`[`, its items two deeper, `]`) and moved `indent` deeper. JSON strings
    hold no raw newline, so every newline in a part starts one of its lines."""
    if not len(items):
        yield b"[]"
        return
    deeper = b"\n" + b" " * indent
    yield b"["
    for a in range(0, len(items), STEP_BLOCKS_AT_ONCE):
        part = msgspec.json.format(msgspec.json.encode(items[a : a + STEP_BLOCKS_AT_ONCE]), indent=2)
        yield (b"," if a else b"") + json_inert_utf8(part[1:-2].replace(b"\n", deeper))  # from its first item's newline to its last line
    yield deeper + b"]"


class JsonRenderer:
    name, suffixes, binary = "json", (".json",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report), options)

    def render_document(self, d: ReportDocument, options: RenderOptions = RenderOptions()) -> str:
        return json_text(d)

    def render_chunks(self, report: Report, options: RenderOptions = RenderOptions()) -> Iterator[bytes]:
        """render's bytes in pieces, the step blocks built when written (what `report` writes)."""
        return json_chunks(build_document(report, lazy_steps=True))
