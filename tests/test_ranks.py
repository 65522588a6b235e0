"""Several ranks: one timeline each, ordered by distributedInfo.rank, totals that add up."""

import gzip
import json

from conftest import report_json, sample_trace


def _with_rank(src, dst, rank):
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_two_ranks(tmp_path):
    # File names sort opposite to ranks: the rank field must win.
    _with_rank(sample_trace("serial"), tmp_path / "a.pt.trace.json.gz", 1)
    _with_rank(sample_trace("overlap-no-hooks"), tmp_path / "b.pt.trace.json.gz", 0)
    doc = report_json(str(tmp_path), "--comm-kernels", "spin_kernel")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][0]["source"].endswith("b.pt.trace.json.gz")
    assert doc["ranks"][0]["verdict"]["label"] == "overlapped"
    assert doc["ranks"][1]["verdict"]["label"] == "not-overlapped"
    total = sum(r["comm"]["busy_us"] for r in doc["ranks"])
    assert abs(doc["comm"]["busy_us"] - total) < 0.01
    hidden = sum(r["comm"]["hidden_us"] for r in doc["ranks"])
    assert abs(doc["comm"]["hidden_fraction"] - hidden / total) < 1e-3
    assert len(doc["steps"]) == len(doc["ranks"][0]["steps"]) + len(doc["ranks"][1]["steps"])
