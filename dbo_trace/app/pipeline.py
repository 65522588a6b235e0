"""The way from the user's paths to a Report, the one every executor takes (one process, a pool of
worker processes, Ray tasks on the nodes holding the traces: dbo_trace/app/ray_executor.py):

  prepare  what the manifests say of the run (Recording) and claim of each trace's role, the event logs
           and Python samples, with the user's options: one value every trace's analysis reads (Shared)
  analyse  each trace read and analysed on its own (analyse_trace); a disaggregated run's FFN traces
           after its attention traces, cut to their window (the FFN's last receive waits out the
           attention side's profiler export)
  finish   the ranks' numbers settled once, the ranks put in order and combined into the Report

The one module of the analysis side that does I/O; dbo_trace.analysis is pure (arrays in, reports out)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import Executor as PoolExecutor
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol


from dbo_trace.analysis.model import CrossPart, Options, RankAnalysis, Recording, Report, StepTable
from dbo_trace.analysis.context import PeerStep
from dbo_trace.errors import shown
from dbo_trace.analysis.rank_analysis import analyze_rank
from dbo_trace.analysis.steps.sources import SOURCE_VLLM, Steps, partner_steps
from dbo_trace.analysis.report import combine
from dbo_trace.analysis.afd.role_evidence import RoleCall, claimed_role, declares_attention, resolve_role, trace_evidence
from dbo_trace.analysis.afd.roles import ATTENTION, FFN, ROLE_ORDER, RoleFacts, event_window, restrict, role_facts
from dbo_trace.analysis.compare.unprofiled import Repeat, repeats_of
from dbo_trace.bundle import Manifest, RoleClaims, served_settings
from dbo_trace.serve_args import capture_sizes
from dbo_trace.trace.alloc import give_back_freed_memory, reuse_freed_memory
from dbo_trace.trace.errors import InputError
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.load import Found, discover, rank_order, read_logs_and_samples, read_timelines, settle_ranks
from dbo_trace.trace.pystacks import StackSamples
from dbo_trace.trace.timeline import Timeline
from dbo_trace.trace.workers import process_pool


# A manifest's patterns are input: each may hold literal text, escapes, classes, '.', anchors and '|',
# and '?' or {m,n} after one character, their choices at most MOST_CHOICES in all; no group and no
# unbounded repeat, so a search costs at most that many passes over a name (Python's re backtracks).
MOST_CHOICES = 16


def slow_pattern(pattern: str) -> str | None:
    """Why a regular expression's search may not stay linear in the text, or None where it does (the
    rule above; Python's reading of a brace: a repeat only in the forms {m}, {m,}, {,n}, {m,n}).
    `pattern` compiles (checked before)."""
    choices, i, n = 1, 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if pattern[i + 1 : i + 2].isdigit():
                return "a back-reference"
            i += 2
        elif ch == "[":  # a class, to its closing ] (one first, or after ^, is a member)
            j = i + 1
            j += pattern[j : j + 1] == "^"
            j += pattern[j : j + 1] == "]"
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
        elif ch in "()":
            return "a group"
        elif ch in "*+":
            return "an unbounded repeat"
        elif ch == "{" and (brace := _REPEAT.match(pattern, i)) is not None:
            low, comma, high = brace.groups()
            if comma and not high:
                return "an unbounded repeat"
            if len(low) > 6 or len(high) > 6:
                return "a repeat of over a million"
            choices *= int(high) - int(low or 0) + 1 if comma else 1
            i = brace.end()
            i += pattern[i : i + 1] == "?"  # lazy: the same choices
        elif ch == "?":
            choices *= 2
            i += 1
            i += pattern[i : i + 1] == "?"  # lazy
        else:
            i += 1
        if choices > MOST_CHOICES:
            return f"more than {MOST_CHOICES} ways to match"
    return None


_REPEAT = re.compile(r"\{(\d*)(,?)(\d*)\}")  # {m}, {m,}, {,n}, {m,n}; {} and {,} (no digits) are not repeats


def recording_of(manifests: list[Manifest], claims: dict[str, RoleClaims] | None = None) -> Recording:
    """What the manifests say of the run, read once: the communication kernels and layer count a
    bundle may declare (emulated traffic; both checked here, since a manifest is input like any
    other), its environment's facts, its timed repeats, its capture sizes, its GPU, and whether it
    declared an AFD attention server."""
    extra: list[str] = []
    for m in manifests:
        declared = m.comm_kernels
        if not isinstance(declared, list) or not all(isinstance(p, str) for p in declared):
            raise InputError(f"{m.named}: its comm_kernels must be a list of regular expressions (strings)")
        for pattern in declared:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"{m.named}: its comm_kernels holds {shown(pattern, 60)}, not a valid regular expression ({exc})") from None
            slow = slow_pattern(pattern)
            if slow is not None:
                raise InputError(
                    f"{m.named}: its comm_kernels holds {shown(pattern, 60)}, with {slow}, which a manifest's pattern "
                    f"may not hold (its search could take hours on a long kernel name); give it with --comm-kernels instead"
                )
        extra += declared
    layers = None
    for m in manifests:
        value = m.layers
        if value is None or layers:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{m.named}: its layers must be a positive whole number, not {shown(value, 60)}")
        layers = value
    envs = [m.env for m in manifests if m.env is not None]
    sms = [v for env in envs if isinstance(v := env.get(COMM_SMS_ENV), str)]
    return Recording(
        comm_kernels=tuple(dict.fromkeys(extra)),
        layers=layers,
        comm_sms=sms[0] if sms else None,
        env_recorded=bool(envs),
        repeats=_repeats(manifests),
        prefills_interleave=_prefills_interleave(manifests),
        graph_sizes=next((sizes for m in manifests if (sizes := capture_sizes(served_settings(m)))), None),
        gpu_name=next((m.gpu_name for m in manifests if m.gpu_name), None),
        disaggregated=declares_attention((claims or {}).values()),
    )


def _repeats(manifests: list[Manifest]) -> tuple[Repeat, ...]:
    """The timed repeats of the one recording that has them (`report A B` of two such recordings:
    none, since one TPOT is not both's)."""
    found = [r for m in manifests if (r := repeats_of(m.repeats))]
    return found[0] if len(found) == 1 else ()


def _prefills_interleave(manifests: list[Manifest]) -> bool | None:
    """Whether the repeats' load admits new requests while others decode (more prompts than its
    concurrency): its TPOT then holds their prefills. None where the manifest does not say."""
    loads = [m.load for m in manifests if repeats_of(m.repeats)]
    load = loads[0] if len(loads) == 1 else None
    if load is None:
        return None
    prompts, concurrency = load.get("num_prompts"), load.get("concurrency")
    if not isinstance(prompts, int) or not isinstance(concurrency, int) or isinstance(prompts, bool) or concurrency <= 0:
        return None
    return prompts > concurrency


COMM_SMS_ENV = "VLLM_DBO_COMM_SMS"  # vLLM's SMs for DBO's comm kernels (default 20 on CUDA)


def logs_of(tl: Timeline, logs: list[EventLogData]) -> list[EventLogData]:
    """The event logs written by this trace's process (or by any, where a log does not say)."""
    return [log for log in logs if log.pid is None or log.pid == tl.pid]


def samples_of(tl: Timeline, samples: list[StackSamples]) -> list[StackSamples]:
    """The Python stack samples of this trace's process (py-spy's pid is the process's)."""
    return [s for s in samples if tl.pid is not None and tl.pid in s.pids()]


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


# ---- prepare ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """What every trace's analysis reads besides its own file: the user's options, what the
    recordings' manifests say (Recording), what they claim of each trace's role, the event logs and
    the Python stack samples."""

    options: Options
    recording: Recording
    claims: dict[str, RoleClaims]  # os.path.normpath(trace) -> what its recording says of its role
    logs: list[EventLogData]
    samples: list[StackSamples]

    def claimed(self, trace: Path | str) -> str | None:
        """The role a recording claims for the trace (its manifest's, else its command line's)."""
        call = claimed_role(self.claims.get(os.path.normpath(trace)))
        return call.role if call is not None else None

    def role_call(self, tl: Timeline) -> RoleCall | None:
        """The timeline's role by the one rule (afd/role_evidence.py resolve_role)."""
        return resolve_role(self.claims.get(os.path.normpath(tl.source)), lambda: trace_evidence(tl, samples_of(tl, self.samples)))


@dataclass
class Plan:
    """What is known before a trace is read: what every analysis shares, the traces in the order
    found, the manifests, and the warnings so far."""

    shared: Shared
    traces: list[Path]
    manifests: list[Manifest]
    found_warnings: list[str]  # what discovery said
    read_warnings: list[str]  # the event logs and samples that could not be read

    def rounds(self) -> tuple[list[int], list[int]]:
        """The traces to analyse first (positions), then the FFN's, which are cut to the window of the first."""
        ffn = [i for i, t in enumerate(self.traces) if self.shared.claimed(t) == FFN]
        return [i for i in range(len(self.traces)) if i not in ffn], ffn


def prepare(found: Found, options: Options) -> Plan:
    """The plan of what discovery found (on this machine, or merged from the Ray nodes, which read
    their event logs and samples where they are): the logs and samples not read yet are read here."""
    found = read_logs_and_samples(found)
    claims = found.claims()
    shared = Shared(options, recording_of(found.manifests, claims), claims, found.event_logs, found.samples)
    return Plan(shared, found.traces, found.manifests, list(found.warnings), found.read_warnings)


# ---- analyse ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """The attention traces' window (the first one's ts clock, baseTimeNanoseconds its base), to which
    the FFN's traces are cut: one host's clock, so a trace's offset is the difference of the bases.
    steps: the first attention rank's steps on that clock, which are the FFN's (partner_steps)."""

    base_time_ns: int | None
    lo: float
    hi: float
    steps: Steps | None = None

    def _offset(self, tl: Timeline) -> float | None:
        """What to add to this clock's ts to get tl's."""
        if tl.base_time_ns is None or self.base_time_ns is None:
            return None
        return (self.base_time_ns - tl.base_time_ns) / 1000.0

    def of(self, tl: Timeline) -> Timeline | None:
        """The timeline cut to the window on its own clock; None where the clocks cannot be related."""
        offset = self._offset(tl)
        return restrict(tl, self.lo + offset, self.hi + offset) if offset is not None else None

    def steps_of(self, tl: Timeline) -> Steps | None:
        """The attention's steps on tl's clock; None where the clocks cannot be related."""
        offset = self._offset(tl)
        return partner_steps(self.steps, offset) if offset is not None and self.steps is not None else None


def table_steps(table: StepTable) -> Steps:
    """A rank's reported steps as step windows (what the FFN's steps are made of)."""
    return Steps(
        table.start_us, table.end_us, list(table.label), list(table.path), SOURCE_VLLM, list(table.phase),
        list(table.context_tokens), list(table.generation_tokens),
    )  # fmt: skip


def cut_of(attention: Sequence[tuple[Timeline, StepTable]]) -> Cut | None:
    """The window of the attention timelines (or their bounds, scale.bounds), where they have events,
    with the first one's steps."""
    windows = [w for tl, _t in attention if (w := event_window(tl)) is not None]
    if not attention or not windows:
        return None
    first, table = attention[0]
    return Cut(first.base_time_ns, min(w[0] for w in windows), max(w[1] for w in windows), table_steps(table) if len(table) else None)


