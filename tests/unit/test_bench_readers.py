"""benchmarks/bench_readers.py compares decoders by what each keeps: its chunking must hand every
event over once, and each candidate must keep the events json.load finds (issue 55). On real
recordings: samples/overlap (the demo's Kineto trace) and a vLLM 0.33 trace."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_readers.py"
TRACES = [
    next((ROOT / "samples" / "overlap" / "traces").glob("*.json.gz")),
    next((ROOT / "samples" / "vllm-graphs-prefill" / "traces").glob("*.json.gz")),
]


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_readers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.parent.name)
def test_chunks_hold_every_event_once(path: Path) -> None:
    expected = _events(path)
    decode = msgspec.json.Decoder(list[dict]).decode
    for chunk_bytes in (1 << 12, 1 << 16, 1 << 20):  # small chunks: many cuts, on the samples too
        got = [e for part in _bench().event_chunks(str(path), chunk_bytes) for e in decode(b"[" + part + b"]")]
        assert got == expected


def _kept(name: str, path: Path) -> int:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--one", name, "--chunk-mb", "1", str(path)], capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["peak_kb"] > 0 and result["read_s"] > 0
    return int(result["kept"])


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.parent.name)
def test_candidates_keep_what_json_load_finds(path: Path) -> None:
    kept_cats = {
        "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "python_function",
    }  # fmt: skip
    expected = sum(1 for e in _events(path) if e.get("ph") == "X" and e.get("cat") in kept_cats and "ts" in e)
    assert expected > 1000
    assert _kept("json.load", path) == expected
    assert _kept("current-1w", path) == expected
    # Optional candidates, where their package is installed (never a dependency of the project).
    for name, package in (("polars", "polars"), ("duckdb", "duckdb"), ("orjson", "orjson"), ("simdjson", "simdjson")):
        if importlib.util.find_spec(package) is not None:
            assert _kept(name, path) == expected, name


def test_array_like_structs_cannot_decode_kineto_events() -> None:
    """What docs/performance.md says of msgspec's array_like structs, as the benchmark finds it."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--one", "msgspec-arraylike", str(TRACES[0])], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1])["kept"] == -1
    assert "Expected `array`, got `object`" in out.stderr
