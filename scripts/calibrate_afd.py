#!/usr/bin/env python3
"""Write the default calibration of `dbo-trace report --what-if dbo=on|off` from recorded AFD pairs
(a load sweep's folder or bundles of DBO on and off), by the same measurement `--calibrate` makes:

    python scripts/calibrate_afd.py samples/afd-sweep > dbo_trace/data/afd-calibration.json

The shipped one is the H200 sweep at 16, 32 and 64 requests in flight (samples/afd-sweep)."""

import sys
from dataclasses import replace
from pathlib import Path

from dbo_trace.commands.calibration import calibration_of, encode


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    found = calibration_of(tuple(Path(a) for a in argv))
    loads = sorted({int(p.off.tokens) for p in found.pairs})
    gpus = sorted({g for p in found.pairs for g in (p.on.gpu, p.off.gpu) if g})
    source = f"the shipped AFD pair sweep ({', '.join(gpus) or 'GPU not recorded'}, {', '.join(map(str, loads))} tokens a step)"
    sys.stdout.buffer.write(encode(replace(found, source=source)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