def analyse_trace(
    trace: Path,
    index: int,
    shared: Shared,
    cut: Cut | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
) -> list[RankAnalysis] | str:
    """One input's ranks (one, or an Nsight export's processes) read and analysed, or the one-line
    error of the file. cut: an FFN trace's window (the attention's); workers > 1: a large trace
    decoded by that many processes."""
    try:
        reuse_freed_memory()  # this worker's previous rank gave it back
        timelines = read_timelines(trace, index, progress, workers)
        give_back_freed_memory()
        return analyse_timelines(timelines, shared, cut)
    except InputError as exc:
        return str(exc)


def analyse_timelines(
    timelines: list[Timeline], shared: Shared, cut: Cut | None, calls: Sequence[RoleCall | None] | None = None
) -> list[RankAnalysis]:
    """The timelines' ranks analysed, each with its role (claimed, else told by its trace; calls: the
    roles already resolved for them, in their order) and, an FFN's, cut to the attention's window
    where that is known."""
    out = []
    for k, tl in enumerate(timelines):
        call = calls[k] if calls is not None else shared.role_call(tl)
        partner = None
        if cut is not None and call is not None and call.role == FFN:
            tl = cut.of(tl) or tl
            partner = cut.steps_of(tl)
        out.append(
            analyze_rank(
                tl, logs_of(tl, shared.logs), shared.options, recording=shared.recording, role_call=call,
                samples=samples_of(tl, shared.samples), partner=partner,
            )
        )  # fmt: skip
    return out


