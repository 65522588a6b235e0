"""analyze(): loaded traces and options in, a Report out; analyze_paths() reads them first."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dbo_trace.analysis.ranks import cross_rank
from dbo_trace.analysis.report import Options, Report, analyze_rank, combine
from dbo_trace.trace.load import Loaded, discover, load


def options_from_manifests(options: Options, manifests: list[dict]) -> Options:
    """A bundle may declare its communication kernels (emulated traffic) and layer count."""
    extra = tuple(p for m in manifests for p in m.get("comm_kernels", []) if isinstance(p, str))
    layers = options.layers or next((m["layers"] for m in manifests if isinstance(m.get("layers"), int)), None)
    return replace(options, comm_patterns=tuple(dict.fromkeys(options.comm_patterns + extra)), layers=layers)


def analyze(loaded: Loaded, options: Options, inputs: list[str]) -> Report:
    options = options_from_manifests(options, loaded.manifests)
    ranks = []
    for tl in loaded.timelines:
        logs = [log for log in loaded.logs if log.pid is None or log.pid == tl.pid]
        ranks.append(analyze_rank(tl, logs, options))
    report = combine(ranks, options, inputs, loaded.warnings)
    report.cross_rank = cross_rank(report.ranks)
    return report


def analyze_paths(paths: list[Path], options: Options) -> Report:
    """Read and analyse, without a progress bar (the CLI shows one, so it calls the steps itself)."""
    return analyze(load(discover(paths)), options, [str(p) for p in paths])
