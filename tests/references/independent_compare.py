#!/usr/bin/env python3
"""Independent reference for dbo-trace's `compare` figures.

Written only from docs/analysis.md ("Steps", "Step time: period and window",
"Steady state and stalls", "compare: statistics that hold", "Unprofiled timing")
and the raw sample data (Kineto traces, manifest.json).  Standard library only.

Usage:
    python3 independent_compare.py ARM_A ARM_B [ARM_C ...] [--rng numpy|stdlib]
                                   [--next-step reported|any]
                                   [--period start-to-start|covered]

The defaults are the readings of NOTES.md; the options only measure how much
an alternative reading would change (sensitivity).

Prints one JSON object: per arm and phase the steady step sample, its median
period (and the other figures), and per later arm the comparison against the
first arm (pairing by shape, per token, change, bootstrap interval, call,
slower pairs).  Times are in milliseconds, rounded to 3 decimals; changes and
shares are given in percent, rounded to 3 decimals.  See NOTES.md for every
reading of the docs that had to be chosen.
"""
from __future__ import annotations

import glob
import gzip
import json
import math
import os
import random
import re
import sys

PHASES = ("prefill", "decode", "mixed")
MIN_STEPS = 5
N_BOOT = 2000

# ----------------------------------------------------------------------------
# small numerics (numpy-compatible where the docs name numpy)
# ----------------------------------------------------------------------------


def median(xs):
    """numpy.median: the middle value, or the mean of the two middle ones."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    h = n // 2
    if n % 2:
        return s[h]
    return (s[h - 1] + s[h]) / 2.0


def _lerp(a, b, t):
    # numpy's _lerp: a + (b-a)*t, but b - (b-a)*(1-t) where t >= 0.5
    d = b - a
    if t >= 0.5:
        return b - d * (1.0 - t)
    return a + d * t


def percentile_linear(xs, q):
    """numpy.percentile(xs, q), method 'linear'."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    qq = q / 100.0
    v = (n - 1) * qq
    lo = math.floor(v)
    if lo < 0:
        lo = 0
    if lo >= n - 1:
        return s[n - 1]
    g = v - lo
    return _lerp(s[lo], s[lo + 1], g)


def mad_scaled(xs):
    m = median(xs)
    return 1.4826 * median([abs(x - m) for x in xs])


# ----------------------------------------------------------------------------
# numpy default_rng(0) emulation (PCG64 + SeedSequence + Lemire bounded ints),
# so that the bootstrap is the very procedure the docs name.  --rng stdlib uses
# random.Random(0) instead (same algorithm otherwise).
# ----------------------------------------------------------------------------

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
M128 = (1 << 128) - 1
PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645


def _seedseq_state(entropy, n_words64):
    INIT_A, MULT_A = 0x43B0D7E5, 0x931E8875
    INIT_B, MULT_B = 0x8B51F9DD, 0x58F38DED
    MIX_L, MIX_R = 0xCA01F9DD, 0x4973F715
    XS = 16
    # entropy int -> uint32 words (little end first); 0 -> [0]
    ent = []
    e = entropy
    if e == 0:
        ent = [0]
    while e > 0:
        ent.append(e & M32)
        e >>= 32
    pool_size = 4
    hc = [INIT_A]

    def hashmix(v):
        v = (v ^ hc[0]) & M32
        hc[0] = (hc[0] * MULT_A) & M32
        v = (v * hc[0]) & M32
        v ^= v >> XS
        return v

    def mix(x, y):
        r = (MIX_L * x - MIX_R * y) & M32
        r ^= r >> XS
        return r

    pool = [0] * pool_size
    for i in range(pool_size):
        pool[i] = hashmix(ent[i] if i < len(ent) else 0)
    for s in range(pool_size):
        for d in range(pool_size):
            if s != d:
                pool[d] = mix(pool[d], hashmix(pool[s]))
    for s in range(pool_size, len(ent)):
        for d in range(pool_size):
            pool[d] = mix(pool[d], hashmix(ent[s]))
    # generate_state
    hb = INIT_B
    words32 = []
    for i in range(n_words64 * 2):
        v = pool[i % pool_size]
        v ^= hb
        hb = (hb * MULT_B) & M32
        v = (v * hb) & M32
        v ^= v >> XS
        words32.append(v)
    return [words32[2 * i] | (words32[2 * i + 1] << 32) for i in range(n_words64)]


