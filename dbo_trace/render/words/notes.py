"""The words of what analysis hands over as figures outside the verdict: the host-time line, the
cross-rank view's lines, a rank's and the run's typed notes, where a trace's role came from and the
host idle by sampled Python frame.
The verdict's own words are render/words/verdict.py's; the document (render/document/) calls both."""

from __future__ import annotations

from dbo_trace.analysis.accounting import LAUNCH_LATENCY_US
from dbo_trace.analysis.host.gpu_clock import ClockBounds, Incomplete
from dbo_trace.analysis.host.host_time import (
    BETWEEN,
    CPU_OP,
    LAUNCH,
    NAMED,
    OTHER_CALL,
    STARTUP,
    SYNC,
    UNTRACED,
    HostCauses,
    TopItem,
)
from dbo_trace.analysis.model import Note
from dbo_trace.analysis.cross_rank.collective_waits import GroupWaits
from dbo_trace.analysis.host.python_frames import HostStacks, StackRow
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.cross_rank.side_by_side import (
    COMBINE,
    DISPATCH,
    OUTSIDE,
    STRAGGLER_ACCURACY_TIMES,
    STRAGGLER_STEP_SHARE,
    CrossNote,
    CrossRank,
    RanksLeftOut,
    StepCounts,
    op_place,
    waiting_ranks,
)
from dbo_trace.analysis.afd.role_evidence import RoleCall, TraceEvidence
from dbo_trace.analysis.afd.roles import RoleMissing, SharedGpu
from dbo_trace.analysis.steps.stalls import Behind
from dbo_trace.bundle import ROLE_FROM_COMMAND, ROLE_FROM_MANIFEST

LINE_NAMES = 3  # names per kind in the one-line summary
# A name in a sentence, cut to this many characters: a trace's name may be 64K (the tables cut theirs
# to their columns; a line that held one whole ran to a megabyte in a fuzzing pass before the cap).
NAME_IN_LINE = 160


def cut_name(name: str, most: int = NAME_IN_LINE) -> str:
    """A name from input as a sentence shows it: cut to `most` characters, its end marked."""
    return name if len(name) <= most else name[: most - 3] + "..."
LINE_MIN_SHARE = 0.005  # items that round to 0% are left out of the line (launch calls never are)

CAUSE_TEXT = {
    LAUNCH: "launch calls",
    SYNC: "synchronisation",
    OTHER_CALL: "other CUDA calls",
    NAMED: "named ranges",
    CPU_OP: "CPU operators",
    STARTUP: "microbatch thread start-up",
    BETWEEN: "between steps",
    UNTRACED: "untraced",
}


def top_item_name(top: TopItem) -> str:
    """The largest item of a host-time split by name: a cause's words, a range's name, an operator's
    name marked as one."""
    if top.name is None:
        return CAUSE_TEXT[top.kind]
    return f"{cut_name(top.name)} (CPU op)" if top.kind == CPU_OP else cut_name(top.name)


def cause_items(causes: HostCauses, names: int = LINE_NAMES) -> list[tuple[str, float, int | None]]:
    """The line's items in a fixed order: (text, us, calls where counted). Named ranges and CPU
    operators by name (the largest few, the rest of each kind as one item), then the others."""
    items: list[tuple[str, float, int | None]] = [
        (CAUSE_TEXT[LAUNCH], causes.us(LAUNCH), causes.launch_calls),
        (CAUSE_TEXT[SYNC], causes.us(SYNC), causes.sync_calls),
        (CAUSE_TEXT[OTHER_CALL], causes.us(OTHER_CALL), None),
    ]
    for kind, listed, suffix in ((NAMED, causes.named, ""), (CPU_OP, causes.cpu_ops, " (CPU op)")):
        shown = listed[:names]
        items += [(f"{cut_name(n)}{suffix}", t, None) for n, t in shown]
        rest = causes.rest_us(kind, len(shown))
        if rest > 0:
            items.append((f"other {CAUSE_TEXT[kind]}" if shown else CAUSE_TEXT[kind], rest, None))
    items += [(CAUSE_TEXT[k], causes.us(k), None) for k in (STARTUP, BETWEEN, UNTRACED)]
    return items


