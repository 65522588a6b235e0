"""What every renderer needs: the options, the protocol, and how an output becomes file bytes.

Kept apart from the registry (render/__init__.py), which imports every renderer: a renderer imports
this module, never the package, so the two never import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dbo_trace.analysis.model import Report


@dataclass(frozen=True)
class RenderOptions:
    color: bool = False  # terminal: ANSI colour
    width: int | None = None  # terminal: columns (None: the terminal's, at least 80)
    image: str | None = None  # markdown: a picture to name, relative to image_base
    # markdown: what image is relative to: the Markdown file's folder (-o, an archive's summary.md),
    # or, for Markdown on stdout (whose file, if any, the command cannot know), the working directory
    image_base: str = "file"  # "file" or "cwd"
    step: int | str | None = None  # pictures: the step to draw, as --step names it (None: the median step)
    rank: int | None = None  # pictures: the rank to draw (None: the first with steps)
    all_ranks: bool = False  # pictures: every rank's step on one aligned time axis, waits marked
    window: str | None = None  # pictures: a span to draw instead of a step, as --window names it (view.parse_window)
    windows: dict[int, tuple[float, float]] | None = None  # perfetto: only these (start, end) per rank
    host_stacks: bool = False  # terminal: the host idle by sampled Python frame as tables (Markdown always has them)
    layer: int | None = None  # terminal, Markdown: only this layer's comm operations and hand-overs (--layer)


class Renderer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def suffixes(self) -> tuple[str, ...]: ...  # output files with these suffixes get this renderer

    @property
    def binary(self) -> bool: ...

    def render(self, report: Report, options: RenderOptions) -> str | bytes: ...


def as_bytes(rendered: str | bytes) -> bytes:
    """A renderer's output as the bytes of a file (text as UTF-8)."""
    return rendered.encode() if isinstance(rendered, str) else rendered
