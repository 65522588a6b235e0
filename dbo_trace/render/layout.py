"""Plain-text layout for the terminal outputs: word wrapping that never splits a number from its unit,
and tables that fit a width by wrapping headers, wrapping text columns, dropping the columns the
reader needs least and, as a last resort, stacking each row into a paragraph. A number is never cut
and no line ends in a space."""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass
from typing import Callable

GAP = 2  # spaces between table columns
INDENT = 1  # spaces before a table's first column
HEADER_LINES = 3  # a header wraps onto at most this many lines before its column widens
MIN_WRAP = 12  # the narrowest a wrapping text column gets
MAX_WORD = 32  # nor narrower than its longest word up to this: names whole; a longer one (a kernel's) breaks
NEVER = 1_000  # Column.keep for a column that is never dropped
WRAP_KEEP = 5  # columns kept less than this go before a text column wraps (rows stay one line)
_GLUE = "\xa0"  # holds a number to its unit through textwrap (which breaks only at ASCII whitespace)
_UNIT = re.compile(r"(?<=\d) (?=(?:ms|us|s)\b)|(?<=±) | (?=±)")


PIPED_WIDTH = 80  # the columns of an output whose width nothing tells


def terminal_width() -> int:
    """The one rule for the columns a terminal output fits: $COLUMNS where set, else the width of the
    terminal stdout is (when it is one), else PIPED_WIDTH (piped or redirected); never under 80, the
    width every table is laid out and tested for (shutil.get_terminal_size reads them in this order)."""
    return max(80, shutil.get_terminal_size((PIPED_WIDTH, 24)).columns)


