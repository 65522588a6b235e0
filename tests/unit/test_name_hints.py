"""Name hints (trace/timeline.py names_hinted): a pattern every name a test accepts holds, searched
in all the names at once so that a long run's 100,000 ProfilerStep# names are not each tested.
The hint may find more names than the test accepts, never fewer: checked here for every hint the
analysis uses, against its own test run on every name, over names built to be awkward (newlines,
the hint's text in the middle, other case, non-ASCII letters that re's IGNORECASE folds)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from dbo_trace.analysis.steps import attribution, stalls, sources as steps
from dbo_trace.analysis.classify import per_name
from dbo_trace.trace.timeline import names_hinted, starts_with, used_names

# (test, hint) as the analysis pairs them.
PAIRS = [
    (lambda n: bool(stalls.COMPILE_RANGE.search(n)), stalls.COMPILE_HINT),
    *[(rx.match, hint) for rx, hint in steps.HINTS.items()],
    (lambda n: n.startswith(steps.MODEL_RUNNER_PREFIX), steps.MODEL_RUNNER_HINT),  # host_time's too
    (attribution._HOOK_RANGE.match, attribution._HOOK_RANGE_HINT),
    (lambda n: any(re.search(p, n) for p in attribution._SGLANG_STAGE), attribution._SGLANG_HINT),
]

ACCEPTED = [
    "dynamo", "DYNAMO", "x (dynamo_timed)", "entire_frame_compile", "Backend_Compile (dynamo_timed)",
    "inductor_compile", "compile_fx.<locals>.fw", "async_compile.wait", "triton.compile", "Triton_Compile",
    "compile_inner", "autotune_select", "AUTOTUNING", "benchmark_all_configs", "benchmark_all_configſ",
    "execute_context_2(1024)_generation_3(3)", "execute_1027_context_2(sq1024sk5)_generation_3(sq3sk1)",
    "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad", "dbo:step#12:graph",
    "gpu_model_runner: preprocess", "gpu_model_runner: forward", "dbo:ub0:compute", "dbo:ub1:comm",
    "a1", "b12", "a3\n",
]  # fmt: skip
PLAIN = ["ProfilerStep#7", "aten::mm", "cudaLaunchKernel", "", "\n", "x\ndbo:ub0:compute", "ab", "ba1", "Dynamo?"]


def _awkward_names(rng: random.Random, n: int) -> list[str]:
    """Accepted names, plain ones, and both cut and spliced (a name's text in another's middle,
    after a newline, in other case), with non-ASCII letters here and there."""
    pieces = ACCEPTED + PLAIN + ["ſ", "K", "İ", "é", "\n", "#", "_", "x", "1"]
    out = list(ACCEPTED + PLAIN)
    for _ in range(n):
        name = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.2:
            name = name.swapcase()
        if rng.random() < 0.2 and name:
            cut = rng.randrange(len(name))
            name = name[cut:] if rng.random() < 0.5 else name[:cut]
        out.append(name)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_every_hint_finds_every_name_its_test_accepts(seed):
    rng = random.Random(seed)
    names = _awkward_names(rng, 3000)
    if seed % 2:  # an ASCII text takes the lowercase path; one with non-ASCII names the IGNORECASE one
        names = [n for n in names if n.isascii()]
    ids = np.arange(len(names))
    for test, hint in PAIRS:
        accepted = {i for i, n in enumerate(names) if test(n)}
        found = set(names_hinted(names, ids, hint).tolist())
        missed = sorted(accepted - found)
        assert not missed, (hint.pattern, [names[i] for i in missed[:5]])
        assert accepted, hint.pattern  # the names hold some that each test accepts: the check is not empty


def test_a_hint_finds_what_a_plain_search_of_each_name_finds():
    """Each name is searched on its own by a reference; newline-free names come back exactly."""
    rng = random.Random(7)
    names = [n for n in _awkward_names(rng, 2000) if "\n" not in n]
    ids = np.array(sorted(rng.sample(range(len(names)), 1500)))
    for hint in (stalls.COMPILE_HINT, starts_with("dbo:"), starts_with("a"), re.compile("compile")):
        want = [i for i in ids.tolist() if hint.search("\n" + names[i])]
        assert names_hinted(names, ids, hint).tolist() == want, hint.pattern


def test_a_name_with_a_newline_is_tested_not_lost():
    names = ["x\ndbo:ub0:compute", "dbo:ub1:comm", "ProfilerStep#1"]
    found = names_hinted(names, np.arange(3), attribution._HOOK_RANGE_HINT).tolist()
    assert found == [0, 1]  # the first comes back (a superset) and its test refuses it


def test_per_name_with_a_hint_equals_per_name_without():
    rng = random.Random(3)
    names = _awkward_names(rng, 2000)
    name_ids = np.array([rng.randrange(len(names)) for _ in range(5000)], np.int32)
    for test, hint in PAIRS:
        want = per_name(names, name_ids, test)
        assert (per_name(names, name_ids, test, hint=hint) == want).all(), hint.pattern


def test_used_names_are_numpy_unique():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 500, 3000)
    assert used_names(ids, 700).tolist() == np.unique(ids).tolist()
    assert used_names(np.empty(0, np.int64), 5).tolist() == []
    assert used_names(np.array([3, -1, 3]), 5).tolist() == [-1, 3]  # not a name id: as np.unique would
