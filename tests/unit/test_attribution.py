"""Microbatch and phase attribution on the real samples, from each source."""

import shutil
from dataclasses import replace

import numpy as np
import pytest
from conftest import SAMPLES, sample_trace

from dbo_trace.analysis.steps.attribution import (
    PHASE_COMM,
    PHASE_COMPUTE,
    SOURCE_EVENT_LOG,
    SOURCE_HOOK_RANGES,
    SOURCE_PATTERNS,
    SOURCE_THREADS,
    attribute,
)
from dbo_trace.analysis.steps.microbatched import SOURCE_NONE
from dbo_trace.trace.eventlog import read_event_log
from dbo_trace.trace.kineto import read_kineto
from dbo_trace.trace.timeline import build_timeline


def _timeline(variant):
    return build_timeline(read_kineto(sample_trace(variant)), 0)


def _logs(variant):
    return [read_event_log(p) for p in sorted((SAMPLES / variant / "events").glob("*.jsonl"))]


def _is_spin(tl):
    return np.array(["spin_kernel" in tl.names[n] for n in tl.gpu.name])


@pytest.mark.parametrize("variant", ["overlap", "overlap-stock-profiler", "serial", "hostbound"])
def test_event_log_attributes_every_kernel_to_its_phase(variant):
    """By construction: spin kernels are launched in comm phases, everything else in compute phases,
    and the two microbatches launch the same number of kernels. Holds with and without profile_all_threads."""
    tl = _timeline(variant)
    att = attribute(tl, _logs(variant))
    assert att.source == SOURCE_EVENT_LOG
    spin = _is_spin(tl)
    assert (att.gpu_phase[spin] == PHASE_COMM).all()
    assert (att.gpu_phase[~spin] == PHASE_COMPUTE).all()
    counts = np.bincount(att.gpu_ubatch.astype(int))
    assert len(counts) == 2 and counts[0] == counts[1] == len(tl.gpu) // 2


def test_hook_ranges_attribute_without_the_event_log():
    """profile_all_threads traces carry the hooks' dbo:ubN:phase ranges: enough on their own."""
    tl = _timeline("overlap")
    att = attribute(tl, [])
    assert att.source == SOURCE_HOOK_RANGES
    spin = _is_spin(tl)
    assert (att.gpu_phase[spin] == PHASE_COMM).all()
    assert (att.gpu_phase[~spin] == PHASE_COMPUTE).all()
    assert np.bincount(att.gpu_ubatch.astype(int)).tolist() == [len(tl.gpu) // 2] * 2


def test_ubatch_patterns():
    tl = _timeline("overlap")
    att = attribute(tl, [], ubatch_patterns=[r"^dbo:ub0:(compute|comm)$", r"^dbo:ub1:(compute|comm)$"])
    # The hook ranges win when present; a trace without them falls to the patterns.
    assert att.source == SOURCE_HOOK_RANGES
    tl = replace(tl, names=[n.replace("dbo:", "mine:") for n in tl.names])
    att = attribute(tl, [], ubatch_patterns=[r"^mine:ub0:", r"^mine:ub1:"])
    assert att.source == SOURCE_PATTERNS
    assert np.bincount(att.gpu_ubatch.astype(int)).tolist() == [len(tl.gpu) // 2] * 2


@pytest.mark.parametrize("variant", ["overlap-stock-profiler", "serial", "hostbound"])
def test_launching_threads_agree_with_the_event_log(variant):
    """A plain trace of vLLM's UBatchContext threads (stock profiler: their launch calls only): the two
    non-main threads launching in a step are the microbatches. Checked kernel by kernel against the
    event log's attribution of the same trace, which joins the hooks' own record by thread and time."""
    tl = _timeline(variant)
    by_log = attribute(tl, _logs(variant))
    tl = replace(tl, names=[n.replace("dbo:", "hidden:") for n in tl.names])  # no hook ranges either: a stock trace
    by_threads = attribute(tl, [])
    assert by_threads.source == SOURCE_THREADS
    assert (by_threads.gpu_ubatch == by_log.gpu_ubatch).all()


def test_a_plain_trace_without_microbatch_threads_says_so():
    """One launching thread (the main one): no microbatches, and the output says why."""
    tl = _timeline("overlap-no-hooks")
    other = tl.calls.lane != tl.pid
    tl.calls.lane[other] = tl.pid  # as if the main thread had launched everything
    att = attribute(tl, [])
    assert att.source == SOURCE_NONE and (att.gpu_ubatch == -1).all()
    # kept apart from the notes (an AFD attention rank's round trips may still tell two); the rank says it
    assert att.no_microbatch is not None and "no microbatches" in att.no_microbatch


def test_event_log_of_another_process_is_not_used(tmp_path):
    shutil.copytree(SAMPLES / "overlap", tmp_path / "b")
    tl = _timeline("overlap")
    logs = _logs("serial")  # a different pid
    att = attribute(tl, logs)
    assert att.source != SOURCE_EVENT_LOG
    assert any("other processes" in n for n in att.notes)


def test_steps_from_gaps_without_markers():
    """A trace with neither event log nor ProfilerStep# ranges: steps are cut at the long GPU idle
    gaps between them. The sample's 5 profiled steps are separated by synchronize + thread start-up."""
    marked = attribute(_timeline("overlap-no-hooks"), [])
    assert marked.steps.source.startswith("ProfilerStep")
    tl = _timeline("overlap-no-hooks")
    tl = replace(tl, names=[n.replace("ProfilerStep#", "Unmarked#") for n in tl.names])
    att = attribute(tl, [])
    assert att.steps.source.startswith("GPU idle gaps")
    assert len(att.steps) == 5
    # Every GPU activity lands in the same step as with the ProfilerStep# markers.
    assert (att.gpu_step == marked.gpu_step).all() and (att.gpu_step >= 0).all()


def test_the_step_marker_note_only_where_it_matched_nothing():
    """--step-marker that matches the serial sample's `dbo:step#...` ranges gives the steps, and no
    note; one that matches no range says so and names where the steps came from instead."""
    from dbo_trace.analysis.steps.attribution import attribute
    from dbo_trace.analysis.steps.sources import SOURCE_MARKER
    from dbo_trace.trace.load import read_timeline

    tl = read_timeline(next((SAMPLES / "serial" / "traces").glob("*.json.gz")), 0)
    matched = attribute(tl, [], step_marker="dbo:step#")
    assert matched.steps.source == SOURCE_MARKER and len(matched.steps.start) > 0
    assert not [n for n in matched.notes if "--step-marker" in n]
    unmatched = attribute(tl, [], step_marker="no_such_range")
    assert unmatched.steps.source != SOURCE_MARKER
    assert any(n.startswith("no CPU range matched --step-marker 'no_such_range'") for n in unmatched.notes)