def cause_line(causes: HostCauses, head: str) -> str:
    """`<head>: of 41.2 ms GPU idle, 2% launch calls (1,204 calls), 61% gpu_model_runner: preprocess, ...`"""
    parts = []
    for i, (text, us, calls) in enumerate(cause_items(causes)):
        share = causes.share_of(us) or 0.0
        if i > 0 and share < LINE_MIN_SHARE:
            continue
        counted = f" ({calls:,} call{'s' if calls != 1 else ''})" if calls else ""
        parts.append(f"{100 * share:.0f}% {text}{counted}")
    return f"{head}: of {causes.host_idle_us / 1000:.1f} ms GPU idle, " + ", ".join(parts)


def host_line(scope: str, bound: bool, fraction: float | None, causes: HostCauses) -> str:
    """The verdict's host line: `prefill host-bound 94%: of 41.2 ms GPU idle, ...`."""
    share = "n/a" if fraction is None else f"{100 * fraction:.0f}%"
    what = "host-bound" if bound else "GPU idle waiting for the host"
    return cause_line(causes, f"{scope} {what} {share}".strip())


def _share(x: float) -> str:
    return "under 1%" if 0 < x < 0.005 else f"{x:.0%}"


def op_label(ubatch: int, index: int, layers: int | None, ops_per_ubatch: int | None) -> str:
    """A comm operation by microbatch and place in the step: with DBO, dispatch and combine per layer."""
    who = f"microbatch {ubatch}'s " if ubatch >= 0 else ""
    place, number = op_place(index, layers, ops_per_ubatch)
    if place == OUTSIDE:
        return f"{who}comm outside steps"
    if place in (DISPATCH, COMBINE):
        return f"{who}{place} of layer {number}"
    return f"{who}comm op {number} of the step"


def threshold_basis(view: CrossRank) -> str:
    accuracy = view.alignment.accuracy_us if view.alignment is not None else None
    parts = []
    if view.median_step_us:
        parts.append(f"{STRAGGLER_STEP_SHARE:.0%} of the {view.median_step_us / 1000:.2f} ms median step")
    if accuracy:
        parts.append(f"{STRAGGLER_ACCURACY_TIMES:g}x the clocks' {accuracy:g} us accuracy")
    return "the larger of " + " and ".join(parts) if len(parts) > 1 else (parts[0] if parts else "none")


def cross_rank_summary(view: CrossRank) -> str:
    """One line: who the others wait for, and by how much (a straggler only above the threshold)."""
    if not view.steps:
        return "ranks not set side by side: " + (cross_note_text(view.notes[0]) if view.notes else "no steps on a shared clock")
    skew = f"skew median {view.median_skew_us / 1000:.2f} ms, max {view.max_skew_us / 1000:.2f} ms"
    most_exposed = max(view.exposed_comm_us, key=view.exposed_comm_us.__getitem__)
    exposed = f"most exposed comm on rank {most_exposed} ({view.exposed_comm_us[most_exposed] / 1000:.2f} ms)"
    if not view.late_counts:
        return (
            f"no straggler at the steps' starts: the ranks started every step within {view.max_skew_us / 1000:.2f} ms "
            f"of each other, under the {view.threshold_us / 1000:.2f} ms threshold ({threshold_basis(view)}); "
            f"waits at collectives inside the steps are counted apart; {exposed}"
        )
    rank, times = max(view.late_counts.items(), key=lambda kv: kv[1])
    return (
        f"rank {rank} started last by more than {view.threshold_us / 1000:.2f} ms in {times} of {len(view.steps)} "
        f"steps ({skew}): the others wait for it at their first collective; {exposed}"
    )


def cross_note_text(n: CrossNote) -> str:
    """A note of the cross-rank view in words (a string is one already: the clocks', the matching's)."""
    if isinstance(n, str):
        return n
    if isinstance(n, RanksLeftOut):
        return f"{n.count} rank(s) left out: no steps or no clock to align them on"
    if isinstance(n, StepCounts):
        counts = ", ".join(map(str, n.counts))
        return f"ranks reported different step counts ({counts}); the first {n.aligned} of each are aligned"
    return "fewer than two ranks have reported steps: their steps cannot be set side by side"


MAX_STEP_GROUPS = 8


