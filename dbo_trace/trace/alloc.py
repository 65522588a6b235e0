"""glibc's allocator, set to reuse freed memory while traces are read.

Reading allocates and frees megabyte buffers and column arrays thousands of times. By default glibc
gives each such block its own mapping from the kernel and returns it on free, so every block's pages
are faulted in and zeroed afresh: on a 1 GB trace a fifth of the run was spent in the kernel
(docs/performance.md). Keeping freed memory in the heap for reuse removes most of that. Peak memory
is unchanged: the peak is reached while the columns are all alive anyway. Elsewhere than glibc this
does nothing.
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h>
# Blocks of 32 MB and more (the growing columns) keep their own mappings, which realloc moves
# without copying; smaller ones are reused from the heap.
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 64 << 20), (_M_TOP_PAD, 16 << 20))
_tuned = False


def reuse_freed_memory() -> None:
    """Once per process; never raises."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
        # The process's own symbols hold glibc's: no library search (find_library runs ldconfig).
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
        if mallopt is None:
            return
        for option, value in _SETTINGS:
            mallopt(ctypes.c_int(option), ctypes.c_int(value))
    except (OSError, AttributeError, ValueError):
        pass
