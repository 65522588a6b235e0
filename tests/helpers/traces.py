"""Builders for tests that make a trace out of a real one: read it to its JSON value, change it,
write it back. Plain json and gzip only, no code of the package: what a test computes from these
dicts stays independent of the reader it checks. (The independent references, tests/reference*.py,
tests/independent_*.py, tests/references/peers_reference.py and tests/helpers/nsys_export.py, do not use this either:
each stays self-contained.)

A name ending in .gz is gzip, any other plain JSON, both ways: a file that says .gz and is not
gzip fails to read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")


def read_trace(path: Path) -> Any:
    """The trace's JSON value: its document (a dict), or the list of events of the 2020 layout."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def write_trace(doc: Any, path: Path, **dumps: Any) -> Path:
    """doc as the file path (gzip, quickly, for a .gz name); dumps: json.dumps's layout arguments."""
    return write_raw(json.dumps(doc, **dumps).encode(), path)


def write_raw(content: bytes, path: Path) -> Path:
    """Bytes as the file path (gzip for a .gz name): a trace laid out by hand, broken on purpose."""
    path.write_bytes(gzip.compress(content, compresslevel=1) if path.name.endswith(".gz") else content)
    return path


def rewrite_trace(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """src's document changed in place by edit(doc), written to dst (which may be src)."""
    doc = read_trace(src)
    edit(doc)
    return write_trace(doc, dst)


def rewrite_events(src: Path, dst: Path, edit: Callable[[list[dict]], list[dict]]) -> Path:
    """src with its traceEvents replaced by edit(the events), the rest of the document kept, at dst."""
    return rewrite_trace(src, dst, lambda doc: doc.update(traceEvents=edit(doc["traceEvents"])))


def events_of(doc: dict | list[dict], *categories: str) -> list[dict]:
    """The document's events of these categories (every event without any), in file order."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if not categories or e.get("cat") in categories]


def complete_events(doc: dict | list[dict]) -> list[dict]:
    """The document's complete events (ph "X": those with a duration), in file order."""
    return [e for e in events_of(doc) if e.get("ph") == "X"]


def many_steps(folder: Path, steps: int, ranks: int = 1) -> Path:
    """A folder of `ranks` traces of `steps` steps each, made up, not from a recording: per step a
    ProfilerStep# annotation and two kernels, each launched by a cudaLaunchKernel (a long run,
    cheap to write: tests/unit/test_long_runs.py, benchmarks/bench_steps.py)."""
    folder.mkdir()
    for rank in range(ranks):
        events = []
        for i in range(steps):
            t = 1000.0 + i * 100.0
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": 80.0})
            for u in range(2):
                corr, launch = 2 * i + u + 1, t + 5 + 30 * u
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": launch, "dur": 4.0, "args": {"correlation": corr}})  # fmt: skip
                events.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": launch + 6,
                               "dur": 20.0, "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
        doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": ranks}, "traceEvents": events}
        write_trace(doc, folder / f"rank{rank}.pt.trace.json.gz")
    return folder
