#!/usr/bin/env python3
"""The one-arm model's validation table (docs/analysis.md, "DBO's effect from one arm"): each pair of a
calibration predicted both ways from the OTHER pairs alone, never from itself, against its measured
change (median steady periods, DBO on against off).

    python scripts/validate_afd_model.py                      # the shipped calibration (samples/afd-sweep)
    python scripts/validate_afd_model.py CALIBRATION.json     # one written by scripts/calibrate_afd.py
"""

import sys
from pathlib import Path

import msgspec

from dbo_trace.analysis.afd.dbo_model import Calibration, prediction_of
from dbo_trace.commands.calibration import default_calibration


def rows(calibration: Calibration) -> list[tuple[str, str, float, float, float, float]]:
    """(load, direction, measured, predicted, low, high) per pair and direction."""
    out = []
    pairs = calibration.pairs
    for k, p in enumerate(pairs):
        others = Calibration(pairs[:k] + pairs[k + 1 :], calibration.source)
        measured = p.on.period_us / p.off.period_us - 1.0
        for given, direction in ((p.off, "on from off"), (p.on, "off from on")):
            w = prediction_of(given, others, gpu=given.gpu)
            out.append((f"{p.off.tokens:g}", direction, measured, w.change, w.low, w.high))
    return out


def main(argv: list[str]) -> int:
    calibration = (
        msgspec.json.decode(Path(argv[0]).read_bytes(), type=Calibration) if argv else default_calibration()
    )
    print("| tokens a step | direction | measured | prediction [interval] | miss (points) | interval holds it |")
    print("|---|---|---|---|---|---|")
    misses = []
    for load, direction, measured, change, low, high in rows(calibration):
        miss = (change - measured) * 100
        misses.append(abs(miss))
        holds = "yes" if low <= measured <= high else "no"
        print(
            f"| {load} | {direction} | {measured * 100:+.1f}% | {change * 100:+.1f}% [{low * 100:+.1f}, {high * 100:+.1f}] "
            f"| {miss:+.1f} | {holds} |"
        )
    print(f"\nmean miss {sum(misses) / len(misses):.1f} points, largest {max(misses):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
