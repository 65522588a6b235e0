"""Why comm is exposed, on real recordings: the stretches and their causes against a plain-Python
computation from the same attribution (microbatch, step and launch time of every kernel)."""

import math

import pytest
from conftest import SAMPLES
from headline_reference import merged

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths


def exposed_stretches(kernels):
    """Comm minus compute, as disjoint stretches, by walking merged lists."""
    comm = merged([(s, e) for s, e, k, *_ in kernels if k == c.COMM])
    compute = merged([(s, e) for s, e, k, *_ in kernels if k == c.COMPUTE])
    out = []
    for s, e in comm:
        cursor = s
        for cs, ce in compute:
            if ce <= cursor or cs >= e:
                continue
            if cs > cursor:
                out.append((cursor, cs))
            cursor = max(cursor, ce)
        if cursor < e:
            out.append((cursor, e))
    return out


def plain_reasons(rank, cross=None):
    """cross: the report's cross-rank view, whose per-kernel waits for a peer rank (checked on their
    own in test_peers.py) come first in a stretch, as docs/analysis.md says."""
    d = rank.detail
    tl, att = d.timeline, d.attribution
    kernels = [
        (
            float(tl.gpu.start[i]),
            float(tl.gpu.end[i]),
            int(d.kernel_kind[i]),
            int(att.gpu_ubatch[i]),
            int(att.gpu_step[i]),
            float(att.gpu_launch_start[i]),
        )
        for i in range(len(tl.gpu))
    ]
    held = d.held.causes() if d.held is not None else {}  # checked on its own in test_held.py
    reasons = {"host": 0.0, "waiting": 0.0, "nothing": 0.0, "unknown": 0.0, "late_record": 0.0, "crowded": 0.0, "held": 0.0}
    reasons["peer"] = 0.0
    peer_until = {}
    if cross is not None and cross.waits is not None:
        index, wait = cross.waits.kernel_wait_us[rank.rank]
        for i, w in zip(index.tolist(), wait.tolist()):
            if w > cross.alignment.accuracy_us:  # within the clocks' accuracy, no wait at all
                peer_until[i] = kernels[i][0] + w
    for s, e in exposed_stretches(kernels):
        mid = (s + e) / 2
        covering = [i for i, k in enumerate(kernels) if k[2] == c.COMM and k[0] <= mid <= k[1]]
        if not covering:
            continue
        # the latest-starting one, as a stream would show it
        index = max(covering, key=lambda i: (kernels[i][0], kernels[i][1] - kernels[i][0]))
        comm = kernels[index]
        if peer_until.get(index, -math.inf) > s:
            waited = min(e, peer_until[index]) - s
            reasons["peer"] += waited
            s += waited
            if s >= e:
                continue
        if index in held:
            reasons[held[index]] += e - s
            continue
        later = [k for k in kernels if k[2] == c.COMPUTE and k[0] >= s and (comm[4] < 0 or k[4] == comm[4])]
        if comm[3] >= 0:
            later = [k for k in later if k[3] >= 0 and k[3] != comm[3]]
        if not later:
            reason = "nothing"
        else:
            launched = min(later, key=lambda k: k[0])[5]
            reason = "unknown" if math.isnan(launched) else "host" if launched > s else "waiting"
        reasons[reason] += e - s
    return reasons


@pytest.mark.parametrize("sample", ["overlap", "serial", "two-gpu-overlap", "two-gpu-hostbound", "hostbound", "late", "smhungry"])
def test_exposed_comm_reasons_match_a_plain_computation(sample):
    report = analyze_paths([SAMPLES / sample], Options())
    for rank in report.ranks:
        got = rank.exposure.by_reason_us
        want = plain_reasons(rank, report.cross_rank)
        assert rank.exposure.exposed_us == pytest.approx(rank.total.comm_exposed_us, rel=1e-6)
        for reason, t in want.items():
            assert got[reason] == pytest.approx(t, abs=1e-3), reason


def test_each_demo_mode_is_blamed_on_its_cause():
    def top(sample):
        return analyze_paths([SAMPLES / sample], Options()).ranks[0].exposure.top[0][0]

    assert top("hostbound") == "host"
    assert top("late") == "late_record"  # by construction: an event recorded after the other's compute
    assert top("smhungry") == "crowded"  # by construction: many-wave kernels take every SM
    # The overlap mode's cooperative GEMM crowds out the one-block comm too (measured: docs/analysis.md).
    assert top("overlap") == "crowded"
    assert top("serial") == "nothing"  # each microbatch's comm waits for its own compute, nothing to hide it


@pytest.mark.parametrize("sample", ["overlap", "two-gpu-overlap"])
def test_comm_operations_per_microbatch_by_construction(sample):
    """4 layers, each microbatch dispatches and combines once per layer: 8 operations per microbatch
    in every step, each a single all-to-all (or spin) kernel; their hidden time adds up to the rank's."""
    from conftest import report_json

    doc = report_json(str(SAMPLES / sample))
    for rank in doc["ranks"]:
        ops = rank["comm_operations"]
        assert [(o["ubatch"], o["index"]) for o in ops] == [(u, k) for u in (0, 1) for k in range(8)]
        assert all(o["steps"] == len(rank["steps"]) for o in ops)
        assert all(0 <= o["hidden_fraction"] <= 1 for o in ops)


def test_no_operation_table_without_microbatches():
    from conftest import report_json

    assert report_json(str(SAMPLES / "vllm-graphs-decode"))["ranks"][0]["comm_operations"] == []