def wait_lines(view: CrossRank) -> list[str]:
    """Who waited for whom, per rank, and who arrived last (docs/analysis.md, "Across ranks")."""
    w = view.waits
    if w is None:
        return []
    out = []
    waiting = waiting_ranks(w)
    for r in waiting.shown:
        top, top_at = r.most_waited_for, r.most_waited_at
        assert top is not None and top_at is not None  # a wait is counted under both
        (peer, us), ((ub, k), at) = top, top_at
        share = f" ({_share(r.wait_share)} of its comm time)" if r.wait_share is not None else ""
        n_others, others_us = r.others_waited_for
        whom = f"for rank {peer}"
        if n_others:
            whom = f"for peers: rank {peer} {us / 1000:.2f} ms, {n_others} other rank(s) {others_us / 1000:.2f} ms in all"
        out.append(
            f"rank {r.rank} waited {r.wait_us / 1000:.2f} ms{share} {whom}, "
            f"mostly at {op_label(ub, k, view.layers, r.ops_per_ubatch)} ({at / 1000:.2f} ms); "
            f"transfer {r.transfer_us / 1000:.2f} ms"
        )
    if waiting.rest:
        out.append(
            f"{waiting.rest} more rank(s) waited {waiting.rest_us / 1000:.2f} ms in all, at most "
            f"{waiting.rest_max_us / 1000:.2f} ms (the JSON lists every rank)"
        )
    late = sorted((r for r in w.ranks.values() if r.last_ops), key=lambda r: (-r.last_ops, r.rank))
    if late:
        parts = [
            f"rank {r.rank} at {r.last_ops} of {len(w.ops)} collectives (the others waited {r.caused_us / 1000:.2f} ms there)"
            for r in late
        ]
        out.append(f"arrived last by more than {w.threshold_us / 1000:.2f} ms: " + ", ".join(parts))
        most = w.held_back_most
        if most is not None:
            rank, ub, us, n, of = most
            who = f"rank {rank}'s microbatch {ub}" if ub >= 0 else f"rank {rank}"
            out.append(
                f"held the others back most: {who}, last above the threshold at {n} of its {of} collectives, "
                f"the others waiting {us / 1000:.2f} ms for it there"
            )
        title = "per step (numbered from 1 in report order), who arrived last (what the others waited for it)"
        out += _group_lines(w.steps, title, "step", 1)
        out += _group_lines(w.ubatches, "per microbatch, likewise", "microbatch", 0)
    else:
        out.append(
            f"no rank arrived last at any of {len(w.ops)} matched collectives by more than "
            f"{w.threshold_us / 1000:.2f} ms (the threshold)"
        )
    return out


def _group_lines(groups: list[GroupWaits], title: str, noun: str, first: int) -> list[str]:
    """Who held the others back in each step or microbatch (above the threshold), most first; each
    group by its key, shown counting from `first` (steps from 1)."""
    parts = []
    for g in groups:
        number = g.key + first
        ranked = sorted(g.caused_us, key=lambda r: (-g.caused_us[r], r))
        if not ranked:
            parts.append(f"{noun} {number}: none")
            continue
        who = ", ".join(f"rank {r} at {g.last_ops[r]} of {g.ops} ({g.caused_us[r] / 1000:.2f} ms)" for r in ranked)
        parts.append(f"{noun} {number}: {who}")
    if not parts or all(p.endswith(": none") for p in parts):
        return []
    more = f"; {len(parts) - MAX_STEP_GROUPS} more in the JSON" if len(parts) > MAX_STEP_GROUPS else ""
    return [f"{title}: " + "; ".join(parts[:MAX_STEP_GROUPS]) + more]


def _behind(b: Behind) -> str:
    return (
        f"the GPU runs behind the CPU: {b.overlapping} of {b.steps} step windows run past the next step's "
        f"start (median {b.median_overlap_us / 1000:.2f} ms); the windows add up to "
        f"{b.windows_us / 1000:.2f} ms against {b.wall_us / 1000:.2f} ms of wall clock, so step times are "
        f"periods (start to the next start), windows beside them"
    )


