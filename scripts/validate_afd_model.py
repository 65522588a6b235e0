#!/usr/bin/env python3
"""The one-arm model's validation table (docs/analysis.md, "DBO's effect from one arm"): each recorded pair
predicted both ways, against its measured change (median steady periods, DBO on against off).

    python scripts/validate_afd_model.py
        the shipped calibration (samples/afd-sweep), each pair from the OTHER pairs alone, never itself
    python scripts/validate_afd_model.py PAIRS.json
        the pairs of a calibration written by scripts/calibrate_afd.py, each from the others
    python scripts/validate_afd_model.py PAIRS.json --calibration CALIBRATION.json
        every pair of PAIRS.json predicted from CALIBRATION.json's pairs (a pair of both is left out)

A prediction whose arm, or whose predicted arm, pads to a larger CUDA graph (its recording's capture sizes)
says so and is widened, as `report --what-if dbo=` does.
"""

import argparse
import sys
from pathlib import Path

import msgspec

from dbo_trace.analysis.afd.attention_side import graph_padding
from dbo_trace.analysis.afd.dbo_model import ArmTerms, Calibration, prediction_of
from dbo_trace.commands.calibration import default_calibration


def _read(path: str) -> Calibration:
    return msgspec.json.decode(Path(path).read_bytes(), type=Calibration)


def _predict(given: ArmTerms, calibration: Calibration):
    pads = graph_padding(given.tokens, given.graph_sizes)
    return prediction_of(given, calibration, gpu=given.gpu, pads=pads)


def rows(pairs: Calibration, calibration: Calibration | None) -> list[tuple[str, str, float, object]]:
    """(load, direction, measured, prediction) per pair and direction."""
    out = []
    for k, p in enumerate(pairs.pairs):
        if calibration is None:
            used = Calibration(pairs.pairs[:k] + pairs.pairs[k + 1 :], pairs.source)
        else:
            used = Calibration(tuple(c for c in calibration.pairs if c.on.fingerprint != p.on.fingerprint), calibration.source)
        if not used.pairs:
            continue
        measured = p.on.period_us / p.off.period_us - 1.0
        for given, direction in ((p.off, "on from off"), (p.on, "off from on")):
            out.append((f"{p.off.tokens:g}", direction, measured, _predict(given, used)))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="?", help="a calibration JSON whose pairs are predicted (default: the shipped one)")
    parser.add_argument("--calibration", help="predict from this calibration's pairs instead of leaving one out")
    args = parser.parse_args(argv)
    pairs = _read(args.pairs) if args.pairs else default_calibration()
    calibration = _read(args.calibration) if args.calibration else None
    print("| tokens a step | direction | measured | prediction [interval] | miss (points) | interval holds it | caveats |")
    print("|---|---|---|---|---|---|---|")
    misses = []
    for load, direction, measured, w in rows(pairs, calibration):
        miss = (w.change - measured) * 100
        misses.append(abs(miss))
        holds = "yes" if w.low <= measured <= w.high else "no"
        said = ", ".join(
            k for k, on in (("no FFN", w.caveats.no_ffn), ("GPU", w.caveats.gpu), ("outside", w.caveats.outside), ("pads", w.caveats.pads)) if on
        )
        print(
            f"| {load} | {direction} | {measured * 100:+.1f}% | {w.change * 100:+.1f}% [{w.low * 100:+.1f}, {w.high * 100:+.1f}] "
            f"| {miss:+.1f} | {holds} | {said or '-'} |"
        )
    if misses:
        print(f"\nmean miss {sum(misses) / len(misses):.1f} points, largest {max(misses):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
