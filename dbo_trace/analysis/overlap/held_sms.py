"""What the holder of held-back comm occupied per SM, from its launch's shape (grid, block,
registers, shared memory), and whether one CTA of the comm kernel fits beside it (docs/analysis.md,
"The DBO ledger")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


# -- SM evidence for held-back comm -------------------------------------------------------------


@dataclass(frozen=True)
class LaunchShape:
    """A kernel's launch as its trace args give it (Kineto: grid, block, registers, shared memory)."""

    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    registers_per_thread: int | None
    shared_memory: int | None  # bytes per CTA

    @property
    def ctas(self) -> int:
        return int(np.prod(self.grid))

    @property
    def threads(self) -> int:
        return int(np.prod(self.block))

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
    left_shared_memory: int | None  # per SM, beside that many holder CTAs
    left_registers: int | None
    left_threads: int | None
    comm_fits: bool | None  # one comm CTA fits in what is left (by these counts)
    comm_sms: str | None  # VLLM_DBO_COMM_SMS in the recording's environment
    env_recorded: bool  # the recording kept its environment (so an absent setting was unset)

    @property
    def waves(self) -> float | None:
        if not self.sms or not self.per_sm:
            return None
        return self.holder.ctas / (self.sms * self.per_sm)


def _shape(name: str, args: dict[str, Any]) -> LaunchShape | None:
    grid, block = args.get("grid"), args.get("block")

    def dims(v: object) -> tuple[int, ...] | None:
        if isinstance(v, list) and v and all(type(x) is int and 0 < x < 1 << 31 for x in v):
            return tuple(v)
        return None

    g, b = dims(grid), dims(block)
    if g is None or b is None:
        return None
    regs, smem = args.get("registers per thread"), args.get("shared memory")
    return LaunchShape(
        name=name,
        grid=g,
        block=b,
        registers_per_thread=regs if type(regs) is int and 0 <= regs < 1 << 16 else None,
        shared_memory=smem if type(smem) is int and 0 <= smem < 1 << 31 else None,
    )


def _device_int(device: dict[str, Any], key: str) -> int | None:
    v = device.get(key)
    return v if type(v) is int and 0 < v < 1 << 40 else None


def sm_evidence(
    *,
    holder_name: str,
    holder_args: dict[str, Any],
    comm_name: str | None,
    comm_args: dict[str, Any],
    held: int,
    device: dict[str, Any],  # the trace's deviceProperties entry for the GPU
    comm_sms: str | None,
    env_recorded: bool,
) -> SmEvidence | None:
    """What the holder of held-back comm occupied per SM, and whether one CTA of the comm kernel fits
    beside it, from the launch args and the device's limits (docs/analysis.md, "SM evidence")."""
    holder = _shape(holder_name, holder_args)
    if holder is None:
        return None
    comm = _shape(comm_name, comm_args) if comm_name is not None else None
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
        left_shared_memory=l_smem,
        left_registers=l_regs,
        left_threads=l_threads,
        comm_fits=fits,
        comm_sms=comm_sms,
        env_recorded=env_recorded,
    )
