"""The way from the user's paths to a Report: find the inputs, read them (each rank in its own worker
process where there are several), check the manifests' declarations, analyse. The one entry point
that does I/O; dbo_trace.analysis is pure (arrays in, reports out)."""

from __future__ import annotations

import os
import re
from concurrent.futures import as_completed
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from dbo_trace.analysis.model import Options, RankAnalysis, Report
from dbo_trace.analysis.rank import analyze_rank
from dbo_trace.analysis.report import combine
from dbo_trace.analysis.roles import ATTENTION, FFN, RolesInfo, event_window, restrict, roles_info, wall_offset_us
from dbo_trace.trace.alloc import give_back_freed_memory, reuse_freed_memory
from dbo_trace.trace.errors import InputError
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.load import Found, Loaded, discover, load, rank_order, read_logs, read_samples, read_timelines, settle_ranks
from dbo_trace.trace.pystacks import StackSamples
from dbo_trace.trace.timeline import Timeline
from dbo_trace.trace.workers import process_pool


def with_roles(options: Options, manifests: list[dict], roles: dict[str, str]) -> Options:
    """A bundle of a disaggregated run (its manifest's `afd` block or `roles`): the AFD round-trip
    model applies, and each trace keeps the role the manifest gives it."""
    afd = options.afd or any(
        isinstance(m.get("roles"), dict) or (isinstance(m.get("afd"), dict) and m["afd"].get("role", ATTENTION) == ATTENTION)
        for m in manifests
    )  # an FFN server recorded alone has no round trips of its own
    return replace(options, afd=afd, roles=tuple(sorted(roles.items())))


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
    envs = [m["env"] for m in manifests if isinstance(m.get("env"), dict)]
    sms = [v for env in envs if isinstance(v := env.get(COMM_SMS_ENV), str)]
    return replace(
        options,
        comm_patterns=tuple(dict.fromkeys(options.comm_patterns + tuple(extra))),
        layers=layers,
        comm_sms=sms[0] if sms else None,
        env_recorded=bool(envs),
    )


COMM_SMS_ENV = "VLLM_DBO_COMM_SMS"  # vLLM's SMs for DBO's comm kernels (default 20 on CUDA)


def with_sm_evidence(r: RankAnalysis, options: Options) -> RankAnalysis:
    """The rank with the launch shape of the kernel that crowded out most held-back comm, read back
    from its trace's args (a second pass over the file, only where comm was crowded)."""
    from collections import Counter

    from dbo_trace.analysis.exposure import CROWDED
    from dbo_trace.analysis.held import CAUSES
    from dbo_trace.analysis.ledger import sm_evidence
    from dbo_trace.trace.event_args import event_args

    d = r.detail
    held = d.held if d is not None else None
    if d is None or held is None:
        return r
    crowded = np.flatnonzero(held.cause == CAUSES.index(CROWDED))
    if not len(crowded):
        return r
    tl = d.timeline
    holder_names = tl.gpu.name[held.holder[crowded]]
    top, count = Counter(holder_names.tolist()).most_common(1)[0]
    first = crowded[np.flatnonzero(holder_names == top)[0]]
    comm, holder = int(held.kernel[first]), int(held.holder[first])
    lo = float(min(tl.gpu.start[comm], tl.gpu.start[holder]))
    hi = float(max(tl.gpu.end[comm], tl.gpu.end[holder]))
    args = event_args(tl.source, (lo, hi), tl.extents)

    def args_of(g: int) -> dict:
        return args.get((True, float(tl.gpu.start[g]), int(tl.gpu.correlation[g])), {})

    devices = tl.metadata.get("deviceProperties")
    holder_args = args_of(holder)
    device = {}
    if isinstance(devices, list):
        mine = [p for p in devices if isinstance(p, dict) and p.get("id") == holder_args.get("device")]
        first_device = devices[0] if devices and isinstance(devices[0], dict) else {}
        device = mine[0] if mine else first_device
    evidence = sm_evidence(
        holder_name=tl.names[top], holder_args=holder_args, comm_name=tl.names[int(tl.gpu.name[comm])],
        comm_args=args_of(comm), held=int(count), device=device, comm_sms=options.comm_sms,
        env_recorded=options.env_recorded,
    )  # fmt: skip
    return replace(r, sm_evidence=evidence)


def logs_of(tl: Timeline, logs: list[EventLogData]) -> list[EventLogData]:
    """The event logs written by this trace's process (or by any, where a log does not say)."""
    return [log for log in logs if log.pid is None or log.pid == tl.pid]


def samples_of(tl: Timeline, samples: list[StackSamples]) -> list[StackSamples]:
    """The Python stack samples of this trace's process (py-spy's pid is the process's)."""
    return [s for s in samples if tl.pid is not None and tl.pid in s.pids()]


