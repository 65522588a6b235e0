"""trace/alloc.py: while a read runs, freed memory stays in the heap for reuse; once it is done,
give_back_freed_memory returns it to the kernel, so that it is not resident through the analysis
and the output (where `report`'s peak is). Run in a fresh process each: the settings are the process's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc's allocator only"
)

CODE = """
import sys
from dbo_trace.trace import alloc

def rss_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 1e6

alloc.reuse_freed_memory()
base = rss_mb()
blocks = [bytearray(1 << 20) for _ in range(50)]  # 50 MB in blocks a read would reuse (its trim threshold: 64 MB)
del blocks
kept = rss_mb()
if sys.argv[1] == "give back":
    alloc.give_back_freed_memory()
    alloc.reuse_freed_memory()  # and again for a next read: never raises
print(round(kept - base), round(rss_mb() - base))
"""


def _run(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, check=True).stdout
    kept, after = map(int, out.split())
    return kept, after


def test_freed_memory_is_kept_during_a_read_and_given_back_after():
    kept, after = _run("keep")
    assert kept >= 40 and after >= 40  # the read's setting: freed 1 MB blocks stay resident for reuse
    kept, after = _run("give back")
    assert kept >= 40 and after <= 10
