"""What the holder of held-back comm occupied per SM, from its launch's shape (grid, block,
registers, shared memory), and whether one CTA of the comm kernel fits beside it (docs/analysis.md,
"The DBO ledger")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dbo_trace.analysis.overlap.exposure import CROWDED
from dbo_trace.analysis.overlap.held import CAUSES, HeldBack
from dbo_trace.trace.timeline import LaunchArgs, Timeline


# -- SM evidence for held-back comm -------------------------------------------------------------


@dataclass(frozen=True)
class LaunchShape:
    """A kernel's launch as its trace gives it (Kineto's args, Nsight's kernel columns: grid, block,
    registers, shared memory; trace/timeline.py LaunchArgs)."""

    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    # CTAs in the grid and threads per CTA, counted where it is made (_shape); left out of its repr, which
    # is the launch as read
    ctas: int = field(repr=False)
    threads: int = field(repr=False)
    registers_per_thread: int | None
    shared_memory: int | None  # bytes per CTA

    @property
    def registers(self) -> int | None:
        """Registers per CTA, whole warps counted (the hardware allocates per warp)."""
        if self.registers_per_thread is None:
            return None
        return self.registers_per_thread * -(-self.threads // 32) * 32


@dataclass(frozen=True)
class SmEvidence:
    holder: LaunchShape
    comm: LaunchShape | None
    held: int  # comm kernels it held back (crowded)
    sms: int | None  # the device's SM count (deviceProperties numSms)
    per_sm: int | None  # holder CTAs one SM can hold at once: the tightest of threads, registers, shared memory
    waves: float | None = field(repr=False)  # the holder's CTAs over what all SMs hold at once (_waves)
    left_shared_memory: int | None  # per SM, beside that many holder CTAs
    left_registers: int | None
    left_threads: int | None
    comm_fits: bool | None  # one comm CTA fits in what is left (by these counts)
    comm_sms: str | None  # VLLM_DBO_COMM_SMS in the recording's environment
    env_recorded: bool  # the recording kept its environment (so an absent setting was unset)


def _waves(holder: LaunchShape, sms: int | None, per_sm: int | None) -> float | None:
    if not sms or not per_sm:
        return None
    return holder.ctas / (sms * per_sm)


def _shape(name: str, launch: LaunchArgs, g: int) -> LaunchShape | None:
    """GPU activity g's launch, None where its grid or block is absent (LaunchArgs: a row of -1)."""
    grid, block = launch.grid[g].tolist(), launch.block[g].tolist()
    if grid[0] <= 0 or block[0] <= 0:
        return None
    regs, smem = int(launch.registers[g]), int(launch.shared_memory[g])
    grid_given = tuple(x for x in grid if x > 0)  # the dimensions given (the columns pad with 0s)
    block_given = tuple(x for x in block if x > 0)
    return LaunchShape(
        name=name,
        grid=grid_given,
        block=block_given,
        ctas=int(np.prod(grid_given)),
        threads=int(np.prod(block_given)),
        registers_per_thread=regs if 0 <= regs < 1 << 16 else None,
        shared_memory=smem if smem >= 0 else None,
    )


def _device_int(device: dict[str, Any], key: str) -> int | None:
    v = device.get(key)
    return v if type(v) is int and 0 < v < 1 << 40 else None


def held_sm_evidence(held: HeldBack | None, tl: Timeline, *, comm_sms: str | None, env_recorded: bool) -> SmEvidence | None:
    """The SM evidence of the rank's crowded comm (held back, cause crowded), from the launch columns
    its trace's read kept (Timeline.launch): of the holder that crowded out most comm kernels (the
    first of them where several did as many), its first such pair. None where no comm was crowded."""
    crowded = np.flatnonzero(held.cause == CAUSES.index(CROWDED)) if held is not None else np.empty(0, np.int64)
    if held is None or not len(crowded):
        return None
    holder_names = tl.gpu.name[held.holder[crowded]]
    top, count = Counter(holder_names.tolist()).most_common(1)[0]
    first = crowded[np.flatnonzero(holder_names == top)[0]]
    comm, holder = int(held.kernel[first]), int(held.holder[first])
    launch = tl.launch_args()
    devices = tl.metadata.get("deviceProperties")
    device: dict[str, Any] = {}
    if isinstance(devices, list):
        id_ = int(launch.device[holder]) if launch.device[holder] >= 0 else None  # None: the trace gives none
        mine = [p for p in devices if isinstance(p, dict) and p.get("id") == id_]
        first_device = devices[0] if devices and isinstance(devices[0], dict) else {}
        device = mine[0] if mine else first_device
    return sm_evidence(
        holder=_shape(tl.names[top], launch, holder), comm=_shape(tl.names[int(tl.gpu.name[comm])], launch, comm),
        held=int(count), device=device, comm_sms=comm_sms, env_recorded=env_recorded,
    )  # fmt: skip


def sm_evidence(
    *,
    holder: LaunchShape | None,
    comm: LaunchShape | None,
    held: int,
    device: dict[str, Any],  # the trace's deviceProperties entry for the GPU
    comm_sms: str | None,
    env_recorded: bool,
) -> SmEvidence | None:
    """What the holder of held-back comm occupied per SM, and whether one CTA of the comm kernel fits
    beside it, from the launch args and the device's limits (docs/analysis.md, "SM evidence")."""
    if holder is None:
        return None
    sms = _device_int(device, "numSms")
    threads_sm = _device_int(device, "maxThreadsPerMultiprocessor")
    regs_sm = _device_int(device, "regsPerMultiprocessor")
    smem_sm = _device_int(device, "sharedMemPerMultiprocessor")
    limits = []
    if threads_sm:
        limits.append(threads_sm // holder.threads)
    if regs_sm and holder.registers:
        limits.append(regs_sm // holder.registers)
    if smem_sm and holder.shared_memory:
        limits.append(smem_sm // holder.shared_memory)
    per_sm = min(limits) if limits else None
    resident = min(per_sm, -(-holder.ctas // sms)) if per_sm is not None and sms else per_sm

    def left(total: int | None, used: int | None) -> int | None:
        return None if total is None or used is None or resident is None else total - resident * used

    l_smem, l_regs, l_threads = (
        left(smem_sm, holder.shared_memory),
        left(regs_sm, holder.registers),
        left(threads_sm, holder.threads),
    )
    fits = None
    if comm is not None and None not in (l_smem, l_regs, l_threads, comm.shared_memory, comm.registers):
        fits = (
            (comm.shared_memory or 0) <= (l_smem or 0)
            and (comm.registers or 0) <= (l_regs or 0)
            and comm.threads <= (l_threads or 0)
        )
    return SmEvidence(
        holder=holder,
        comm=comm,
        held=held,
        sms=sms,
        per_sm=per_sm,
        waves=_waves(holder, sms, per_sm),
        left_shared_memory=l_smem,
        left_registers=l_regs,
        left_threads=l_threads,
        comm_fits=fits,
        comm_sms=comm_sms,
        env_recorded=env_recorded,
    )
