"""compare's statistics computed plainly from docs/analysis.md ("compare: statistics that hold"), over
`report --json` steps: lists and loops, nothing from dbo_trace. (Written by the author of the code, from
the docs section, without calling it; numpy only for the seeded resampling the docs specify.)"""

from __future__ import annotations

import math

import numpy as np  # its random generator only: the docs name the resamples by numpy's default_rng


def median(values):
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def sample(doc, phase):
    """The arm's steady steps of a phase ("all": every phase) that have a next start on their rank (its
    latest-starting step has none, where it has more than one): (period, tokens) per step, ranks averaged."""
    last = {}
    for s in doc["steps"]:
        last.setdefault(s["rank"], []).append(s)
    last = {r: max(steps, key=lambda s: s["start_us"])["number"] for r, steps in last.items() if len(steps) > 1}
    by_rank = {}
    for s in doc["steps"]:
        if (phase == "all" or s["phase"] == phase) and s["stall"] is None and last.get(s["rank"]) != s["number"]:
            by_rank.setdefault(s["rank"], []).append(s)
    if not by_rank:
        return []
    ranks = list(by_rank.values())
    n = min(len(r) for r in ranks)
    out = []
    for k in range(n):
        s0 = ranks[0][k]
        tokens = None
        if s0["context_tokens"] is not None or s0["generation_tokens"] is not None:
            tokens = (s0["context_tokens"] or 0) + (s0["generation_tokens"] or 0)
        out.append((sum(r[k]["step_us"] for r in ranks) / len(ranks), tokens))
    return out


def percentile(values, q):
    """Linear interpolation between the closest ranks (numpy's default)."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def bucket(tokens):
    return round(4 * math.log2(max(tokens, 1)))


def against(base, arm):
    """dict(call, change, low, high, n, paired, per_token, slower) of arm against base (samples)."""
    a, b = list(base), list(arm)
    paired = per_token = False
    if a and b and all(t for _, t in a) and all(t for _, t in b):
        shared = {bucket(t) for _, t in a} & {bucket(t) for _, t in b}
        ka = [x for x in a if bucket(x[1]) in shared]
        kb = [x for x in b if bucket(x[1]) in shared]
        if (len(ka) < len(a) or len(kb) < len(b)) and len(ka) >= 5 and len(kb) >= 5:
            a, b, paired = ka, kb, True
        ta, tb = median([t for _, t in a]), median([t for _, t in b])
        if abs(tb / ta - 1) > 0.10:
            a = [(u / t, t) for u, t in a]
            b = [(u / t, t) for u, t in b]
            per_token = True
    xa, xb = [u for u, _ in a], [u for u, _ in b]
    if not xa or not xb:
        return dict(call="too few steps", n=(len(xa), len(xb)))
    ma, mb = median(xa), median(xb)
    diffs = [y - x for y in xb for x in xa]
    n, m = len(xa), len(xb)
    # the docs' bootstrap: numpy's default_rng(0), 2000 resamples of the first arm, then of this one
    rng = np.random.default_rng(0)
    ia, ib = rng.integers(0, n, (2000, n)).tolist(), rng.integers(0, m, (2000, m)).tolist()
    ratios = [median([xb[j] for j in rb]) / median([xa[i] for i in ra]) - 1 for ra, rb in zip(ia, ib)]
    low, high = percentile(ratios, 2.5), percentile(ratios, 97.5)
    enough = n >= 5 and m >= 5
    call = "too few steps" if not enough else "beyond noise" if (low > 0 or high < 0) else "within noise"
    slower = (sum(1 for d in diffs if d > 0) + 0.5 * sum(1 for d in diffs if d == 0)) / len(diffs)
    return dict(
        call=call, change=mb / ma - 1, low=low, high=high, n=(n, m), paired=paired, per_token=per_token,
        slower=slower,
    )  # fmt: skip