def _launch_delay(d: LaunchDelay) -> str:
    """A clock offset, or launched work that queued (LaunchDelay.noted says which ranks have the note)."""
    if d.clock_offset_suspect:
        return (
            f"every launched GPU activity started at least {d.min_us / 1000:.2f} ms after its launch call ended "
            f"(median {d.median_us / 1000:.2f} ms, {d.activities} activities): the GPU's timestamps may be "
            f"offset from the CPU's, or the GPU ran behind; {d.queued_in_host_idle_us / 1000:.2f} ms of GPU idle "
            "came after the work was launched (idle waiting on a dependency, not the host)"
        )
    return (
        f"{d.queued_in_host_idle_us / 1000:.2f} ms ({100 * (d.queued_share or 0.0):.0f}%) of the GPU idle that followed "
        f"a late launch came over {LAUNCH_LATENCY_US:.0f} us after the next work's launch call had ended: launched "
        f"work queued, counted as idle waiting on a dependency, not the host (launch to start: "
        f"median {d.median_us:.1f} us, p90 {d.p90_us:.1f} us, max {d.max_us / 1000:.2f} ms)"
    )


def _us_or_ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.0f} us"


def clock_interval(b: ClockBounds) -> str:
    """The offsets the events allow, in words (+: the GPU's clock ahead)."""

    def signed(us: float) -> str:
        return ("+" if us >= 0 else "-") + _us_or_ms(abs(us))

    if b.upper_us is None and b.lower_us is None:
        return "unbounded"
    if b.lower_us is None:
        return f"at most {signed(b.upper_us or 0.0)} (GPU ahead; no blocking call bounds it from below)"
    if b.upper_us is None:
        return f"at least {signed(b.lower_us)} (GPU ahead; no launch bounds it from above)"
    return f"{signed(b.lower_us)} to {signed(b.upper_us)} (+: GPU ahead)"


def _clocks(b: ClockBounds) -> str:
    """What the events say of the GPU's clock against the CPU's (analysis/host/gpu_clock.py)."""
    interval = f"the events bound the GPU clock's offset from the CPU's: {clock_interval(b)}"
    how = f", from {b.launched} launched activities and {b.blocking_calls} blocking calls"
    if not b.consistent:
        return (
            f"{interval}{how}: the bounds disagree (a clock that drifts within the trace, or a blocking call "
            "that returned before its work): the GPU's timestamps are used as recorded"
        )
    parts = []
    if b.shift_us:
        parts.append(
            f"the clocks are skewed: {interval}{how}, which excludes 0, so every GPU timestamp was moved "
            f"{_us_or_ms(abs(b.shift_us))} {'earlier' if b.shift_us > 0 else 'later'} onto the CPU's clock"
        )
    else:
        parts.append(interval + how)
    if b.host_idle_uncertain and b.host_idle_low_us is not None and b.host_idle_high_us is not None:
        parts.append(
            f"host idle over the window is {_us_or_ms(b.host_idle_low_us)} to {_us_or_ms(b.host_idle_high_us)} "
            "as the clocks allow (as analysed: the clocks taken to agree)"
        )
    if b.wide and b.gpu_behind and b.lag_first_us is not None and b.lag_last_us is not None:
        queued = f", at least {_us_or_ms(b.queued_us)} of it (median) a queue" if b.queued_us else ""
        parts.append(
            f"the lag from launch to start grew from {_us_or_ms(b.lag_first_us)} to {_us_or_ms(b.lag_last_us)}: "
            f"the GPU behind (a queue that builds), not a constant offset of the clocks{queued}"
        )
    return "; ".join(parts)


def _incomplete(x: Incomplete) -> str:
    why = []
    if x.launch_coverage < 1.0 and x.sampled:
        why.append(f"{100 * x.launch_coverage:.1f}% of its {x.activities} GPU activities have their launch call in it")
    if x.correlation_coverage is not None and x.sampled:
        why.append(f"it holds {100 * x.correlation_coverage:.1f}% of the API calls its correlation ids number")
    if x.head_wait_us is not None:
        why.append(
            f"its first launched GPU work waited {_us_or_ms(x.head_wait_us)} behind GPU work not in it (launched "
            "before the window, or by another process)"
        )
    kind = "sampled or cut" if x.sampled else "its GPU ran work the trace does not hold"
    return (
        f"the trace is incomplete ({kind}): {'; '.join(why)}; GPU work it lacks may fill the idle it shows, "
        "so its host idle is an upper bound"
    )


