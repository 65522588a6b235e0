"""glibc's allocator, set to reuse freed memory while traces are read.

Reading allocates and frees megabyte buffers and column arrays thousands of times. By default glibc
gives each such block its own mapping from the kernel and returns it on free, so every block's pages
are faulted in and zeroed afresh: on a 1 GB trace a fifth of the run was spent in the kernel
(docs/performance.md). Keeping freed memory in the heap for reuse removes most of that. Once the
read is done (give_back_freed_memory) the heap's free memory goes back to the kernel and blocks from
8 MB get their own mappings again: the peak is now in the analysis and the output, where the read's
kept buffers only added to it (155 MB to 148 MB on a 200 MB trace, the time unchanged; from 1 MB,
142 MB but 10% slower). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h>
# Blocks of 32 MB and more (the growing columns) keep their own mappings, which realloc moves
# without copying; smaller ones are reused from the heap.
_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 64 << 20), (_M_TOP_PAD, 16 << 20))
_AFTER_READ = ((_M_MMAP_THRESHOLD, 8 << 20), (_M_TRIM_THRESHOLD, 8 << 20), (_M_TOP_PAD, 1 << 20))  # give_back_freed_memory


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc, else None; looked for once."""
    try:
        # The process's own symbols hold glibc's: no library search (find_library runs ldconfig).
        return ctypes.CDLL(None) if os.confstr("CS_GNU_LIBC_VERSION") else None
    except (OSError, AttributeError, ValueError):
        return None


def _set(settings: tuple[tuple[int, int], ...]) -> None:
    try:
        mallopt = getattr(_glibc(), "mallopt", None)
        if mallopt is not None:
            for option, value in settings:
                mallopt(ctypes.c_int(option), ctypes.c_int(value))
    except (OSError, AttributeError, ValueError):
        pass


def reuse_freed_memory() -> None:
    """Before a read (each read: compare reads two runs). Never raises."""
    _set(_SETTINGS)


def give_back_freed_memory() -> None:
    """Once a read is done: the heap's free memory back to the kernel (malloc_trim), and from now on
    blocks from 8 MB in mappings of their own, returned when freed (the read's kept buffers would
    stay resident through the analysis and the output). Never raises."""
    _set(_AFTER_READ)
    trim_heap()


def trim_heap() -> None:
    """The heap's free pages, wherever they are in it, back to the kernel (malloc_trim). Never raises.
    (Also tried where the read's columns grow, which frees their old capacity: no lower peak.)"""
    try:
        trim = getattr(_glibc(), "malloc_trim", None)
        if trim is not None:
            trim(ctypes.c_size_t(0))
    except (OSError, AttributeError, ValueError):
        pass