class Executor(Protocol):
    """Where the pipeline's analyses run: in this process or a process pool (_Read, here), or as Ray
    tasks on the nodes that hold the traces (app/ray_executor.py). analyse_rounds drives either."""

    def analyse(self, which: list[int], cut: Cut | None) -> None:
        """The traces at these positions analysed (an FFN's cut to the attention's window, if given)."""

    def told_ffn(self, first: list[int]) -> list[int]:
        """Of the traces analysed first, those whose trace told an FFN role."""
        ...

    def attention(self, first: list[int]) -> list[tuple[Timeline, StepTable]]:
        """The attention ranks' timelines (or their bounds) of the traces analysed first, with their steps."""
        ...

    def again(self, told: list[int], cut: Cut) -> None:
        """The traces that told an FFN role analysed again, within the attention's window."""


def analyse_rounds(plan: Plan, executor: Executor) -> Cut | None:
    """The two rounds, one way for every executor: the traces not declared FFN first; then, once
    the attention's window is known, those whose trace told an FFN role again within it, and the
    declared FFN's traces within it. Returns the window (None: no attention rank, or nothing to cut)."""
    first, then = plan.rounds()
    executor.analyse(first, None)
    told = executor.told_ffn(first)
    cut = cut_of(executor.attention(first)) if then or told else None
    if cut is not None and told:
        executor.again(told, cut)
    executor.analyse(then, cut)
    return cut


