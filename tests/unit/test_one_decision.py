"""Issue 60: whether DBO ran is decided in one module (analysis/steps/microbatched.py), and the
verdict's decision (analysis/verdict/decision.py) asks the overlap model it is handed, never knowing
whether the run is disaggregated."""

import re

from conftest import ROOT

PACKAGE = ROOT / "dbo_trace"
VOCABULARY = re.compile(r"\b(MICROBATCHED_PATHS|SOURCE_NONE)\b")


def test_whether_dbo_ran_is_decided_in_one_module():
    """The vocabulary of "did DBO run" (the event log's microbatched paths, the attribution's source
    that found none) is used in at most two modules (the one that decides, and the attribution that
    finds no microbatch), none of them in render/: every other module asks them or reads the answer
    a type carries."""
    using = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if VOCABULARY.search(p.read_text()))
    assert len(using) <= 2, using
    assert not [m for m in using if m.startswith("render/")], using


def test_the_decision_names_no_role_of_a_disaggregated_run():
    """decide() asks the overlap model (the kernels' overlap, or round trips between roles) and has no
    branch of its own for a disaggregated run: decision.py names none, in code or in strings."""
    text = (PACKAGE / "analysis" / "verdict" / "decision.py").read_text()
    found = [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if re.search("afd|ffn|role", line, re.I)]
    assert not found, found


def test_the_finders_find_what_they_look_for():
    assert VOCABULARY.search("from x import SOURCE_NONE") and not VOCABULARY.search("SOURCE_NONE_AT_ALL")
    assert re.search("afd|ffn|role", "e.Role", re.I)