class NumpyPCG64Generator:
    """numpy.random.default_rng(seed).integers(0, n, size) for int64 output."""

    def __init__(self, seed=0):
        w = _seedseq_state(seed, 4)
        initstate = (w[0] << 64) | w[1]
        initseq = (w[2] << 64) | w[3]
        self.inc = ((initseq << 1) | 1) & M128
        self.state = 0
        self._step()
        self.state = (self.state + initstate) & M128
        self._step()
        self.has32 = False
        self.u32 = 0

    def _step(self):
        self.state = (self.state * PCG_MULT + self.inc) & M128

    def next64(self):
        self._step()
        s = self.state
        x = ((s >> 64) ^ s) & M64
        rot = s >> 122
        return ((x >> rot) | (x << ((64 - rot) & 63))) & M64

    def next32(self):
        if self.has32:
            self.has32 = False
            return self.u32
        v = self.next64()
        self.has32 = True
        self.u32 = v >> 32
        return v & M32

    def integers(self, n, count):
        """count draws of integers(0, n) (n <= 2**32), row-major order."""
        rng = n - 1
        if rng == 0:
            return [0] * count
        if rng > M32:
            raise ValueError("range above 32 bits not needed here")
        out = []
        excl = rng + 1
        thr = (M32 - rng) % excl
        nxt = self.next32
        for _ in range(count):
            m = nxt() * excl
            left = m & M32
            if left < excl:
                while left < thr:
                    m = nxt() * excl
                    left = m & M32
            out.append(m >> 32)
        return out


class StdlibGenerator:
    def __init__(self, seed=0):
        self.r = random.Random(seed)

    def integers(self, n, count):
        rb = self.r.randrange
        return [rb(n) for _ in range(count)]


# ----------------------------------------------------------------------------
# reading an arm
# ----------------------------------------------------------------------------

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
CPU_CATS = {"cpu_op", "user_annotation", "python_function", "Operator"}

RE_PLAIN = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
RE_DETAILED = re.compile(r"^execute_(\d+)_context_(\d+)\(.*\)_generation_(\d+)\(.*\)$")

# compile/JIT ranges (docs "Steady state and stalls")
COMPILE_EXCLUDE = ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "## Call CompiledFxGraph")
RE_COMPILE_EXCLUDE_KERNELS = re.compile(r"^triton_(poi|red|per|tem|unk)_fused")
COMPILE_TOKENS = (
    "dynamo",
    "entire_frame_compile",
    "backend_compile",
    "inductor_compile",
    "compile_fx",
    "async_compile.",
    "(dynamo_timed)",
    "autotun",
    "benchmark_all_configs",
    "triton.compile",
    "triton_compile",
    "compile_inner",
)

CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture")
CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture")


def is_compile_range(name):
    if name.startswith(COMPILE_EXCLUDE) or RE_COMPILE_EXCLUDE_KERNELS.match(name):
        return False
    return any(tok in name for tok in COMPILE_TOKENS)


def parse_step_annotation(name):
    """-> (n_context, m_generation, tokens) or None."""
    m = RE_PLAIN.match(name)
    if m:
        n, nt, g, gt = (int(x) for x in m.groups())
        return n, g, nt + gt
    m = RE_DETAILED.match(name)
    if m:
        t, n, g = (int(x) for x in m.groups())
        return n, g, t
    return None


def phase_of(n, m):
    if n > 0 and m == 0:
        return "prefill"
    if n == 0 and m > 0:
        return "decode"
    if n > 0 and m > 0:
        return "mixed"
    return None  # empty step (schedules nothing)