def told_ffn(results: dict[int, list[RankAnalysis] | str], first: list[int]) -> list[int]:
    """Of the traces analysed first, those whose trace told an FFN role (no bundle declared it): to be
    analysed again, cut to the attention's window."""
    return [i for i in first if not isinstance(res := results[i], str) and any(r.role == FFN for r in res)]


def attention_timelines(results: dict[int, list[RankAnalysis] | str], first: list[int]) -> list[tuple[Timeline, StepTable]]:
    """The attention ranks' timelines (declared, or told by their traces) of the traces analysed first,
    with their steps."""
    return [(r.detailed().timeline, r.steps.table) for i in first if not isinstance(res := results[i], str) for r in res if r.role == ATTENTION]


# ---- finish -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settled:
    """The ranks numbered once (settle_ranks: the rank each trace claims, or by name where claims
    clash) and put in rank order; each measurement stays as measured, its number the run's."""

    ranks: list[RankAnalysis]  # in rank order, as measured
    numbers: list[int]  # each rank's number, in the order the results list them
    order: list[int]  # those positions in rank order
    timelines: list[Timeline]  # each rank's timeline (or its bounds), in the order the results list them
    warnings: list[str]

    @property
    def ranked(self) -> list[int]:
        """The ranks' numbers, in rank order (as ranks)."""
        return [self.numbers[i] for i in self.order]


def settle(results: list[list[RankAnalysis] | str], bounds: list[list[Timeline]] | None = None) -> Settled:
    """results: per trace in the order found, its ranks or its one-line error. bounds: where the
    ranks' details stay elsewhere (Ray), what settling reads of each timeline (per trace, as results).
    A disaggregated run's traces each claim rank 0 (each role's own world of one): with every trace's
    role known they are numbered attention first, then by path, however they were given."""
    ranks = [r for res in results if not isinstance(res, str) for r in res]
    errors = [res for res in results if isinstance(res, str)]
    timelines = [tl for b in bounds for tl in b] if bounds is not None else [r.detailed().timeline for r in ranks]
    numbers, warnings = settle_ranks(timelines, errors)
    order = rank_order(numbers)
    paired = _numbered_by_role([timelines[i] for i in order], [ranks[i].role for i in order])
    if paired is not None:
        order = [order[k] for k in paired]
        for n, i in enumerate(order):
            numbers[i] = n
    return Settled([ranks[i] for i in order], numbers, order, timelines, warnings)


def _numbered_by_role(timelines: list[Timeline], roles: list[str | None]) -> list[int] | None:
    """The pair's order, attention first then by path, where every trace has a role and their claims
    clash (each role's world of one); None where the ranks keep their numbers."""
    claims = {tl.claimed_rank for tl in timelines}
    if len(timelines) < 2 or None in roles or len(claims) == len(timelines) or len(set(roles)) < 2:
        return None
    rank_of = {r: i for i, r in enumerate(ROLE_ORDER)}
    return sorted(range(len(timelines)), key=lambda i: (rank_of.get(roles[i] or "", len(ROLE_ORDER)), str(timelines[i].source)))


