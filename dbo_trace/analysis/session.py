"""analyze(): loaded traces and options in, a Report out; analyze_paths() reads them first."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from dbo_trace.analysis.ranks import cross_rank
from dbo_trace.analysis.report import Options, Report, analyze_rank, combine
from dbo_trace.trace.errors import InputError
from dbo_trace.trace.load import Loaded, discover, load


def options_from_manifests(options: Options, manifests: list[dict]) -> Options:
    """A bundle may declare its communication kernels (emulated traffic) and layer count; both are
    checked here, since a manifest is input like any other."""
    extra: list[str] = []
    for m in manifests:
        declared = m.get("comm_kernels", [])
        if not isinstance(declared, list) or not all(isinstance(p, str) for p in declared):
            raise InputError("a bundle manifest's comm_kernels must be a list of regular expressions (strings)")
        for pattern in declared:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(
                    f"a bundle manifest's comm_kernels holds {pattern!r}, not a valid regular expression ({exc})"
                ) from None
        extra += declared
    layers = options.layers
    for m in manifests:
        value = m.get("layers")
        if value is None or layers:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"a bundle manifest's layers must be a positive whole number, not {value!r}")
        layers = value
    if options.comm_only:  # the user's set replaces everything, the manifest's too
        extra = []
    return replace(options, comm_patterns=tuple(dict.fromkeys(options.comm_patterns + tuple(extra))), layers=layers)


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