def union_length(intervals):
    tot = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def merge(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def overlap_with(merged, a, b):
    tot = 0.0
    for s, e in merged:
        if e <= a:
            continue
        if s >= b:
            break
        tot += min(e, b) - max(s, a)
    return tot


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def arm_trace_files(arm):
    if os.path.isfile(arm):
        return [arm]
    man = os.path.join(arm, "manifest.json")
    if os.path.isfile(man):
        with open(man) as f:
            m = json.load(f)
        tr = m.get("traces") or []
        files = [os.path.join(arm, t) for t in tr if os.path.exists(os.path.join(arm, t))]
        if files:
            return files
    files = sorted(glob.glob(os.path.join(arm, "traces", "*.json*")) + glob.glob(os.path.join(arm, "*.pt.trace.json*")))
    return [f for f in files if f.endswith((".json", ".json.gz"))]


def rank_steps(events, next_step="reported", period_kind="start-to-start"):
    """Steps of one rank from vLLM's execute_* annotations (docs "Steps", source 3)."""
    gpu = []  # (start, end, corr)
    calls = {}  # corr -> call ts
    ann = []
    compile_iv = []
    capture_iv = []
    cap_open = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in GPU_CATS:
            c = (e.get("args") or {}).get("correlation")
            ts = float(e["ts"])
            gpu.append((ts, ts + float(e.get("dur", 0)), c))
        elif cat in CALL_CATS:
            c = (e.get("args") or {}).get("correlation")
            ts = float(e["ts"])
            if c is not None:
                calls[c] = ts
            nm = e.get("name", "")
            if nm.startswith(CAPTURE_BEGIN):
                cap_open.setdefault(e.get("tid"), ts)
            elif nm.startswith(CAPTURE_END):
                st = cap_open.pop(e.get("tid"), None)
                if st is not None:
                    capture_iv.append((st, ts + float(e.get("dur", 0))))
        elif cat in CPU_CATS:
            nm = e.get("name", "")
            if cat == "user_annotation" and nm.startswith("execute_"):
                p = parse_step_annotation(nm)
                if p is not None:
                    ts = float(e["ts"])
                    ann.append((ts, ts + float(e.get("dur", 0)), nm, p))
                    continue
            if is_compile_range(nm):
                ts = float(e["ts"])
                compile_iv.append((ts, ts + float(e.get("dur", 0))))
    ann.sort()
    starts = [a[0] for a in ann]
    # assign each GPU activity to the step whose CPU window holds its launching call
    import bisect

    gpu_end_by_step = [None] * len(ann)
    launched = [0] * len(ann)
    for (gs, ge, c) in gpu:
        if c is None or c not in calls:
            continue
        t = calls[c]
        i = bisect.bisect_right(starts, t) - 1
        # the latest step starting at or before t whose CPU window holds t
        j = i
        while j >= 0 and j > i - 4 and not (ann[j][0] <= t <= ann[j][1]):
            j -= 1
        if j < 0 or j <= i - 4:
            continue
        i = j
        launched[i] += 1
        if gpu_end_by_step[i] is None or ge > gpu_end_by_step[i]:
            gpu_end_by_step[i] = ge
    all_steps = []
    for i, (s, e, nm, (n, m, tok)) in enumerate(ann):
        wend = e if gpu_end_by_step[i] is None else max(e, gpu_end_by_step[i])
        all_steps.append(
            {
                "name": nm,
                "start": s,
                "cpu_end": e,
                "window_end": wend,
                "launched": launched[i],
                "phase": phase_of(n, m),
                "tokens": tok,
            }
        )
    reported = [st for st in all_steps if st["launched"] > 0]
    seq = reported if next_step == "reported" else all_steps
    for idx, st in enumerate(seq):
        st["window"] = st["window_end"] - st["start"]
        if idx + 1 < len(seq):
            st["period"] = seq[idx + 1]["start"] - st["start"]
        else:
            st["period"] = st["window"]
    for st in all_steps:
        st.setdefault("window", st["window_end"] - st["start"])
    if period_kind == "covered":
        # sensitivity only (docs/report-schema.md's wording): the period less the
        # time in it that lies in no reported step's window
        wins = merge([(st["start"], st["window_end"]) for st in reported])
        for st in seq:
            a, b = st["start"], st["start"] + st["period"]
            st["period"] = overlap_with(wins, a, b)
    steps = [st for st in seq if st["launched"] > 0]
    for k, st in enumerate(steps):
        st["number"] = k + 1
    # stalls
    cmerged = merge(compile_iv)
    gmerged = merge(capture_iv)
    for st in steps:
        a, b = st["start"], st["start"] + st["period"]
        st["compile_us"] = overlap_with(cmerged, a, b)
        st["capture_us"] = overlap_with(gmerged, a, b)
        st["stall"] = None
    for st in steps:
        if st["compile_us"] >= 1000.0 and st["compile_us"] >= 0.05 * st["period"]:
            st["stall"] = "compile"
        elif st["capture_us"] >= 1000.0 and st["capture_us"] >= 0.05 * st["period"]:
            st["stall"] = "graph capture"
    for ph in PHASES:
        members = [st for st in steps if st["phase"] == ph]
        k = len(members)
        for st in members:
            others = [o["period"] for o in members if o is not st]
            out = False
            if len(others) >= 4:
                med = median(others)
                smad = mad_scaled(others)
                out = (st["period"] - med > 3.5 * smad) and (st["period"] > 2 * med)
            elif k == 3:
                out = st["period"] > 10 * median(others)
            if out and st["stall"] is None:
                st["stall"] = "outlier"
    # stall cost
    for ph in PHASES:
        members = [st for st in steps if st["phase"] == ph]
        steady = [st["period"] for st in members if st["stall"] is None]
        med = median(steady) if steady else None
        for st in members:
            st["extra_us"] = None if (st["stall"] is None or med is None) else st["period"] - med
    extras = {
        "annotations": len(ann),
        "not_reported_launched_nothing": len(ann) - len(steps) if next_step == "any" else len(all_steps) - len(reported),
        "compile_ranges": len(compile_iv),
        "capture_windows": len(capture_iv),
    }
    return steps, extras


def read_manifest(arm):
    man = os.path.join(arm, "manifest.json") if os.path.isdir(arm) else None
    if man and os.path.isfile(man):
        with open(man) as f:
            return json.load(f)
    return {}


def load_arm(arm, next_step="reported", period_kind="start-to-start"):
    files = arm_trace_files(arm)
    if not files:
        raise SystemExit(f"{arm}: no trace")
    ranks = []
    for f in files:
        ev = load_trace(f)
        steps, extras = rank_steps(ev, next_step=next_step, period_kind=period_kind)
        del ev
        ranks.append({"file": os.path.relpath(f, arm) if os.path.isdir(arm) else f, "steps": steps, "extras": extras})
    return {"path": arm, "ranks": ranks, "manifest": read_manifest(arm)}


# ----------------------------------------------------------------------------
# figures (one function per figure)
# ----------------------------------------------------------------------------


def phase_steps(rank, phase):
    if phase == "all":
        return list(rank["steps"])
    return [st for st in rank["steps"] if st["phase"] == phase]


def steady_sample(arm, phase):
    """The arm's sample: steady steps' periods; ranks' k-th steady periods averaged.

    Returns list of dicts {period, window, tokens}.

    (Updated with docs/analysis.md "compare": the sample is start-to-start periods, so each rank's
    last step, which has no next start, is not in it where the rank has other steps.)"""

    def with_next(r):
        last = max(r["steps"], key=lambda st: st["start"]) if len(r["steps"]) > 1 else None
        return [st for st in phase_steps(r, phase) if st is not last]

    per_rank = [[st for st in with_next(r) if st["stall"] is None] for r in arm["ranks"]]
    if len(per_rank) == 1:
        return [{"period": s["period"], "window": s["window"], "tokens": s["tokens"]} for s in per_rank[0]]
    k = min(len(x) for x in per_rank)
    out = []
    for i in range(k):
        out.append(
            {
                "period": sum(x[i]["period"] for x in per_rank) / len(per_rank),
                "window": sum(x[i]["window"] for x in per_rank) / len(per_rank),
                "tokens": per_rank[0][i]["tokens"],
            }
        )
    return out


def stall_count(arm, phase):
    """Stalled steps of the phase (first rank's, as the table's '+N stalled')."""
    return sum(1 for st in phase_steps(arm["ranks"][0], phase) if st["stall"] is not None)


def step_count(arm, phase):
    return len(phase_steps(arm["ranks"][0], phase))


def median_period(sample):
    return median([s["period"] for s in sample])


def median_window(sample):
    return median([s["window"] for s in sample])


def p90_and_max(sample):
    v = [s["period"] for s in sample]
    if not v:
        return None, None
    return percentile_linear(v, 90), max(v)


def shape_bucket(tokens):
    """A quarter of a doubling: round(4 log2 tokens) (16,379 and 16,384 share one)."""
    if tokens is None or tokens <= 0:
        return None
    return int(math.floor(4.0 * math.log2(tokens) + 0.5))


def pair_by_shape(sa, sb):
    """-> (compared_a, compared_b, paired_by_shape)."""
    if not sa or not sb or any(s["tokens"] is None for s in sa + sb):
        return sa, sb, False
    ba = {shape_bucket(s["tokens"]) for s in sa}
    bb = {shape_bucket(s["tokens"]) for s in sb}
    common = ba & bb
    ca = [s for s in sa if shape_bucket(s["tokens"]) in common]
    cb = [s for s in sb if shape_bucket(s["tokens"]) in common]
    if len(ca) >= MIN_STEPS and len(cb) >= MIN_STEPS:
        return ca, cb, True
    return sa, sb, False


def per_token_needed(ca, cb):
    if not ca or not cb or any(s["tokens"] is None for s in ca + cb):
        return False, None, None
    ma = median([s["tokens"] for s in ca])
    mb = median([s["tokens"] for s in cb])
    if not ma:
        return False, ma, mb
    return abs(mb / ma - 1.0) > 0.10, ma, mb


def compared_values(ca, cb, per_token):
    if per_token:
        return [s["period"] / s["tokens"] for s in ca], [s["period"] / s["tokens"] for s in cb]
    return [s["period"] for s in ca], [s["period"] for s in cb]


def change_of_medians(xa, xb):
    ma, mb = median(xa), median(xb)
    if ma is None or mb is None or ma == 0:
        return None
    return mb / ma - 1.0


def bootstrap(xa, xb, rng_kind="numpy", seed=0):
    """95% bootstrap interval of median(b)/median(a) - 1 (docs: 2,000 resamples,
    default_rng(0), first arm's indices drawn before this arm's; linear 2.5/97.5
    percentiles).  Also the same resamples' intervals of each arm's median."""
    n, m = len(xa), len(xb)
    if n == 0 or m == 0:
        return None
    g = NumpyPCG64Generator(seed) if rng_kind == "numpy" else StdlibGenerator(seed)
    ia = g.integers(n, N_BOOT * n)
    ib = g.integers(m, N_BOOT * m)
    meds_a, meds_b, changes = [], [], []
    for r in range(N_BOOT):
        a = median([xa[j] for j in ia[r * n:(r + 1) * n]])
        b = median([xb[j] for j in ib[r * m:(r + 1) * m]])
        meds_a.append(a)
        meds_b.append(b)
        changes.append(b / a - 1.0)
    return {
        "change_low": percentile_linear(changes, 2.5),
        "change_high": percentile_linear(changes, 97.5),
        "median_a_low": percentile_linear(meds_a, 2.5),
        "median_a_high": percentile_linear(meds_a, 97.5),
        "median_b_low": percentile_linear(meds_b, 2.5),
        "median_b_high": percentile_linear(meds_b, 97.5),
    }


def slower_pairs(xa, xb):
    """Share of the n x m pairs in which arm b was slower (ties half), and the
    count in which arm a was slower (ties half)."""
    n, m = len(xa), len(xb)
    if n == 0 or m == 0:
        return None
    b_slower = 0.0
    ties = 0
    for x in xa:
        for y in xb:
            if y > x:
                b_slower += 1
            elif y == x:
                b_slower += 0.5
                ties += 1
    a_slower = n * m - b_slower
    return {"pairs": n * m, "b_slower": b_slower, "a_slower": a_slower, "ties": ties, "b_slower_share": b_slower / (n * m)}


def call_of(n, m, lo, hi):
    if n < MIN_STEPS or m < MIN_STEPS:
        return "too few steps"
    if lo is None or hi is None:
        return None
    return "beyond noise" if (lo > 0 or hi < 0) else "within noise"


# ---- unprofiled timing (docs "Unprofiled timing") ----------------------------


def _betacf(a, b, x):
    MAXIT, EPS, FPMIN = 300, 3e-16, 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    if abs(d) < FPMIN:
        d = FPMIN
    d = 1.0 / d
    h = d
    for mm in range(1, MAXIT + 1):
        m2 = 2 * mm
        aa = mm * (b - mm) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = FPMIN if abs(d) < FPMIN else d
        c = 1.0 + aa / c
        c = FPMIN if abs(c) < FPMIN else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + mm) * (qab + mm) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = FPMIN if abs(d) < FPMIN else d
        c = 1.0 + aa / c
        c = FPMIN if abs(c) < FPMIN else c
        d = 1.0 / d
        de = d * c
        h *= de
        if abs(de - 1.0) < EPS:
            break
    return h