def finish(
    plan: Plan,
    settled: Settled,
    inputs: list[str],
    *,
    cut: Cut | None = None,
    parts: list[CrossPart] | None = None,
    peer_step: PeerStep | None = None,
    warnings: Sequence[str] = (),
) -> Report:
    """The settled ranks combined into the Report. parts and peer_step: where the ranks' details stay
    elsewhere (Ray), what the cross-rank step reads of each (in the order the results list them, under
    the numbers their traces claim: here put in rank order under the settled ones) and how the peer
    waits reach them; warnings: the executor's own."""
    return combine(
        settled.ranks,
        plan.shared.options,
        inputs,
        plan.found_warnings + settled.warnings + plan.read_warnings + list(warnings),
        [parts[i].numbered(settled.numbers[i]) for i in settled.order] if parts is not None else None,
        peer_step,
        roles=_role_facts(plan, settled, cut),
        recording=plan.shared.recording,
        numbers=settled.ranked,
    )


def _role_facts(plan: Plan, settled: Settled, cut: Cut | None) -> RoleFacts:
    """What the manifests and the traces say of the roles, and whether the FFN's traces were cut."""
    timelines = [settled.timelines[i] for i in settled.order]
    cut_known = cut is not None and cut.base_time_ns is not None
    ffn_cut = cut_known and any(tl.base_time_ns is not None for r, tl in zip(settled.ranks, timelines) if r.role == FFN)
    return role_facts(plan.manifests, [tl.metadata for tl in timelines], ffn_cut)


# ---- the executors ------------------------------------------------------------------------------


def analyze_found(
    found: Found, options: Options, inputs: list[str], workers: int = 1, progress: Callable[[int], None] | None = None
) -> Report:
    """Read and analyse what discover() found. With workers > 1 and several traces, each rank is read
    and analysed in its own process, workers at a time; with one large trace, its events are decoded
    by the workers. The report is the same as with one process."""
    reuse_freed_memory()
    plan = prepare(found, options)
    results: dict[int, list[RankAnalysis] | str] = {}
    read = _Read(plan, results, progress, workers)
    if workers > 1 and len(plan.traces) > 1:
        with process_pool(workers) as pool:
            read.pool = pool
            cut = analyse_rounds(plan, read)
    else:  # one process: a large trace decoded by the workers
        cut = analyse_rounds(plan, read)
    give_back_freed_memory()
    return finish(plan, settle([results[i] for i in range(len(plan.traces))]), inputs, cut=cut)


class _Read:
    """The executor in this process: traces read and analysed into results (by position), in turn
    (a large trace's events decoded by the workers) or each in a process of the pool; the bytes
    done told to progress."""

    def __init__(
        self, plan: Plan, results: dict[int, list[RankAnalysis] | str], progress: Callable[[int], None] | None, workers: int
    ) -> None:
        self.plan, self.results, self.progress, self.done, self.workers = plan, results, progress, 0, workers
        self.pool: PoolExecutor | None = None

    def analyse(self, which: list[int], cut: Cut | None) -> None:
        if self.pool is not None:
            self._pooled(self.pool, which, cut)
        else:
            self._in_turn(which, cut)

    def told_ffn(self, first: list[int]) -> list[int]:
        return told_ffn(self.results, first)

    def attention(self, first: list[int]) -> list[tuple[Timeline, StepTable]]:
        return attention_timelines(self.results, first)

    def again(self, told: list[int], cut: Cut) -> None:
        """From the timelines in hand: nothing is read twice."""
        for i in told:
            res = self.results[i]
            assert not isinstance(res, str)
            timelines, calls = [r.detailed().timeline for r in res], [r.role_source for r in res]
            self.results[i] = analyse_timelines(timelines, self.plan.shared, cut, calls)  # their roles as resolved

    def _in_turn(self, which: list[int], cut: Cut | None) -> None:
        plan = self.plan
        for i in which:
            base, progress = self.done, self.progress
            told = None if progress is None else (lambda n: progress(base + n))
            self.results[i] = analyse_trace(plan.traces[i], i, plan.shared, cut, told, self.workers)
            self.done += os.path.getsize(plan.traces[i])

    def _pooled(self, pool: PoolExecutor, which: list[int], cut: Cut | None) -> None:
        plan = self.plan
        futures = {pool.submit(analyse_trace, plan.traces[i], i, plan.shared, cut): i for i in which}
        for future in as_completed(futures):
            i = futures[future]
            self.results[i] = future.result()
            self.done += os.path.getsize(plan.traces[i])
            if self.progress:
                self.progress(self.done)


def analyze_paths(paths: list[Path], options: Options, workers: int = 1) -> Report:
    """Read and analyse, without a progress bar (the CLI shows one, so it calls the steps itself)."""
    return analyze_found(discover(paths), options, [str(p) for p in paths], workers)
