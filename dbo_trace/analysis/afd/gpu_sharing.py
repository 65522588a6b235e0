"""How an AFD pair's roles shared their GPU, told truthfully (docs/analysis.md, "GPU sharing").

MPS counts as on only where the recorder saw its control daemon answer (`gpu_sharing.mps_daemon`:
"answered"); a manifest's bare `mps: true` (older recorders wrote it where a control pipe file
existed) is a claim, not evidence, and reads as unknown. Whether the two roles' CUDA contexts
time-slice one GPU is told from the attention side's round trips: under time-slicing the FFN cannot
run while the attention's receive kernel holds the GPU, so each receive waits out a time slice
(~4.4 ms on the H200, whatever the size), far above the transfer its own send kernel shows. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dbo_trace.bundle import Manifest

MPS_ANSWERED = "answered"  # the control daemon answered (and, where asked, both roles were its clients)
MPS_NOT_RUNNING = "not running"
MPS_UNKNOWN = "unknown"  # no verified field: an older recorder, or nothing could tell
MPS_STATES = (MPS_ANSWERED, MPS_NOT_RUNNING, MPS_UNKNOWN)

# The rule (docs/analysis.md, "GPU sharing"): the median receive kernel, less the FFN's compute inside
# the round trip where the FFN's trace has it, is at least SLICED_MIN_US and SLICED_RATIO times the
# median send kernel (one way's transfer of the same bytes). Measured on one H200 (16-token decode,
# docs/analysis.md): graphs without MPS 4,442 us against 18 us (244x); with MPS graphs 200 against 19 us
# (10.4x), graphs+DBO 44 against 15 us (3.0x), eager+DBO 64 against 47 us (1.4x). With two microbatches
# the rule is each microbatch's: a time slice may fall on one of them only (a graphs+DBO arm without
# MPS: microbatch 0's receive waited 4.37 ms, microbatch 1's 0.016 ms), and the median of both lands
# wherever the split puts it.
SLICED_MIN_US = 1000.0
SLICED_RATIO = 50.0

@dataclass(frozen=True)
class GpuSharing:
    """What the manifests and the traces say of the roles' GPU."""

    shared_gpu: bool | None  # both roles on one GPU; None: nothing tells
    shared_from: str | None  # where that came from, in words
    mps_daemon: str  # MPS_STATES: verified only
    mps_claimed: bool = False  # a manifest said mps: true without a verified daemon

    @property
    def mps(self) -> bool | None:
        """MPS on (its daemon answered), off (it did not), or None (not verified)."""
        return _MPS_PROVEN.get(self.mps_daemon)


@dataclass(frozen=True)
class TimeSlicing:
    """The attention side's round trips against their transfer (the module's rule)."""

    round_trip_us: float  # medians over the round trips
    receive_us: float
    send_us: float
    ffn_compute_us: float | None  # the FFN's compute inside the round trip, with its trace
    ratio: float | None  # (receive - FFN compute) / send
    sliced: bool  # the rule holds, and MPS was not seen answering
    shared_gpu: bool | None
    mps_daemon: str
    microbatch: int | None = None  # whose round trips the figures are (the one that waited most); None: all


_MPS_PROVEN = {MPS_ANSWERED: True, MPS_NOT_RUNNING: False}  # the daemon's answer, where one was checked


def verified_mps(sharing: dict[str, Any] | None) -> bool | None:
    """A manifest's gpu_sharing block: MPS on (its daemon answered), off (it did not), or None (not
    verified: a bare `mps: true` is a claim). The report's roles and a sweep's unprofiled runs read it alike."""
    return None if sharing is None else _MPS_PROVEN.get(_verified_mps(sharing))


def _verified_mps(sharing: dict[str, Any]) -> str:
    daemon = sharing.get("mps_daemon")
    if daemon == MPS_ANSWERED:
        return MPS_NOT_RUNNING if sharing.get("mps") is False else MPS_ANSWERED  # answered, but not the roles' server
    return MPS_NOT_RUNNING if daemon == MPS_NOT_RUNNING else MPS_UNKNOWN


def _device_ids(metadata: dict[str, Any]) -> set[str]:
    """The GPUs a trace names uniquely (deviceProperties' uuid or PCI bus id, where Kineto wrote them)."""
    props = metadata.get("deviceProperties")
    out = set()
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict):
            for key in ("uuid", "pciBusId", "pci_bus_id"):
                if isinstance(p.get(key), str) and p[key]:
                    out.add(f"{key}={p[key]}")
    return out


