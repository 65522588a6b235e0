"""Which role a trace played in a disaggregated (AFD) run, from the evidence, in this order: the
bundle manifest's `roles`, else the role in the recorded command line (`--additional-config
'{"afd": {"role": ...}}'`), else the trace itself (docs/analysis.md, "Roles from the evidence").
The one resolver is resolve_role; the bundle reader only says what a recording claims (RoleClaims).

Both roles' traces call themselves rank 0 of world size 1, so neither names nor ranks tell them apart.
The trace does: the AFD plugin's process groups in `distributedInfo.pg_config` (`afd`, `p2p`, of
two ranks each) and the plugin's `vllm::afd_p2p_send`/`recv` ops (both roles run them) say a trace
is of an AFD run; the attention side's attention kernels, the control plane (the attention side sends each step's metadata, the FFN receives it), and
the FFN's loop sitting in `recv_control_payload` in its sampled Python stacks. Pure: a timeline's
arrays and metadata in, a RoleCall out; linear in the events (each distinct name is tested once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from dbo_trace.analysis.classify import per_name
from dbo_trace.analysis.afd.roles import ATTENTION, FFN
from dbo_trace.bundle import ROLE_FROM_COMMAND as FROM_COMMAND
from dbo_trace.bundle import ROLE_FROM_MANIFEST as FROM_MANIFEST
from dbo_trace.bundle import RoleClaims
from dbo_trace.trace.pystacks import StackSamples
from dbo_trace.trace.timeline import Timeline

FROM_TRACE = "trace"  # the trace's own content (FROM_MANIFEST: the manifest's roles; FROM_COMMAND: its command line)

AFD_GROUP = "afd"  # the AFD plugin's process group of the attention and FFN ranks (P2pNcclAFDConnector)
P2P_GROUP = "p2p"  # and its point-to-point control plane's
AFD_OPS = re.compile(r"^vllm::afd_p2p_(send|recv)$")
# Kernels only the attention side runs: anything named attention or attn (flash attention's FA2/FA3,
# cutlass's FlashAttnFwd, paged attention, merge_attn_states), flash::, FlashInfer, FlashMLA, fmha, and
# the KV-cache writes (reshape_and_cache, concat_and_cache_mla).
ATTENTION_KERNEL = re.compile(r"attention|attn|flash::|flashinfer|flashmla|fmha|reshape_and_cache|concat_and_cache|mla_decode", re.I)
# torch.distributed's NCCL record_function ranges of a point-to-point op: "nccl:send 1->0", "nccl:recv 0<-1"
CONTROL_SEND = re.compile(r"^nccl:send\b")
CONTROL_RECV = re.compile(r"^nccl:recv\b")
# The FFN server's loop: it waits for each step's control payload, then runs the FFN layers
FFN_LOOP = re.compile(r"recv_control_payload|_run_ffn_server_loop|GPUFFNModelRunner|compute_ffn_output")


@dataclass(frozen=True)
class TraceEvidence:
    """What one trace (and its process's sampled stacks) shows about its role."""

    afd_group: bool  # distributedInfo.pg_config names a process group `afd` of 2 ranks
    p2p_group: bool  # ... and `p2p` of 2
    afd_ops: int  # vllm::afd_p2p_send / afd_p2p_recv CPU ops
    attention_kernels: int
    control_sends: int  # nccl:send ranges and c10d::send ops
    control_recvs: int
    ffn_loop_samples: int  # sampled stacks of the process inside the FFN's loop (py-spy)

    @property
    def afd(self) -> bool:
        """The trace is of an AFD run: the plugin's process group or its ops."""
        return self.afd_group or self.afd_ops > 0

    def role(self) -> str | None:
        """attention where attention kernels ran, or where the control plane sent more than it
        received (the attention side sends each step's metadata); ffn where an AFD rank ran no
        attention kernel; None where the trace is not of an AFD run. The plugin's afd_p2p ops say
        only that the run is AFD: both roles run them (a real FFN trace holds 432 in 20 steps)."""
        if not self.afd:
            return None
        if self.attention_kernels:
            return ATTENTION
        if self.control_sends != self.control_recvs:
            return ATTENTION if self.control_sends > self.control_recvs else FFN
        return FFN


@dataclass(frozen=True)
class RoleCall:
    """A trace's role and where it came from (FROM_MANIFEST, FROM_COMMAND or FROM_TRACE, with the
    trace's evidence; render/words/notes.py says it in words)."""

    role: str
    source: str
    evidence: TraceEvidence | None = None  # FROM_TRACE: what decided


def afd_groups(metadata: dict[str, Any]) -> tuple[bool, bool]:
    """(afd, p2p): distributedInfo.pg_config names these process groups, each of 2 ranks."""
    info = metadata.get("distributedInfo")
    groups = info.get("pg_config") if isinstance(info, dict) else None
    found = set()
    for g in groups if isinstance(groups, list) else []:
        if isinstance(g, dict) and g.get("pg_size") == 2 and g.get("pg_name") in (AFD_GROUP, P2P_GROUP):
            found.add(g["pg_name"])
    return AFD_GROUP in found, P2P_GROUP in found


def _count(names: list[str], name_ids: np.ndarray, rx: re.Pattern[str]) -> int:
    if not len(name_ids) or not names:
        return 0
    hit = per_name(names, name_ids, lambda n: bool(rx.search(n)))
    return int(hit[name_ids].sum())


def loop_samples(samples: list[StackSamples]) -> int:
    """The sampled stretches whose stack holds a frame of the FFN's loop (any thread)."""
    n = 0
    for s in samples:
        frames = np.array([bool(FFN_LOOP.search(f[0])) for f in s.frames] + [False], bool)  # [-1]: no frame
        if not frames[:-1].any():
            continue
        in_loop = frames[s.node_frame]
        # a stack is in the loop where any frame on its path is: walk each node up once, parents first
        on_path = in_loop.copy()
        for node in range(1, len(on_path)):  # parents precede their children (pystacks' tree)
            on_path[node] |= on_path[s.node_parent[node]]
        n += int(on_path[s.seg_node].sum())
    return n


def trace_evidence(tl: Timeline, samples: list[StackSamples] | None = None) -> TraceEvidence:
    afd, p2p = afd_groups(tl.metadata)
    ops = _count(tl.names, tl.cpu.name[~tl.cpu_is_annotation], AFD_OPS)
    if not (afd or ops):  # not an AFD run: nothing more to look at
        return TraceEvidence(False, p2p, 0, 0, 0, 0, 0)
    ranges = tl.cpu.name[tl.cpu_is_annotation]
    return TraceEvidence(
        afd_group=afd,
        p2p_group=p2p,
        afd_ops=ops,
        attention_kernels=_count(tl.names, tl.gpu.name[~tl.gpu_is_copy], ATTENTION_KERNEL),
        control_sends=_count(tl.names, ranges, CONTROL_SEND),
        control_recvs=_count(tl.names, ranges, CONTROL_RECV),
        ffn_loop_samples=loop_samples(samples or []),
    )


def role_of(evidence: TraceEvidence) -> RoleCall | None:
    """The role the trace's evidence tells (where no bundle declared one), or None: not an AFD run."""
    role = evidence.role()
    return None if role is None else RoleCall(role, FROM_TRACE, evidence)


def claimed_role(claims: RoleClaims | None) -> RoleCall | None:
    """What a recording's claims decide alone: its manifest's claim, then its command line's."""
    if claims is not None and claims.manifest is not None:
        return RoleCall(claims.manifest, FROM_MANIFEST)
    if claims is not None and claims.command is not None:
        return RoleCall(claims.command, FROM_COMMAND)
    return None


def resolve_role(claims: RoleClaims | None, evidence: Callable[[], TraceEvidence]) -> RoleCall | None:
    """A trace's role, by the one rule: its manifest's claim, then its recorded command line's, then
    what the trace itself shows (read only where nothing was claimed)."""
    return claimed_role(claims) or role_of(evidence())


def declares_attention(claims: Iterable[RoleClaims]) -> bool:
    """A recording declared an AFD attention server (the role its claims decide is attention): the
    run is disaggregated (analysis/model.py Recording.disaggregated)."""
    return any((call := claimed_role(c)) is not None and call.role == ATTENTION for c in claims)
