"""The figure blocks of a window (the run, a rank, a step): each field declares its source and
rounding (`figure`), so the JSON and the every-figure tables name no figure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Annotated, Any, NamedTuple, TypeVar

import msgspec

from dbo_trace.analysis.metrics import WindowMetrics
from dbo_trace.analysis.model import StepTable
from dbo_trace.analysis.verdict.decision import is_host_bound
from dbo_trace.render.document.base import Count, Struct, _r


# ---- window figures -------------------------------------------------------------------------------

FIGURE = "figure"  # the key of a figure's declaration in its field's msgspec.Meta(extra=...)


def figure(source: str | Callable[[WindowMetrics], Any], digits: int | None = 3) -> msgspec.Meta:
    """A window figure's one declaration, on its field: where its value comes from (a WindowMetrics
    attribute, or a function of the metrics) and its rounding (None: a count or a flag, as it is)."""
    value = attrgetter(source) if isinstance(source, str) else source
    return msgspec.Meta(extra={FIGURE: (value, digits)})


class Figures(Struct):
    """A block of window figures (gpu, comm, host, graphs): every field that carries a figure() is
    built from a window's WindowMetrics and listed by every renderer that lists figures."""


F = TypeVar("F", bound=Figures)


class FigureField(NamedTuple):
    name: str
    source: Callable[[WindowMetrics], Any] | None  # None: a field that is not a figure (given by the builder)
    digits: int | None


_FIGURE_FIELDS: dict[type[Figures], tuple[FigureField, ...]] = {}


def figure_fields(cls: type[Figures]) -> tuple[FigureField, ...]:
    """A block's fields in order, each with its figure's declaration; read from the fields'
    annotations once per class."""
    found = _FIGURE_FIELDS.get(cls)
    if found is None:
        out = []
        for f in msgspec.structs.fields(cls):
            extras = [m.extra for m in getattr(f.type, "__metadata__", ()) if isinstance(m, msgspec.Meta) and m.extra]
            source, digits = extras[-1].get(FIGURE, (None, None)) if extras else (None, None)
            out.append(FigureField(f.name, source, digits))
        found = _FIGURE_FIELDS[cls] = tuple(out)
    return found


def figures_of(cls: type[F], m: WindowMetrics, **given: Any) -> F:
    """A block of figures of one window, every figure from its declaration; `given`: the fields
    that are not figures of the window (or a figure the caller decides, such as a rank's host.bound)."""
    values = []
    for name, source, digits in figure_fields(cls):
        if name in given:
            values.append(given[name])
        elif source is None:
            raise TypeError(f"{cls.__name__}.{name} is neither a figure nor given")
        else:
            value = source(m)
            values.append(value if digits is None else _r(value, digits))
    return cls(*values)


def figure_rows(window: Struct) -> Iterator[tuple[str, Any]]:
    """Every figure of a window (a rank's, a step's, the run's) as (`block.key`, its value), in the
    document's order: what the every-figure tables list."""
    for block in window.__struct_fields__:
        value = getattr(window, block)
        if isinstance(value, Figures):
            for name, source, _ in figure_fields(type(value)):
                if source is not None:
                    yield f"{block}.{name}", getattr(value, name)


class Gpu(Figures):
    utilization: Annotated[float | None, figure("utilization", 4)]
    busy_us: Annotated[float | None, figure("gpu_busy_us")]
    span_us: Annotated[float | None, figure("span_us")]
    compute_busy_us: Annotated[float | None, figure("compute_busy_us")]
    copy_busy_us: Annotated[float | None, figure("copy_busy_us")]
    kernels: Annotated[Count, figure("kernels", None)]


class Comm(Figures):
    busy_us: Annotated[float | None, figure("comm_busy_us")]
    hidden_us: Annotated[float | None, figure("comm_hidden_us")]
    hidden_fraction: Annotated[float | None, figure("comm_hidden_fraction", 4)]
    exposed_us: Annotated[float | None, figure("comm_exposed_us")]
    hidden_under_other_ubatch_us: Annotated[float | None, figure("comm_hidden_cross_us")]
    hidden_under_other_ubatch_fraction: Annotated[float | None, figure("comm_hidden_cross_fraction", 4)]
    kernels: Annotated[Count, figure("comm_kernels", None)]


class Host(Figures):
    # A step's own test; a rank's and the run's is their verdict's (given by rank_block and build_document).
    bound: Annotated[bool | None, figure(is_host_bound, None)]
    idle_us: Annotated[float | None, figure("host_idle_us")]
    idle_fraction: Annotated[float | None, figure("host_idle_fraction", 4)]
    idle_gaps: Annotated[Count, figure("host_idle_gaps", None)]
    all_idle_gaps: Annotated[Count, figure("idle_gaps", None)]
    launches: Annotated[Count, figure("launches", None)]
    launch_us: Annotated[float | None, figure("launch_us")]
    median_launch_us: Annotated[float | None, figure("median_launch_us")]
    median_kernel_us: Annotated[float | None, figure("median_kernel_us")]
    median_queue_us: Annotated[float | None, figure("median_queue_us")]
    long_graph_launches: Annotated[Count, figure("long_graph_launches", None)]
    max_graph_launch_us: Annotated[float | None, figure("max_graph_launch_us")]


class Graphs(Figures):
    launches: Annotated[Count, figure("graph_launches", None)]
    replayed_kernels: Annotated[Count, figure("replayed_kernels", None)]
    replayed_kernel_fraction: Annotated[float | None, figure("replayed_kernel_fraction", 4)]
    replayed_gpu_fraction: Annotated[float | None, figure("replayed_gpu_fraction", 4)]


class StepGraphs(Graphs):
    """A rank's and the run's graphs block: the figures, then its steps by how they reached the GPU."""

    steps_replayed: Count
    steps_captured: Count  # captured graphs (recorded, not run)
    steps_eager: Count
    captured_launches: Count


def graph_step_counts(tables: list[StepTable]) -> dict[str, int]:
    """Steps (a rank's, or every rank's) by how they reached the GPU: replayed graphs, captured
    graphs (recorded, not run), eager."""
    steps = sum(len(t) for t in tables)
    replayed = sum(int(t.replayed.sum()) for t in tables)
    captured = sum(int(((t.captured_launches > 0) & ~t.replayed).sum()) for t in tables)
    return {
        "steps_replayed": replayed,
        "steps_captured": captured,
        "steps_eager": steps - replayed - captured,
        "captured_launches": sum(int(t.captured_launches.sum()) for t in tables),
    }
