"""Every string from input (kernel, op, thread and file names, counter keys, an archive's fields) made
inert for the output it goes into: the terminal, GitHub-flavoured Markdown, HTML, a matplotlib
picture. Renderers call these at the point a string from the data meets the output's syntax; the
JSON keeps the data as it is (escaped as JSON).

One visible form for what must not act: a control character (C0, DEL, C1: ESC starts the OSC 52
clipboard write, OSC 0 title and OSC 8 link sequences, BEL ends them, CR and backspace overwrite
what was printed) or a bidirectional override (U+202A-202E, U+2066-2069: text shown in another
order than it reads) is written as its Python escape, `\\x1b`, `\\u202e`, so it can be seen and
searched for, and does nothing.
"""

from __future__ import annotations

import dataclasses

import html
import json
import re
from typing import Any, Iterator, TypeVar, cast

from dbo_trace.errors import inert
from dbo_trace.lazy import LazyList


def visible(text: str) -> str:
    """The text with every control and bidi character written as its escape: one inert line (the
    one rule, errors.inert, which the CLI's errors and the recorder's progress use too)."""
    return inert(text)


def terminal_text(text: str) -> str:
    """For a terminal: no control sequence can be sent. (Rich markup is not parsed in data: the
    renderers print it with markup and emoji off, or as rich Text.)"""
    return visible(text)


# In a document's JSON (msgspec writes C0 and DEL as \\u escapes, the rest as UTF-8): any
# character visible() would escape. A document without one is shown as it is, without a walk.
_UNSAFE_IN_JSON = re.compile(rb"\\u00[01][0-9a-fA-F]|\\u007[fF]|\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


_UNSAFE_LEADS = (b"\\u00", b"\x7f", b"\xc2", b"\xe2")  # how every match of _UNSAFE_IN_JSON begins

T = TypeVar("T")


def terminal_document(value: T) -> T:
    """A document (the ReportDocument tree of Structs, or dicts, lists, strings, numbers) with every
    string, keys too, made terminal_text: the same tree, its Structs of the same types."""
    try:
        if not any(_unsafe(piece) for piece in _encoded(value)):
            return cast(T, _lazy_inert(value))  # the common case, at the encoder's speed: nothing to escape
    except (TypeError, ValueError, OverflowError):  # a lone surrogate (UnicodeEncodeError), ...: walk
        pass
    return cast(T, _terminal_walk(value))


_PIECE_ITEMS = 1000  # items of a long list encoded at once: 100,000 steps are 300 MB of JSON


def _encoded(value: Any) -> Iterator[bytes]:
    """The value's JSON in pieces, a long list (a document's steps) a slice at a time, so that a long
    run's document is not held twice over as one string; a Struct's keys are its field names."""
    import msgspec

    if isinstance(value, msgspec.Struct):
        for f in value.__struct_fields__:
            field = getattr(value, f)
            if field is not msgspec.UNSET:  # a key the document leaves out (an older version's)
                yield from _encoded(field)
    elif isinstance(value, list) and len(value) > _PIECE_ITEMS:
        for at in range(0, len(value), _PIECE_ITEMS):
            yield msgspec.json.encode(value[at : at + _PIECE_ITEMS], enc_hook=_unbuilt)
    else:
        yield msgspec.json.encode(value, enc_hook=_unbuilt)


def _unbuilt(value: Any) -> Any:
    """A lazy list's items are not looked at here: each is made inert when built (_lazy_inert)."""
    if isinstance(value, LazyList):
        return []
    raise TypeError(f"cannot encode {type(value).__name__}")


def _lazy_inert(value: Any) -> Any:
    """The value with each lazy list in it (a document's step blocks, built when read) making its
    items inert as they are built; the value itself where it holds none."""
    import msgspec

    if isinstance(value, LazyList):
        return value.mapped(_terminal_walk)
    if isinstance(value, msgspec.Struct):
        changed = {}
        for f in value.__struct_fields__:
            old = getattr(value, f)
            if (new := _lazy_inert(old)) is not old:
                changed[f] = new
        return msgspec.structs.replace(value, **changed) if changed else value
    if isinstance(value, list) and value and isinstance(value[0], msgspec.Struct):
        items = [_lazy_inert(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value)) else value
    return value


def _unsafe(data: bytes) -> bool:
    # Each match starts with one of these bytes: looked for first, at memchr's speed (the regex's
    # alternation tries every position: 1.9 s on the 100,000 steps of a long run's document).
    return any(lead in data for lead in _UNSAFE_LEADS) and _UNSAFE_IN_JSON.search(data) is not None


def _terminal_walk(value: Any) -> Any:
    import msgspec

    if isinstance(value, str):
        return terminal_text(value)
    if isinstance(value, LazyList):
        return value.mapped(_terminal_walk)
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(value, **{f: _terminal_walk(getattr(value, f)) for f in value.__struct_fields__})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # an analysis dataclass the document holds
        fields = dataclasses.fields(value)
        return dataclasses.replace(value, **{f.name: _terminal_walk(getattr(value, f.name)) for f in fields if f.init})
    if isinstance(value, tuple):
        return tuple(_terminal_walk(v) for v in value)
    if isinstance(value, dict):
        return {terminal_text(k) if isinstance(k, str) else k: _terminal_walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_terminal_walk(v) for v in value]
    return value


class Markdown(str):
    """Text already made safe Markdown (markdown_code's output): md_table does not escape it again."""


# What starts Markdown syntax inside a line: emphasis and code (`*`, `` ` ``, `~`), links and images
# (`[`, `]`), the escape itself; raw HTML and autolinks (`<` before a tag's first character) and
# entities (`&name;`). `_` only where it could open or close emphasis: a run of underscores between
# letters or digits cannot (CommonMark's flanking rules), so `ncclDevKernel_AllToAll` stays as it is.
# `|` is escaped by the table writer, where it matters. `$` too: GitHub renders `$...$` as math.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*~\[\]$]|<(?=[A-Za-z/!?])|&(?=#?\w+;)")
_UNDERSCORES = re.compile("_+")
# At the start of a line's text (a list item's): a block quote, heading, list item or ordered list.
_BLOCK_START = re.compile(r"^(?:(>|(?:#{1,6}|[+\-])(?=\s|$))|(\d{1,9})([.)])(?=\s|$))")
# GitHub links `@user` and `@org/team` (and e-mail addresses) and turns `http://`, `https://` and
# `www.` into links, also from the text a backslash escape leaves; a word joiner (U+2060, shown as
# nothing) after the `@`, the scheme's `:` and the `www` stops each without changing what a reader
# sees.
_AUTOLINKED = re.compile(r"@(?=\w)|:(?=//)|(?i:\bwww)(?=\.)")
WORD_JOINER = "\u2060"


def _underscores(m: re.Match[str]) -> str:
    text, (start, end) = m.string, m.span()
    inert = start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    return m.group() if inert else "\\_" * (end - start)


def markdown_text(text: str, line_start: bool = True) -> Markdown:
    """Text from input as plain text in a line of GitHub-flavoured Markdown: one line, no markup, no
    raw HTML, no images, no links, no @mentions. line_start: the text may begin a line (a list
    item's), where `>`, `#`, `-` or `1.` would start a block; not in a table's cell."""
    out = _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(), visible(text))
    out = _UNDERSCORES.sub(_underscores, out)
    if line_start:
        out = _BLOCK_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3), out)
    return Markdown(_AUTOLINKED.sub(lambda m: m.group() + WORD_JOINER, out))