def analyze(loaded: Loaded, options: Options, inputs: list[str]) -> Report:
    options = with_roles(options_from_manifests(options, loaded.manifests), loaded.manifests, loaded.roles)
    timelines, info = restrict_roles(loaded.timelines, options, loaded.manifests)
    ranks = [
        with_sm_evidence(analyze_rank(tl, logs_of(tl, loaded.logs), options, rank=n, samples=samples_of(tl, loaded.samples)), options)
        for n, tl in zip(loaded.ranks, timelines)
    ]
    return combine(ranks, options, inputs, loaded.warnings, roles=info)


def restrict_roles(timelines: list[Timeline], options: Options, manifests: list[dict]) -> tuple[list[Timeline], RolesInfo | None]:
    """With roles, the FFN's traces cut to the attention traces' window (one clock,
    baseTimeNanoseconds): the FFN's last receive waits out the attention side's profiler export."""
    role = dict(options.roles)
    present = [role[k] for tl in timelines if (k := os.path.normpath(tl.source)) in role]
    info = roles_info(manifests, present)
    attention = [tl for tl in timelines if role.get(os.path.normpath(tl.source)) == ATTENTION]
    windows = [w for tl in attention if (w := event_window(tl)) is not None]
    if info is None or not attention or not windows:
        return timelines, info
    ref = attention[0]
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    out, cut = [], False
    for tl in timelines:
        offset = wall_offset_us(tl, ref)
        if role.get(os.path.normpath(tl.source)) == FFN and offset is not None:
            tl = restrict(tl, lo - offset, hi - offset)
            cut = True
        out.append(tl)
    return out, replace(info, ffn_window_restricted=cut)


def _read_and_analyze(
    trace: Path, index: int, logs: list[EventLogData], options: Options, samples: list[StackSamples]
) -> list[RankAnalysis] | str:
    """One input's ranks in a worker process (one, or an Nsight export's processes): their reports,
    or the one-line error of the file."""
    try:
        reuse_freed_memory()  # this worker's previous rank gave it back
        timelines = read_timelines(trace, index)
        give_back_freed_memory()
        return [
            with_sm_evidence(analyze_rank(tl, logs_of(tl, logs), options, samples=samples_of(tl, samples)), options)
            for tl in timelines
        ]
    except InputError as exc:
        return str(exc)


def workers_for(traces: int, asked: int | None = None, total_bytes: int | None = None) -> int:
    """Worker processes: as asked (--workers, else DBO_TRACE_WORKERS), else one per core where the
    input is large enough to repay their start-up; no more than the traces where there are several
    (one large trace is decoded by all of them)."""
    if asked is None:
        env = os.environ.get(WORKERS_ENV, "")
        if env.isdigit() and int(env) > 0:
            asked = int(env)
        elif total_bytes is not None and total_bytes < PARALLEL_MIN_FILE_BYTES:
            asked = 1  # a few MB: spawning workers would cost more than reading
        else:
            asked = os.cpu_count() or 1
    return max(1, asked if traces <= 1 else min(asked, traces))


WORKERS_ENV = "DBO_TRACE_WORKERS"
PARALLEL_MIN_FILE_BYTES = 16 << 20  # on disk (gzipped traces: ~150 MB of JSON)


def analyze_found(
    found: Found, options: Options, inputs: list[str], workers: int = 1, progress: Callable[[int], None] | None = None
) -> Report:
    """Read and analyse what discover() found. With workers > 1 and several traces, each rank is read
    and analysed in its own process, workers at a time; with one large trace, its events are decoded
    by the workers. The report is the same as with one process."""
    reuse_freed_memory()
    if workers <= 1 or len(found.traces) < 2 or found.roles:  # roles: the FFN is cut to the attention's window first
        loaded = load(found, progress, workers)  # one trace: its decoding in parallel
        give_back_freed_memory()
        return analyze(loaded, options, inputs)
    options = options_from_manifests(options, found.manifests)
    logs, warnings = read_logs(found)
    samples, sample_warnings = read_samples(found)
    warnings += sample_warnings
    results: dict[int, list[RankAnalysis] | str] = {}
    done = 0
    with process_pool(workers) as pool:
        futures = {pool.submit(_read_and_analyze, t, i, logs, options, samples): i for i, t in enumerate(found.traces)}
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            done += os.path.getsize(found.traces[i])
            if progress:
                progress(done)
    ranks = [rank for _, r in sorted(results.items()) if not isinstance(r, str) for rank in r]
    errors = [r for _, r in sorted(results.items()) if isinstance(r, str)]
    # The workers analysed each rank before every trace's claim was known: the numbers are decided
    # now, once (settle_ranks), and given to the reports; a report's number differs from its claim
    # only where claims clashed.
    numbers, settle_warnings = settle_ranks([r.detailed().timeline for r in ranks], errors)
    numbered = [r if r.rank == n else replace(r, rank=n) for r, n in zip(ranks, numbers)]
    return combine([numbered[i] for i in rank_order(numbers)], options, inputs, found.warnings + settle_warnings + warnings)


def analyze_paths(paths: list[Path], options: Options, workers: int = 1) -> Report:
    """Read and analyse, without a progress bar (the CLI shows one, so it calls the steps itself)."""
    return analyze_found(discover(paths), options, [str(p) for p in paths], workers)