def _betai(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    bt = math.exp(lbt)
    if x < (a + 1) / (a + b + 2):
        return bt * _betacf(a, b, x) / a
    return 1.0 - bt * _betacf(b, a, 1 - x) / b


def t_cdf(t, df):
    x = df / (df + t * t)
    p = 0.5 * _betai(df / 2.0, 0.5, x)
    return 1 - p if t > 0 else p


def t_ppf(q, df):
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def unprofiled(arm, first_arm, profiled_step_median_ms):
    """The 'unprofiled' table row of an arm, or None where its manifest has no repeats."""
    reps = [r for r in (arm["manifest"].get("repeats") or []) if (r.get("completed") or 0) >= 1]
    if not reps:
        return None

    def stats(rs):
        d = [float(r["duration_s"]) for r in rs]
        n = len(d)
        mean = sum(d) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else None
        return d, n, mean, sd

    d, n, mean, sd = stats(reps)

    def mean_of(key):
        v = [r.get(key) for r in reps if r.get(key) is not None]
        return sum(v) / len(v) if v else None

    tpot = mean_of("median_tpot_ms")
    row = {
        "n": n,
        "duration_mean_s": r3(mean),
        "duration_sd_s": r3(sd),
        "output_tok_s": r3(mean_of("output_throughput")),
        "tpot_median_ms": r3(tpot),
        "itl_median_ms": r3(mean_of("median_itl_ms")),
        "profiled_step_median_ms": r3(profiled_step_median_ms),
        "profiler_overhead_pct": r3(pct(profiled_step_median_ms / tpot - 1)) if (profiled_step_median_ms and tpot) else None,
        "vs_first_pct": None,
        "vs_first_2se_pct": None,
        "vs_first_call": None,
        "vs_first_welch95_pct": None,
    }
    if first_arm is not None and first_arm is not arm:
        freps = [r for r in (first_arm["manifest"].get("repeats") or []) if (r.get("completed") or 0) >= 1]
        if freps:
            _, n0, mean0, sd0 = stats(freps)
            row["vs_first_pct"] = r3(pct(mean / mean0 - 1))
            if n0 > 1 and n > 1:
                se = math.sqrt(sd0 ** 2 / n0 + sd ** 2 / n)
                half = 2 * se / mean0
                row["vs_first_2se_pct"] = r3(pct(half))
                row["vs_first_call"] = "noise" if abs(mean / mean0 - 1) <= half else "beyond noise"
                v0, v1 = sd0 ** 2 / n0, sd ** 2 / n
                df = (v0 + v1) ** 2 / (v0 ** 2 / (n0 - 1) + v1 ** 2 / (n - 1)) if (v0 + v1) > 0 else None
                if df:
                    row["vs_first_welch95_pct"] = r3(pct(t_ppf(0.975, df) * se / mean0))
                    row["welch_df"] = r3(df)
    return row


# ----------------------------------------------------------------------------
# assembly
# ----------------------------------------------------------------------------


def r3(x):
    return None if x is None else round(x, 3)


def ms(us):
    return None if us is None else round(us / 1000.0, 3)


def pct(f):
    return None if f is None else 100.0 * f


def median_interval(values, rng_kind="numpy", seed=0):
    """95% bootstrap interval of one arm's median: the same draw as the first
    arm's in compare (default_rng(0).integers(0, n, (2000, n))), linear 2.5/97.5."""
    n = len(values)
    if n == 0:
        return None
    g = NumpyPCG64Generator(seed) if rng_kind == "numpy" else StdlibGenerator(seed)
    idx = g.integers(n, N_BOOT * n)
    meds = [median([values[j] for j in idx[r * n:(r + 1) * n]]) for r in range(N_BOOT)]
    return percentile_linear(meds, 2.5), percentile_linear(meds, 97.5)


def arm_phase_row(arm, phase, rng_kind="numpy"):
    sample = steady_sample(arm, phase)
    mi = median_interval([s["period"] for s in sample], rng_kind)
    p90, mx = p90_and_max(sample)
    mp, mw = median_period(sample), median_window(sample)
    all_periods = [st["period"] for st in phase_steps(arm["ranks"][0], phase)]
    return {
        "steps_steady": len(sample),
        "stalled": stall_count(arm, phase),
        "steps_total": step_count(arm, phase),
        "median_period_ms": ms(mp),
        "median_period_interval_ms": None if mi is None else [ms(mi[0]), ms(mi[1])],
        "p90_period_ms": ms(p90),
        "max_period_ms": ms(mx),
        "median_window_ms": ms(mw),
        "window_differs_5pct": (None if (mp is None or mw is None) else abs(mw / mp - 1) > 0.05),
        "median_tokens": median([s["tokens"] for s in sample]) if sample else None,
        "median_period_all_steps_ms": ms(median(all_periods)) if all_periods else None,
        "stall_list": [
            {"number": st["number"], "phase": st["phase"], "cause": st["stall"], "period_ms": ms(st["period"]),
             "extra_ms": ms(st["extra_us"]), "compile_ms": ms(st["compile_us"])}
            for st in phase_steps(arm["ranks"][0], phase) if st["stall"] is not None
        ],
    }


def compare_phase(first, other, phase, rng_kind):
    sa, sb = steady_sample(first, phase), steady_sample(other, phase)
    ca, cb, paired = pair_by_shape(sa, sb)
    per_tok, ta, tb = per_token_needed(ca, cb)
    xa, xb = compared_values(ca, cb, per_tok)
    n, m = len(xa), len(xb)
    res = {
        "compared_steps": [n, m],
        "paired_by_shape": paired,
        "per_token": per_tok,
        "compared_median_tokens": [ta, tb],
        "compared_medians": [None, None],
        "compared_medians_unit": "us/token" if per_tok else "ms",
        "change_pct": None,
        "change_low_pct": None,
        "change_high_pct": None,
        "call": None,
        "min_steps_rule": {"min": MIN_STEPS, "met": n >= MIN_STEPS and m >= MIN_STEPS},
        "slower_pairs": None,
        "median_interval_first": None,
        "median_interval_this": None,
    }
    conv = (lambda v: r3(v)) if per_tok else ms
    res["compared_medians"] = [conv(median(xa)), conv(median(xb))]
    if n == 0 or m == 0:
        res["call"] = "too few steps"
        return res
    sp = slower_pairs(xa, xb)
    res["slower_pairs"] = {
        "pairs": sp["pairs"],
        "first_slower": r3(sp["a_slower"]),
        "this_slower": r3(sp["b_slower"]),
        "ties": sp["ties"],
        "this_slower_share_pct": r3(pct(sp["b_slower_share"])),
    }
    bs = bootstrap(xa, xb, rng_kind)
    res["median_interval_first"] = [conv(bs["median_a_low"]), conv(bs["median_a_high"])]
    res["median_interval_this"] = [conv(bs["median_b_low"]), conv(bs["median_b_high"])]
    call = call_of(n, m, bs["change_low"], bs["change_high"])
    res["call"] = call
    if call != "too few steps":
        res["change_pct"] = r3(pct(change_of_medians(xa, xb)))
        res["change_low_pct"] = r3(pct(bs["change_low"]))
        res["change_high_pct"] = r3(pct(bs["change_high"]))
    else:
        # the table shows no change; kept aside for the notes only
        res["change_if_claimed_pct"] = r3(pct(change_of_medians(xa, xb)))
        res["interval_if_claimed_pct"] = [r3(pct(bs["change_low"])), r3(pct(bs["change_high"]))]
    return res


def arm_phases(arm):
    ph = set()
    for st in arm["ranks"][0]["steps"]:
        if st["phase"]:
            ph.add(st["phase"])
    return ph


def main(argv):
    rng_kind = "numpy"
    next_step = "reported"
    period_kind = "start-to-start"
    arms_paths = []
    it = iter(argv)
    for a in it:
        if a == "--rng":
            rng_kind = next(it)
        elif a == "--next-step":
            next_step = next(it)
        elif a == "--period":
            period_kind = next(it)
        else:
            arms_paths.append(a)
    if len(arms_paths) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    arms = [load_arm(p, next_step=next_step, period_kind=period_kind) for p in arms_paths]
    # phases rows: where the annotations give phases in every arm
    phases = ["all"]
    if all(arm_phases(a) for a in arms):
        union = set().union(*(arm_phases(a) for a in arms))
        phases += [p for p in PHASES if p in union]
    out = {
        "method": {"rng": "numpy default_rng(0) emulated (PCG64)" if rng_kind == "numpy" else "random.Random(0)",
                   "next_step": next_step, "period": period_kind, "resamples": N_BOOT, "min_steps": MIN_STEPS},
        "arms": [],
        "comparisons": [],
        "unprofiled": [],
    }
    for a in arms:
        r = a["ranks"][0]
        out["arms"].append({
            "path": a["path"],
            "ranks": len(a["ranks"]),
            "steps_source": "vLLM execute_* annotations",
            "annotations": r["extras"]["annotations"],
            "steps_reported": len(r["steps"]),
            "phases": {ph: arm_phase_row(a, ph, rng_kind) for ph in phases},
        })
    for a in arms[1:]:
        comp = {"first": arms[0]["path"], "this": a["path"], "phases": {}}
        for ph in phases:
            comp["phases"][ph] = compare_phase(arms[0], a, ph, rng_kind)
        out["comparisons"].append(comp)
    for a in arms:
        # profiled step median: compare's step table, its decode steps where it has them
        ph = "decode" if any(st["phase"] == "decode" for st in a["ranks"][0]["steps"]) else "all"
        med = median_period(steady_sample(a, ph))
        out["unprofiled"].append({"path": a["path"], "row": unprofiled(a, arms[0], None if med is None else med / 1000.0)})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
