"""Worker processes for reading traces (one trace's chunks, or one rank each)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from dbo_trace.trace.alloc import reuse_freed_memory


def process_pool(workers: int) -> ProcessPoolExecutor:
    """Spawned, not forked: the parent may run a progress thread, whose locks a forked child would
    inherit held."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=reuse_freed_memory)