def _role_missing(m: RoleMissing) -> str:
    return f"the manifest's {', '.join(m.roles)} role has no trace: the round trips' parts on that side are not measured"


def _shared_gpu(s: SharedGpu) -> str:
    if s.mps:
        how = " under MPS (its control daemon answered; they share the SMs)"
    elif s.mps is False:
        how = " without MPS (its control daemon did not answer)"
    elif s.mps_claimed:
        how = " (MPS not verified: the manifest's mps says only that a control pipe existed)"
    else:
        how = ""
    what = (
        "each rank's figures are of a GPU it shared with the other role"
        if s.traced < 2
        else "figures added over the ranks are one GPU's twice, not two GPUs'"
    )
    return f"both roles ({', '.join(s.roles)}) ran on one GPU{how}: {what}"


def note_text(n: Note) -> str:
    """A rank's note or a run's warning in words (a string is one already: a reader's, a matcher's)."""
    if isinstance(n, str):
        return n
    if isinstance(n, Behind):
        return _behind(n)
    if isinstance(n, LaunchDelay):
        return _launch_delay(n)
    if isinstance(n, RoleMissing):
        return _role_missing(n)
    if isinstance(n, ClockBounds):
        return _clocks(n)
    if isinstance(n, Incomplete):
        return _incomplete(n)
    return _shared_gpu(n)


def _evidence(e: TraceEvidence) -> str:
    """A trace's evidence of its role in words, what decided first."""
    out = []
    if e.afd_group:
        out.append("process group 'afd' of 2 ranks in distributedInfo" + (" (and 'p2p')" if e.p2p_group else ""))
    if e.afd_ops:
        out.append(f"{e.afd_ops} vllm::afd_p2p_send/recv ops")
    if e.attention_kernels:
        out.append(f"{e.attention_kernels} attention kernels")
    elif e.afd:
        out.append("no attention kernel")
    if e.control_sends or e.control_recvs:
        out.append(f"control plane: {e.control_sends} sends, {e.control_recvs} receives")
    if e.ffn_loop_samples:
        out.append(f"{e.ffn_loop_samples} sampled stacks in the FFN's loop (recv_control_payload)")
    return ", ".join(out)


def role_source_text(call: RoleCall) -> str:
    """Where a trace's role came from: the manifest, the recorded command line, or the trace's evidence."""
    if call.source == ROLE_FROM_MANIFEST:
        return "the bundle manifest's roles"
    if call.source == ROLE_FROM_COMMAND:
        return "the recorded command line (--additional-config afd.role)"
    because = _evidence(call.evidence) if call.evidence is not None else ""
    return f"the trace ({because})" if because else "the trace"


LINE_ROWS = 3  # frames named in a host-stacks line


def row_text(row: StackRow) -> str:
    """`untraced in vllm.v1.worker.gpu_model_runner:_prepare_inputs > torch.cuda:synchronize`."""
    where = row.project or "(no project frame)"
    if row.library:
        where += f" > {row.library}"
    return f"{row.cause.replace('_', ' ')} in {where}"


def stacks_line(h: HostStacks, head: str) -> str:
    """`rank 0 host idle by Python frame (py-spy 100 Hz, clock from anchors step, ±0.9 ms): of 1887.5 ms,
    untraced 84% (0% without a sample); 80% untraced in prog:slow_function, ...`"""
    c = h.clock
    rate = f"py-spy {h.rate_hz:g} Hz" if h.rate_hz else "py-spy"
    if c.method != "start" and c.accuracy_us is not None:
        clock = f"aligned on {c.anchors} within ~{c.accuracy_us / 1000:.1f} ms"
    else:
        clock = "aligned by py-spy's start time only"

    def pct(us: float) -> str:
        x = h.percent_of(us)
        return "-" if x is None else f"{x:.0f}%"

    rows = [f"{pct(r.us)} {row_text(r)}" for r in h.rows[:LINE_ROWS]]
    return (
        f"{head} host idle by Python frame ({rate}, {clock}): of {h.host_idle_us / 1000:.1f} ms, untraced "
        f"{pct(h.untraced_us)} ({pct(h.unexplained_us)} without a sample)" + ("; " + ", ".join(rows) if rows else "")
    )