def gpu_sharing(manifests: list[Manifest], metadatas: list[dict[str, Any]]) -> GpuSharing:
    """manifests: the bundles'; metadatas: the traces' top-level metadata (one per trace read)."""
    block = next((m.gpu_sharing for m in manifests if m.gpu_sharing is not None), None)
    shared: bool | None = None
    how: str | None = None
    mps, claimed = MPS_UNKNOWN, False
    if block is not None:
        mps = _verified_mps(block)
        claimed = block.get("mps") is True and mps == MPS_UNKNOWN
        visible = block.get("visible_devices")
        if isinstance(block.get("shared_gpu"), bool):
            shared, how = block["shared_gpu"], "the manifest's gpu_sharing"
        elif isinstance(visible, dict) and isinstance(visible.get("main"), str) and visible.get("main") == visible.get("peer"):
            shared, how = "," not in visible["main"], "the manifest's visible devices"
    ids = [d for d in (_device_ids(m) for m in metadatas) if d]
    if shared is None and len(ids) >= 2:
        same = all(d == ids[0] for d in ids) and len(ids[0]) == 1
        shared, how = same, "the traces' device ids"
    if shared is None and any(_one_gpu_host(m) for m in manifests):
        shared, how = True, "one GPU on the host (the manifest's gpus) and the AFD peer on the loopback address"
    return GpuSharing(shared, how, mps, claimed)


LOOPBACK = ("127.", "localhost", "::1")


def _one_gpu_host(manifest: Manifest) -> bool:
    """The recording's host had one GPU (nvidia-smi lists the host's GPUs, whatever
    CUDA_VISIBLE_DEVICES says) and the server reached its AFD peer on the loopback address: both
    roles ran on that GPU."""
    afd = manifest.afd_or_command_afd
    host = afd.get("host") if afd is not None else None
    return manifest.gpu_count == 1 and isinstance(host, str) and host.startswith(LOOPBACK)


def time_slicing(
    *,
    send_us: np.ndarray,
    receive_us: np.ndarray,
    round_trip_us: np.ndarray,
    ffn_compute_us: np.ndarray | None,
    sharing: GpuSharing | None,
    ubatch: np.ndarray | None = None,
) -> TimeSlicing | None:
    """The rule over the attention side's round trips: send_us, receive_us, round_trip_us per round
    trip (its send and receive kernels' durations, and send start to receive end); ffn_compute_us
    per round trip where the FFN's trace matched it (NaN elsewhere), None without that trace; ubatch:
    each round trip's microbatch (-1: one microbatch, or not told). The rule holds over all round
    trips, or over one microbatch's (its figures given then)."""
    if not len(round_trip_us):
        return None
    whole = _rule(send_us, receive_us, round_trip_us, ffn_compute_us, sharing)
    if ubatch is None or len(np.unique(ubatch)) < 2:
        return whole
    sliced = []
    for u in np.unique(ubatch).tolist():
        g = ubatch == u
        ffn = None if ffn_compute_us is None else ffn_compute_us[g]
        ts = _rule(send_us[g], receive_us[g], round_trip_us[g], ffn, sharing, int(u))
        if ts.sliced:
            sliced.append(ts)
    # a microbatch's round trips time-sliced: its figures, the one that waited most; else all of them
    return max(sliced, key=_waited) if sliced and not whole.sliced else whole


def _waited(ts: TimeSlicing) -> float:
    return max(ts.receive_us - (ts.ffn_compute_us or 0.0), 0.0)


def _rule(
    send_us: np.ndarray, receive_us: np.ndarray, round_trip_us: np.ndarray, ffn_compute_us: np.ndarray | None,
    sharing: GpuSharing | None, microbatch: int | None = None,
) -> TimeSlicing:
    """The rule over these round trips; microbatch: whose they are (None: all)."""
    send, receive = float(np.median(send_us)), float(np.median(receive_us))
    ffn = None
    if ffn_compute_us is not None and np.isfinite(ffn_compute_us).any():
        ffn = float(np.nanmedian(ffn_compute_us))
    waited = max(receive - (ffn or 0.0), 0.0)
    ratio = waited / send if send > 0 else None
    shared = sharing.shared_gpu if sharing is not None else None
    mps = sharing.mps_daemon if sharing is not None else MPS_UNKNOWN
    sliced = ratio is not None and waited >= SLICED_MIN_US and ratio >= SLICED_RATIO and shared is not False and mps != MPS_ANSWERED
    rt = float(np.median(round_trip_us))
    return TimeSlicing(rt, receive, send, ffn, ratio, sliced, shared, mps, microbatch)
