"""Work counted, not timed: how a piece of the analysis grows with its input, measured so that a
loaded machine cannot change the answer (CPU time swells under load too: caches and memory bandwidth
are shared). Timing lives in benchmarks/.

- elements_passed: the array elements handed to functions of a package (every call of a function
  defined there, each ndarray argument's size, arrays in tuple arguments and in dataclass arguments
  two levels down). A helper called once per item with whole arrays, the usual shape of a quadratic
  path, makes the count grow with items x events.
- calls_made: the function calls made from the package's code (its own functions, and the C
  functions it calls: numpy's). A vectorized pass makes the same calls whatever its input's size;
  a Python loop over items (a mask per step, a scan per thread) makes calls in proportion.
- peak_bytes: the most memory held at once (tracemalloc, numpy's arrays included): a quadratic
  temporary (an items x events comparison) shows in it.
Each is exact and deterministic for one input: no repetition, no margin for noise.
"""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

import dbo_trace

PACKAGE = str(Path(dbo_trace.__file__).parent)
ANALYSIS = str(Path(dbo_trace.__file__).parent / "analysis")


def _elements(value, depth: int = 0) -> int:
    if isinstance(value, np.ndarray):
        return value.size
    if isinstance(value, tuple):
        return sum(x.size for x in value if isinstance(x, np.ndarray))
    if depth < 2 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_elements(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return 0


def elements_passed(run: Callable[[], object], under: str = ANALYSIS) -> int:
    """The array elements passed to functions defined under `under` while run() runs."""
    total = 0

    def profile(frame, event, _arg):
        nonlocal total
        if event != "call" or not frame.f_code.co_filename.startswith(under):
            return
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            if name != "self":  # a method's own object is not handed to it
                total += _elements(frame.f_locals.get(name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return total


def calls_made(run: Callable[[], object], under: str = ANALYSIS) -> int:
    """The calls made from code under `under` (to Python functions anywhere and to C functions)."""
    total = 0

    def profile(frame, event, _arg):
        nonlocal total
        if event == "c_call" and frame.f_code.co_filename.startswith(under):
            total += 1
        elif event == "call" and frame.f_back is not None and frame.f_back.f_code.co_filename.startswith(under):
            total += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return total


def peak_bytes(run: Callable[[], object]) -> int:
    """The most memory traced at once while run() runs."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