def markdown_html(text: str) -> Markdown:
    """Text from input inside a raw HTML block of the Markdown (a `<details>` block's `<summary>`
    line): CommonMark passes an HTML block through as written, so a backslash escapes nothing there
    and a tag in the text would be a tag: HTML-escaped (html_text), with markdown_text's word joiners
    against GitHub's mentions and autolinks."""
    return Markdown(_AUTOLINKED.sub(lambda m: m.group() + WORD_JOINER, html_text(text)))


def markdown_code(text: str) -> Markdown:
    """A name as inline code: shown exactly (one line), fenced by more backticks than any run inside
    it, so nothing in it is Markdown, HTML, a link or a mention. Pipes are escaped by the table
    writer (GitHub reads `\\|` in a table cell's code as `|`)."""
    text = visible(text)
    if not text:
        return Markdown("")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""  # CommonMark strips one space each side
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")


def markdown_cell(cell: Any) -> str:
    """One table cell: text from input escaped (markdown_text) unless it is Markdown already, and
    every `|` escaped so that no cell can end early or forge a row."""
    text = cell if isinstance(cell, Markdown) else markdown_text(str(cell), line_start=False)
    return text.replace("|", "\\|")


def html_text(text: str) -> str:
    """Text from input as HTML text or an attribute's value: escaped, and visible()."""
    return html.escape(visible(text), quote=True)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value: Any) -> str:
    """JSON to embed in a <script> element: no `<` (so neither `</script>` nor `<!--<script>`, which
    puts the HTML parser in a state where the element's own end tag no longer ends it), `>` or `&`
    appears; JSON.parse reads the \\u escapes back as the characters."""
    text = json.dumps(value, separators=(",", ":"))  # ASCII only: every other character is a \\u escape
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group()], text)


def plot_text(text: str) -> str:
    """Text from input for matplotlib: every `$` escaped, so no math is parsed (an unbalanced or
    invalid `$...$` would abort the picture), and visible() (SVG is XML, which has no control
    characters)."""
    return visible(text).replace("$", r"\$")


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_inert(text: str) -> str:
    """A JSON text whose strings hold DEL, C1 and bidi characters as \\u escapes instead of raw:
    the same data, and nothing acts when it is printed (the JSON encoder escapes C0 already)."""
    if text.isascii() and "\x7f" not in text:  # the usual document: isascii is a flag, `in` a memchr
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_UNSAFE.search(text) else text


def json_inert_utf8(text: bytes) -> bytes:
    """json_inert over JSON as UTF-8 (--json's pieces), without decoding the usual all-ASCII text."""
    if text.isascii() and b"\x7f" not in text:
        return text
    return json_inert(text.decode()).encode()