def cells(text: str) -> int:
    """The columns text takes in a terminal: a wide character (CJK, most emoji) two, a combining or
    zero-width one none (a name from input may hold any); one a character for ASCII."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - cells(text))
    return fill + text if right else text + fill


def _narrowed(lines_at: Callable[[int], list[str]], width: int, floor: int) -> list[str]:
    """lines_at(width), wrapped narrower where a line takes more columns than characters (textwrap
    counts characters) until every line fits width, or width can go no lower (floor)."""
    lines = lines_at(width)
    at = width
    while (over := max((cells(line) for line in lines), default=0) - width) > 0 and at > floor:
        at = max(floor, at - over)
        lines = lines_at(at)
    return lines


def wrap(text: str, width: int, first: str = "", rest: str = "", hyphens: bool = False, break_words: bool = True) -> list[str]:
    """Lines of at most width columns, first/rest prefixed; "1.30 ms" and "± 0.4" stay on one line.
    A single word longer than a line (a kernel's name) is broken, since nothing else would fit;
    break_words=False keeps it whole on a line of its own (a path in a warning, to be copied).
    hyphens: a hyphenated word may break after a hyphen (a table's labels: `dsv2lite-eager-` over
    `decode`, not `dsv2lite-eager-deco` over `de`)."""
    if text.isascii():
        return _wrap(text, width, first, rest, hyphens, break_words)
    wide = _widened(text)
    return _narrowed(
        lambda at: [line.replace(_WIDE, "") for line in _wrap(wide, at, first, rest, hyphens, break_words)], width,
        max(len(first), len(rest)) + 2,
    )  # fmt: skip


# After each wide character, so that textwrap, which counts characters, counts its second column
# (never in text from input, where every control character is escaped: safe.visible). Where a line
# breaks between the two, _narrowed wraps narrower.
_WIDE = "\x00"


def _widened(text: str) -> str:
    return "".join(c + _WIDE if not c.isascii() and cells(c) == 2 else c for c in text)


def _wrap(text: str, width: int, first: str, rest: str, hyphens: bool, break_words: bool = True) -> list[str]:
    glued = _UNIT.sub(_GLUE, text)
    lines = textwrap.wrap(
        glued,
        width=max(width, len(first) + 1, len(rest) + 1),
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=hyphens,
        break_long_words=break_words,
        replace_whitespace=True,
    ) or [first.rstrip()]
    return [line.replace(_GLUE, " ").rstrip() for line in lines]


def _header_lines(header: str, width: int) -> list[str]:
    lines = textwrap.wrap(_UNIT.sub(_GLUE, header), width=width, break_long_words=False, break_on_hyphens=True)
    return [line.replace(_GLUE, " ") for line in lines] or [""]


def _header_width(header: str, most: int = HEADER_LINES) -> int:
    """The narrowest width at which the header takes at most `most` lines."""
    words = _UNIT.sub(_GLUE, header).replace("-", "- ").split()
    w = max((len(x) for x in words), default=0)
    while len(_header_lines(header, w)) > most:
        w += 1
    return w


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = True  # numbers right-aligned, text left
    keep: int = NEVER  # the columns with the lowest keep are dropped first when the table is too wide
    wrap: bool = False  # text that may wrap at its spaces (never a column of numbers)


def table(title: str | None, columns: list[Column], rows: list[list[str]], width: int, what: str = "--json") -> list[str]:
    """The table as lines of at most width columns: every cell whole, on its row.

    Too wide, it tries in turn: headers on 2, then 3 lines; dropping the columns whose keep is below
    WRAP_KEEP (least kept first); wrapping its text columns; dropping the others; stacking each row."""
    shown = list(range(len(columns)))

    def fitted(most: int, wrapping: bool) -> list[int] | None:
        widths = [max([_header_width(columns[i].header, most), *(cells(r[i]) for r in rows)]) for i in shown]
        over = INDENT + sum(widths) + GAP * (len(shown) - 1) - width
        for j, i in enumerate(shown):  # shrink wrapping text, never below its longest name (up to MAX_WORD)
            if over > 0 and wrapping and columns[i].wrap:
                word = min(MAX_WORD, max((_longest_word(r[i]) for r in rows), default=0))
                cut = min(over, widths[j] - max(MIN_WRAP, word, _header_width(columns[i].header)))
                if cut > 0:
                    widths[j] -= cut
                    over -= cut
        return widths if over <= 0 else None

    widths = next((w for most in range(1, HEADER_LINES + 1) if (w := fitted(most, False)) is not None), None)
    drops = sorted((i for i in shown if columns[i].keep < NEVER), key=lambda i: (columns[i].keep, -i))
    wrapping = False
    while widths is None:
        if not wrapping and (not drops or columns[drops[0]].keep >= WRAP_KEEP) and any(c.wrap for c in columns):
            wrapping = True
        elif drops:
            shown.remove(drops.pop(0))
        else:
            return [*(wrap(title, width, "", "  ") if title else []), *stacked(columns, rows, width)]
        widths = fitted(HEADER_LINES, wrapping)

    cols = [columns[i] for i in shown]
    out = wrap(title, width, "", "  ") if title else []
    heads = [_header_lines(c.header, w) for c, w in zip(cols, widths)]
    depth = max(len(h) for h in heads)
    heads = [[""] * (depth - len(h)) + h for h in heads]  # headers sit on the rule
    for k in range(depth):
        out.append(_line([h[k] for h in heads], cols, widths))
    out.append(" " * INDENT + "─" * (sum(widths) + GAP * (len(widths) - 1)))
    for r in rows:
        pieces = [_wrapped_cell(r[i], w) if c.wrap and cells(r[i]) > w else [r[i]] for i, c, w in zip(shown, cols, widths)]
        for k in range(max(len(x) for x in pieces)):
            out.append(_line([x[k] if k < len(x) else "" for x in pieces], cols, widths))
    dropped = [columns[i].header for i in range(len(columns)) if i not in shown]
    if dropped:
        note = f"(not shown at {width} columns: {', '.join(dropped)}; a wider terminal or {what} has them)"
        out += wrap(note, width, "  ", "   ")
    return out


def _longest_word(text: str) -> int:
    return max((cells(word) for word in text.split()), default=0)


def _wrapped_cell(text: str, width: int) -> list[str]:
    """A wrapping cell's lines: at its spaces only, so a name (`afd-eager-dbo`, `not-overlapped`)
    is never split at its hyphens where it fits; a word wider than the column (a kernel's name past
    MAX_WORD) breaks after a hyphen where it has one, else where it must."""
    return wrap(text, width, hyphens=_longest_word(text) > width)


def _line(cells: list[str], cols: list[Column], widths: list[int]) -> str:
    parts = [_pad(cell, w, c.right) for cell, c, w in zip(cells, cols, widths)]
    return (" " * INDENT + (" " * GAP).join(parts)).rstrip()


def stacked(columns: list[Column], rows: list[list[str]], width: int) -> list[str]:
    """Each row as one paragraph of `header value` pairs, a pair never split across lines (a value
    never, unless it alone is wider than a line): for a width no columns fit."""
    out = []
    for r in rows:
        room = width - 4  # the continuation lines' indent
        glued = []
        for c, v in zip(columns, r):
            value = v.replace(" ", _GLUE) if cells(v) <= room else v  # a value whole on its line
            header = c.header.replace(" ", _GLUE)
            glued.append(header + (_GLUE if len(c.header) + 1 + cells(v) <= room else " ") + value)
        paragraph = _widened(", ".join(glued))

        def lines_at(at: int, paragraph: str = paragraph) -> list[str]:
            lines = textwrap.wrap(paragraph, at, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
            return [line.replace(_WIDE, "") for line in lines]

        out += [line.replace(_GLUE, " ") for line in _narrowed(lines_at, width, 6)]
    return out


def strip_trailing(text: str) -> str:
    """No line ends in a space (a colour reset after the spaces included)."""
    return re.sub(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", r"\1", text, flags=re.M)
