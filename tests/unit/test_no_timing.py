"""No test measures CPU or wall time to compare it (issue 47): a loaded machine swells both, and a
ratio of two times failed 2 runs in 5 on a loaded 2-core machine. Tests count work (tests/helpers/work.py:
elements, calls, memory, members read) or wait with deadlines far from what they wait for; timing
is benchmarks/'s. This test keeps it so: the clocks that time work appear only where allowed."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
CLOCKS = re.compile(r"\b(process_time|perf_counter|thread_time|timeit|getrusage)\b")
ALLOWED = {
    "pystacks_program.py": "the workload the sampler watches: it spins for a set time",
    "test_record_parts.py": "prints how long a redaction took, asserts nothing on it",
    "test_record_repeats.py": "replaces the load generator's clock with a fixed one",
    "test_nsys_hostile.py": "getrusage for the peak resident memory (ru_maxrss), not a time",
    "test_no_timing.py": "this list",
}


def test_no_test_times_work():
    found = sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if CLOCKS.search(p.read_text()) and p.name not in ALLOWED
    )
    assert not found, f"time measured in {found}: count the work instead (tests/helpers/work.py) or move it to benchmarks/"
