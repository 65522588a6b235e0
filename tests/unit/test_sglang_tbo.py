"""SGLang two-batch overlap: microbatches from its `a<i>` / `b<i>` stage ranges.

SGLang runs both batches in one thread and, with SGLANG_OPERATIONS_ENABLE_PROFILE=1, wraps every
stage in record_function/NVTX ranges named a0, a1, ... and b0, b1, .... The trace here is the H200
recording of samples/overlap with the plugin's dbo:ub<N> ranges renamed to SGLang's stage names,
once as recorded (two threads) and once with every host event moved onto one thread, as SGLang
runs: the microbatch figures must be those the plugin's own ranges give."""

import re

import pytest
from conftest import report_json, sample_trace
from traces import events_of, read_trace, rewrite_trace, write_trace

HOOK = re.compile(r"^dbo:ub([01]):")


def _as_sglang(tmp_path, one_thread):
    src = sample_trace("overlap")
    doc = read_trace(src)
    stage = [0, 0]
    main_tid = None
    for e in events_of(doc, "user_annotation"):
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            main_tid = e["tid"]
    renamed = []
    for e in sorted(doc["traceEvents"], key=lambda e: e.get("ts", 0)):
        m = HOOK.match(str(e.get("name", "")))
        if m and e.get("cat") == "gpu_user_annotation":
            continue  # the GPU-side copies of the ranges
        if m:
            ub = int(m.group(1))
            e = dict(e, name=f"{'ab'[ub]}{stage[ub]}")
            stage[ub] += 1
        if one_thread and e.get("cat") in ("cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "python_function"):
            e = dict(e, tid=main_tid)
        renamed.append(e)
    doc["traceEvents"] = renamed
    return write_trace(doc, tmp_path / "sglang.json.gz"), src


@pytest.mark.parametrize("one_thread", [False, True])
def test_stage_ranges_give_the_two_microbatches(tmp_path, one_thread):
    path, src = _as_sglang(tmp_path, one_thread)
    comm = ["--comm-kernels", "spin_kernel"]
    tbo, hooks = report_json(*comm, str(path)), report_json(*comm, str(src))
    assert tbo["microbatch_source"] == "SGLang two-batch overlap a<i>/b<i> ranges"
    assert hooks["microbatch_source"] == "dbo record_function ranges"
    for key in ("hidden_fraction", "hidden_under_other_ubatch_fraction", "kernels"):
        assert tbo["comm"][key] == pytest.approx(hooks["comm"][key], abs=1e-4), key
    assert tbo["verdict"]["label"] == hooks["verdict"]["label"] == "overlapped"


def test_a_few_ranges_named_like_stages_are_not_microbatches(tmp_path):
    src = sample_trace("overlap-no-hooks")

    def one_stage_range(doc):
        first = events_of(doc, "user_annotation")[0]
        doc["traceEvents"].append(dict(first, name="a1"))  # one range called a1, no b<i>

    out = rewrite_trace(src, tmp_path / "one.json.gz", one_stage_range)
    assert "SGLang" not in report_json(str(out))["microbatch_source"]
