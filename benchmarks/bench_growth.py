"""How the analysis's CPU time grows with its input: the timed twins of the tests that count work
(tests/helpers/work.py). CI counts (a loaded machine cannot move a count; CPU time swells under load, caches
and memory bandwidth being shared); this times, for a quiet machine, and sees what a count cannot,
a loop that scans inline (a mask per step in its body).

    python benchmarks/bench_growth.py [--only NAME ...] [--repeat 3]

Each case runs its small and large input `--repeat` times, interleaved, and keeps each one's best
CPU time (time.process_time); it prints the growth beside its limit and the load average, and
exits 1 if a growth is over its limit. The cases and inputs are the tests' own:
  shape a, b, d, ...  tests/unit/test_scaling.py's shapes, N and 8N copies (limit 16x: linear ~8x,
                      quadratic ~64x; the code before issue 21 measured 21-24x)
  two ranks           both ranks of samples/two-gpu-overlap through the cross-rank path, 8 and 64 copies
  exposure ...        tests/unit/test_exposure_scaling.py's pathologies, 600 and 2,400 copies (limit 6.3x:
                      time^(4/3); a scan per stretch is 16x)
  busy                microbatch_busy, 50,000 and 400,000 activities (limit 16x)
  capture             capture_windows, 20,000 and 160,000 calls on n/4 threads (limit 24x)
  optimizers          optimizer_steps, 2,000 and 16,000 distinct names (limit 24x)
  steps               `report` and `report --markdown` of 500 and 5,000 steps (limit 8x)
  afd pair, ...       tests/helpers/afd_synth.py's attention+FFN pair with DBO, 4 layers, eager and under
                      graphs, 250 and 2,000 steps: both ranks' analyses and what the pair tells
                      together (round trips, the FFN's parts, the pair's figures, time slicing),
                      the traces read beforehand (limit 16x)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest  # noqa: E402,F401  (it puts the tests' folders by kind on the path: tests/README.md)
sys.path.insert(0, str(ROOT))


def _best(runs: list[Callable[[], object]], repeat: int) -> list[float]:
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            t = time.process_time()
            run()
            best[i] = min(best[i], time.process_time() - t)
    return best


def cases() -> list[tuple[str, float, Callable[[], tuple[Callable[[], object], Callable[[], object]]]]]:
    """(name, limit, a builder of the (small, large) runs): built only when the case runs."""
    import numpy as np
    import test_exposure_scaling as ex
    import test_scaling as sc
    from conftest import SAMPLES

    from dbo_trace.analysis.model import Options
    from dbo_trace.analysis.rank_analysis import analyze_rank
    from dbo_trace.analysis.report import combine
    from dbo_trace.trace.load import read_timeline

    out = []
    for shape, (sample, how, comm, n) in sc.SHAPES.items():

        def build(sample=sample, how=how, comm=comm, n=n):
            from tiling import tiled

            (trace,) = sorted((SAMPLES / sample / "traces").glob("rank0*.json.gz"))
            recording = read_timeline(trace, 0)
            options = Options(comm_patterns=comm)
            small, large = tiled(recording, n, **how), tiled(recording, 8 * n, **how)
            return (lambda: analyze_rank(small, [], options)), (lambda: analyze_rank(large, [], options))

        out.append((f"shape {shape}", 16.0, build))

    def two_ranks():
        from tiling import tiled_ranks

        traces = sorted((SAMPLES / "two-gpu-overlap" / "traces").glob("rank*.json.gz"))
        recordings = [read_timeline(t, r) for r, t in enumerate(traces)]
        options = Options()

        def run(timelines):
            return combine([analyze_rank(tl, [], options, rank=r) for r, tl in enumerate(timelines)], options, ["x"], [])

        small, large = tiled_ranks(recordings, 8), tiled_ranks(recordings, 64)
        return (lambda: run(small)), (lambda: run(large))

    out.append(("two ranks", 16.0, two_ranks))
    for pathology in ("no step markers", "one step spanning everything", "duplicate correlation ids", "steps kept"):

        def exposure_case(pathology=pathology):
            from dbo_trace.analysis.overlap.exposure import exposure

            arrays = ex.sample_arrays.__wrapped__()
            small, large = ex.tiled(arrays, 600, pathology), ex.tiled(arrays, 2400, pathology)
            return (lambda: exposure(**small)), (lambda: exposure(**large))

        out.append((f"exposure, {pathology}", 4 ** (np.log(16) / np.log(8)), exposure_case))

    def busy():
        from dbo_trace.analysis.steps.attribution import PHASE_COMM, PHASE_COMPUTE
        from dbo_trace.analysis.overlap.busy import microbatch_busy

        rng = np.random.default_rng(3)

        def arrays(n):
            start = np.cumsum(rng.random(n) * 10.0)
            return dict(start=start, end=start + rng.random(n) * 30.0, ubatch=rng.integers(-1, 2, n).astype(np.int8),
                        phase=rng.choice([PHASE_COMPUTE, PHASE_COMM], n), selected=np.ones(n, bool))  # fmt: skip

        small, large = arrays(50_000), arrays(400_000)
        return (lambda: microbatch_busy(**small)), (lambda: microbatch_busy(**large))

    def capture():
        import test_capture_hostile as ch

        from dbo_trace.analysis.host.capture import capture_windows

        small, large = ch._unclosed_on_many_threads(20_000), ch._unclosed_on_many_threads(160_000)
        return (lambda: capture_windows(*small)), (lambda: capture_windows(*large))

    def optimizers():
        import test_steps_hostile as sh

        from dbo_trace.analysis.steps.sources import optimizer_steps

        small, large = sh._distinct_optimizers(2_000), sh._distinct_optimizers(16_000)
        return (lambda: optimizer_steps(small)), (lambda: optimizer_steps(large))

    def steps(*args):
        def build():
            from conftest import run_cli
            from traces import many_steps

            base = Path(tempfile.mkdtemp(prefix="dbo-trace-growth-"))
            small, large = many_steps(base / "small", 500), many_steps(base / "large", 5_000)
            return (lambda: run_cli("report", str(small), *args)), (lambda: run_cli("report", str(large), *args))

        return build

    def afd(graphs):
        def build():
            from afd_synth import afd_pair, pair_analysis

            base = Path(tempfile.mkdtemp(prefix="dbo-trace-growth-"))
            runs = []
            for steps in (250, 2_000):
                afd_pair(base / str(steps), dbo=True, graphs=graphs, layers=4, steps=steps, yield_us=5.0)
                runs.append(pair_analysis(base / str(steps)))
            return runs[0], runs[1]

        return build

    out += [("busy", 16.0, busy), ("capture", 24.0, capture), ("optimizers", 24.0, optimizers)]
    out += [("afd pair, eager", 16.0, afd(False)), ("afd pair, graphs", 16.0, afd(True))]
    out += [("steps", 8.0, steps()), ("steps --markdown", 8.0, steps("--markdown"))]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="cases whose name contains one of these")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    over = 0
    for name, limit, build in cases():
        if args.only and not any(o in name for o in args.only):
            continue
        small, large = build()
        small()  # warm: imports, caches
        t_small, t_large = _best([small, large], args.repeat)
        growth = t_large / max(t_small, 1e-9)
        over += growth > limit
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        flag = "  OVER" if growth > limit else ""
        print(f"{name:36s} {t_small * 1000:9.1f} ms {t_large * 1000:9.1f} ms  {growth:5.1f}x (limit {limit:.1f}x; load {load}){flag}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
