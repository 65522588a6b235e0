"""The AFD load sweep's figures from the raw files: an independent reference.

Written by a checker who did not read dbo_trace/ (nor its tests other than tests/independent/, nor
its history), from docs/analysis.md ("Load sweep", "Unprofiled timing"), docs/bundle-format.md and
the raw files of a sweep folder. Plain Python (gzip, json, statistics, math); the parts per step
come from `dbo_effect_truth.py` (the sibling independent reference), imported. Run it as

    python tests/references/sweep_truth.py samples/afd-sweep

(prints the tables), or import `sweep_truth(folder)` (a dict, below).

Inputs: `sweep.json` (its `arms`, `loads` and `runs`; a run counts where its status is `complete`)
and each run's bundle `ARM/LOAD/`: `manifest.json` (`repeats`: the timed, unprofiled load repeats),
`traces/*.pt.trace.json.gz` (the attention server), `peer/traces/*.pt.trace.json.gz` (the FFN's).

Definitions:

1. **Repeats** (per arm and load): a repeat counts where it completed at least one request and has
   a duration. TPOT: the mean and the sample sd (ddof 1) of the repeats' `median_tpot_ms`; ITL: the
   mean of their `median_itl_ms`; output tok/s: the mean and sd of `output_throughput`; duration:
   the mean of `duration_s`.
2. **DBO's change by TPOT** (per load; DBO on = an arm whose manifest's `settings.dbo` holds
   `enable-dbo`, off = the other): change = mean(on) / mean(off) - 1. Its 95% interval: Welch's t
   interval of the difference of the two means, divided by the off mean:
   (m_on - m_off +- t(0.975, df) * se) / m_off, se = sqrt(s_on^2/n_on + s_off^2/n_off), df by
   Welch-Satterthwaite: se^4 / ((s_on^2/n_on)^2/(n_on-1) + (s_off^2/n_off)^2/(n_off-1)). t is
   scipy's where scipy is installed, else computed here exactly (Student's t CDF through the
   regularized incomplete beta function, a continued fraction, solved by bisection), which holds
   for fractional df; `t_table_interp` beside it is the small table of integer df interpolated
   linearly in 1/df (how docs/analysis.md says the tool reads its table), to show the difference.
   "excludes 0": both bounds on one side.
3. **Steps** (per arm and load, the attention trace): the `user_annotation` events named
   `execute_*` (dbo_effect_truth.steps_of), the median of the consecutive start-to-start gaps
   ("period"); DBO's change = median(on) / median(off) - 1 (and in ms). Beside it (not asked): a
   percentile bootstrap 95% interval of the difference of the two medians (2000 resamples of each
   arm's gaps with Python's random.Random(0)), divided by the off median; a crude check of whether
   the profiled change is beyond noise, not the tool's seeded bootstrap.
4. **Parts per step** (per load): dbo_effect_truth.effect(off_bundle, on_bundle): compute, comm
   alone, copy, idle (host-caused / dependency) per step over S = [first step's start, last step's
   start) / N periods, on the attention trace and, over the same S and N, the FFN's trace; off, on
   and on - off (its docstring defines each part). Beside it the `steady` variant (first period
   left out of both arms). Beside it, `host_idle_doc_ms` / `dependency_idle_doc_ms`: the same idle
   split by docs/analysis.md's accounting rule ("host_idle": an idle stretch whose ending work was
   launched after the stretch began is the host's up to 20 us after that launch call *ended*; the
   rest, and every stretch whose work was launched before it began, is dependency idle; a stretch
   that nothing follows, the tail, is the host's), counted
   here from the trace: of the activities starting where the stretch ends, the launch call that
   ended first; host where that call started after the stretch began; host part = [stretch start,
   min(call end + 20 us, stretch end)], clipped to S, / N. dbo_effect_truth's reading (host only
   up to the call's start) is the definition above; docs/analysis.md says the two differ by
   0.1-0.2 ms a step.
3b. **The event log's steps** (beside 3, not asked): where a bundle's `events/*.jsonl` holds
   `step_begin` records (the DBO hooks' graph replays: `[time_ns, "step_begin", ...]`, clock
   time.time_ns, the trace's clock being `baseTimeNanoseconds` + ts * 1000) inside the trace's
   first-to-last event, their count and median start-to-start period.
5. **Where DBO turns**: the loads in order of requests in flight (the concurrency, capped by the
   prompts sent and the servers' `--max-num-seqs`); each load's side by TPOT (the sign of the
   change, and whether its interval excludes 0) and by the profiled median period (the sign of
   its change); a sign change between two consecutive loads (by each measure) is stated between
   those two loads.
"""

from __future__ import annotations

import glob
import json
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dbo_effect_truth as effect_truth  # noqa: E402  (the sibling independent reference)

# Student's t, 0.975 quantile, integer df (standard tables; the fallback's cross-check).
T975_TABLE = {1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445, 5: 2.570582, 6: 2.446912,
              7: 2.364624, 8: 2.306004, 9: 2.262157, 10: 2.228139, 12: 2.178813, 15: 2.131450,
              20: 2.085963, 30: 2.042272, 60: 2.000298, 120: 1.979930}
Z975 = 1.959964


# --- Student's t without scipy -------------------------------------------------------------------

def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
          + a * math.log(x) + b * math.log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    p = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - p if t >= 0 else p


def t_ppf_975(df):
    """t(0.975, df) for any df > 0: scipy's where installed, else bisection on t_cdf."""
    try:
        from scipy import stats  # type: ignore[import-not-found]
        return float(stats.t.ppf(0.975, df)), "scipy"
    except ImportError:
        pass
    lo, hi = 0.0, 200.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < 0.975:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2, "incomplete beta"


def t_table_interp(df):
    """The small table, linear in 1/df between its rows (the normal's 1.96 at df = infinity)."""
    rows = sorted(T975_TABLE.items())
    if df <= rows[0][0]:
        return rows[0][1]
    pts = [(1.0 / k, v) for k, v in rows] + [(0.0, Z975)]
    x = 1.0 / df
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x1 <= x <= x0:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return Z975


# --- the sweep ----------------------------------------------------------------------------------

def _read_json(path):
    with open(path) as fh:
        return json.load(fh)


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def repeat_stats(manifest):
    reps = [r for r in (manifest.get("repeats") or [])
            if isinstance(r, dict) and (_num(r.get("completed")) or 0) >= 1
            and _num(r.get("duration_s")) is not None]

    def col(k):
        return [r[k] for r in reps if _num(r.get(k)) is not None]

    tpot, itl, tput, dur = (col("median_tpot_ms"), col("median_itl_ms"),
                            col("output_throughput"), col("duration_s"))
    sd = statistics.stdev
    return {
        "n": len(tpot), "tpot_ms": tpot,
        "tpot_mean_ms": statistics.fmean(tpot) if tpot else None,
        "tpot_sd_ms": sd(tpot) if len(tpot) > 1 else None,
        "itl_mean_ms": statistics.fmean(itl) if itl else None,
        "tput_mean": statistics.fmean(tput) if tput else None,
        "tput_sd": sd(tput) if len(tput) > 1 else None,
        "duration_mean_s": statistics.fmean(dur) if dur else None,
    }


def welch(off, on):
    """DBO's change by TPOT and its Welch t 95% interval (as fractions of the off mean)."""
    m0, m1, s0, s1, n0, n1 = (off["tpot_mean_ms"], on["tpot_mean_ms"], off["tpot_sd_ms"],
                              on["tpot_sd_ms"], off["n"], on["n"])
    out = {"change": m1 / m0 - 1, "diff_ms": m1 - m0, "low": None, "high": None, "df": None,
           "t": None, "t_from": None, "t_table_interp": None, "excludes_0": None,
           "low_table": None, "high_table": None}
    if s0 is None or s1 is None:
        return out
    v0, v1 = s0 * s0 / n0, s1 * s1 / n1
    se = math.sqrt(v0 + v1)
    df = (v0 + v1) ** 2 / (v0 * v0 / (n0 - 1) + v1 * v1 / (n1 - 1))
    t, src = t_ppf_975(df)
    tt = t_table_interp(df)
    out.update(df=df, t=t, t_from=src, t_table_interp=tt,
               low=(m1 - m0 - t * se) / m0, high=(m1 - m0 + t * se) / m0,
               low_table=(m1 - m0 - tt * se) / m0, high_table=(m1 - m0 + tt * se) / m0)
    out["excludes_0"] = out["low"] > 0 or out["high"] < 0
    return out


def steps(bundle):
    attn, _ = effect_truth.role_traces(bundle)
    st = effect_truth.steps_of(effect_truth.load(attn)["traceEvents"])
    gaps = [(st[i + 1][0] - st[i][0]) / 1e3 for i in range(len(st) - 1)]
    return {"steps": len(st), "gaps_ms": gaps, "period_median_ms": statistics.median(gaps)}


def doc_idle_split(bundle, role="attention"):
    """The idle split by docs/analysis.md's rule (launch call end + 20 us), ms per step over S."""
    attn_p, ffn_p = effect_truth.role_traces(bundle)
    st = effect_truth.steps_of(effect_truth.load(attn_p)["traceEvents"])
    lo, hi, n = st[0][0], st[-1][0], len(st) - 1
    ev = effect_truth.load(attn_p if role == "attention" else ffn_p)["traceEvents"]
    comp, comm, mc, ms = effect_truth._gpu(ev)
    work = comp + comm + mc + ms
    busy = effect_truth.union([(e["ts"], e["ts"] + e["dur"]) for e in work])
    calls = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                calls.setdefault(c, e)
    starting = {}
    for e in work:
        starting.setdefault(e["ts"], []).append(e)
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    if busy and busy[0][0] > lo:
        gaps.insert(0, (lo, busy[0][0]))
    tail = None
    if busy and busy[-1][1] < hi:
        tail = (busy[-1][1], hi)  # nothing follows it inside the trace
        gaps.append(tail)
    host = idle = 0.0
    for g0, g1 in gaps:
        a, b = max(g0, lo), min(g1, hi)
        if b <= a:
            continue
        idle += b - a
        cs = [calls.get((e.get("args") or {}).get("correlation")) for e in starting.get(g1, [])]
        cs = [c for c in cs if c is not None]
        if (g0, g1) == tail:
            host += b - a
            continue
        if not cs:
            continue  # its launch is not in the trace: dependency idle
        first_end = min(cs, key=lambda c: c["ts"] + c["dur"])
        if first_end["ts"] > g0:
            host += max(0.0, min(first_end["ts"] + first_end["dur"] + 20.0, b) - a)
    return {"host_idle_doc_ms": host / n / 1e3, "dependency_idle_doc_ms": (idle - host) / n / 1e3}


def event_log_steps(bundle):
    """step_begin records of the bundle's event logs inside the attention trace (docstring, 3b)."""
    attn_p, _ = effect_truth.role_traces(bundle)
    tr = effect_truth.load(attn_p)
    base = tr.get("baseTimeNanoseconds")
    xs = [e for e in tr["traceEvents"] if e.get("ph") == "X" and _num(e.get("ts")) is not None]
    if base is None or not xs:
        return None
    w0 = base + min(e["ts"] for e in xs) * 1e3
    w1 = base + max(e["ts"] + e.get("dur", 0) for e in xs) * 1e3
    starts = []
    for path in sorted(glob.glob(os.path.join(bundle, "events", "*.jsonl"))):
        with open(path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, list) and len(rec) > 1 and rec[1] == "step_begin" \
                        and _num(rec[0]) is not None and w0 <= rec[0] <= w1:
                    starts.append(rec[0])
    starts.sort()
    if len(starts) < 2:
        return None
    gaps = [(b - a) / 1e6 for a, b in zip(starts, starts[1:])]
    return {"steps": len(starts), "period_median_ms": statistics.median(gaps)}


def boot_median_diff(off_gaps, on_gaps, resamples=2000, seed=0):
    rng = random.Random(seed)
    m0 = statistics.median(off_gaps)
    ds = []
    for _ in range(resamples):
        a = [rng.choice(off_gaps) for _ in off_gaps]
        b = [rng.choice(on_gaps) for _ in on_gaps]
        ds.append(statistics.median(b) - statistics.median(a))
    ds.sort()
    return ds[int(0.025 * resamples)] / m0, ds[int(0.975 * resamples) - 1] / m0


def _side(x):
    return "slower" if x > 0 else "faster" if x < 0 else "zero"


def _is_dbo(manifest):
    dbo = ((manifest.get("settings") or {}).get("dbo") or {})
    return "enable-dbo" in dbo or "--enable-dbo" in " ".join(manifest.get("command") or [])


def sweep_truth(folder):
    sw = _read_json(os.path.join(folder, "sweep.json"))
    arms = [a["name"] for a in sw["arms"]]
    loads = list(sw["loads"])
    runs = {(r["arm"], r["load"]): r for r in sw["runs"] if r.get("status") == "complete"}
    arm_rows, manifests = {}, {}
    for (arm, load), r in runs.items():
        b = os.path.join(folder, r["bundle"])
        m = _read_json(os.path.join(b, "manifest.json"))
        manifests[(arm, load)] = m
        row = repeat_stats(m)
        row.update(steps(b))
        row["bundle"] = b
        arm_rows[(arm, load)] = row
    dbo_arms = {a for a in arms
                if any(_is_dbo(m) for (x, _), m in manifests.items() if x == a)}
    on_arm = next(a for a in arms if a in dbo_arms)
    off_arm = next(a for a in arms if a not in dbo_arms)

    def in_flight(ld):
        caps = [ld["concurrency"], ld.get("num_prompts") or ld["concurrency"]]
        seqs = {(m.get("settings") or {}).get("batching", {}).get("max-num-seqs")
                for (_, x), m in manifests.items() if x == ld["name"]}
        if len(seqs) == 1 and None not in seqs:
            caps.append(int(next(iter(seqs))))
        return min(caps)

    loads.sort(key=in_flight)
    per_load = []
    for ld in loads:
        name = ld["name"]
        off, on = arm_rows.get((off_arm, name)), arm_rows.get((on_arm, name))
        if off is None or on is None:
            continue
        w = welch(off, on)
        p0, p1 = off["period_median_ms"], on["period_median_ms"]
        blo, bhi = boot_median_diff(off["gaps_ms"], on["gaps_ms"])
        eff = effect_truth.effect(off["bundle"], on["bundle"])
        doc = {side: doc_idle_split(r["bundle"]) for side, r in (("off", off), ("on", on))}
        if eff["ffn"]:
            doc.update({"ffn_" + side: doc_idle_split(r["bundle"], "ffn")
                        for side, r in (("off", off), ("on", on))})
        per_load.append({
            "load": name, "in_flight": in_flight(ld), "tpot": w,
            "period_off_ms": p0, "period_on_ms": p1, "period_change_ms": p1 - p0,
            "period_change": p1 / p0 - 1, "period_boot_low": blo, "period_boot_high": bhi,
            "effect": eff, "doc_idle": doc,
            "event_log_steps": {"off": event_log_steps(off["bundle"]),
                                "on": event_log_steps(on["bundle"])},
        })
    turns = {}
    for key, get in (("tpot", lambda p: p["tpot"]["change"]),
                     ("period", lambda p: p["period_change"])):
        turns[key] = [{"before": a["load"], "after": b["load"], "from_side": _side(get(a)),
                       "to_side": _side(get(b))}
                      for a, b in zip(per_load, per_load[1:]) if _side(get(a)) != _side(get(b))]
    return {"arms": arms, "off": off_arm, "on": on_arm,
            "loads": [ld["name"] for ld in loads], "rows": arm_rows, "per_load": per_load,
            "turns": turns}


# --- printing ------------------------------------------------------------------------------------

def _pct(x):
    return f"{x * 100:+.1f}%" if x is not None else "-"


def print_tables(d):
    print("1. Timed repeats (profiler off), per arm and load")
    print(f"{'arm':<11}{'load':<5}{'n':>2}{'TPOT mean':>10}{'sd':>7}{'ITL mean':>9}"
          f"{'tok/s':>8}{'sd':>7}{'dur s':>7}")
    for ld in d["loads"]:
        for arm in d["arms"]:
            r = d["rows"].get((arm, ld))
            if r is None:
                continue
            print(f"{arm:<11}{ld:<5}{r['n']:>2}{r['tpot_mean_ms']:>10.3f}{r['tpot_sd_ms']:>7.3f}"
                  f"{r['itl_mean_ms']:>9.3f}{r['tput_mean']:>8.1f}{r['tput_sd']:>7.1f}"
                  f"{r['duration_mean_s']:>7.3f}")
    print()
    print(f"2. DBO's change by TPOT ({d['on']} / {d['off']} - 1), Welch t 95%")
    print(f"{'load':<5}{'in fl':>6}{'change':>8}{'low':>8}{'high':>8}{'df':>6}{'t':>7}"
          f"{'t tbl':>7}{'excl 0':>7}")
    for p in d["per_load"]:
        w = p["tpot"]
        print(f"{p['load']:<5}{p['in_flight']:>6}{_pct(w['change']):>8}{_pct(w['low']):>8}"
              f"{_pct(w['high']):>8}{w['df']:>6.2f}{w['t']:>7.3f}{w['t_table_interp']:>7.3f}"
              f"{'yes' if w['excludes_0'] else 'no':>7}")
    tf = d["per_load"][0]["tpot"]["t_from"] if d["per_load"] else "-"
    print(f"   (t from {tf}; 't tbl': the integer-df table interpolated in 1/df)")
    print()
    print("3. Profiled steps (attention trace, execute_*), median start-to-start period")
    print(f"{'load':<5}{'steps off/on':>13}{'off ms':>8}{'on ms':>8}{'chg ms':>8}{'change':>8}"
          f"{'boot 95%':>17}")
    for p in d["per_load"]:
        r0, r1 = d["rows"][(d["off"], p["load"])], d["rows"][(d["on"], p["load"])]
        print(f"{p['load']:<5}{r0['steps']:>7}/{r1['steps']:<5}{p['period_off_ms']:>8.3f}"
              f"{p['period_on_ms']:>8.3f}{p['period_change_ms']:>+8.3f}"
              f"{_pct(p['period_change']):>8}"
              f"{'[' + _pct(p['period_boot_low']) + ', ' + _pct(p['period_boot_high']) + ']':>17}")
    for p in d["per_load"]:
        for side, arm in (("off", d["off"]), ("on", d["on"])):
            x = p["event_log_steps"][side]
            if x:
                print(f"   {p['load']} {arm}: the event log's step_begin: {x['steps']} steps, "
                      f"median period {x['period_median_ms']:.3f} ms")
    print()
    print("4. Parts per step, ms (dbo_effect_truth.effect: S from the first step;")
    print("   '(doc)': the idle split by docs/analysis.md's rule, launch call end + 20 us)")
    keys = [("compute", "compute_ms"), ("comm alone", "comm_alone_ms"), ("copy", "copy_ms"),
            ("idle", "idle_ms"), (" host-caused", "host_idle_ms"),
            (" dependency", "dependency_idle_ms")]
    for p in d["per_load"]:
        e = p["effect"]
        print(f"{p['load']}: {'off':>8}{'on':>8}{'on-off':>8}{'steady':>8}"
              f"{'FFN off':>9}{'FFN on':>8}{'FFN chg':>9}")
        for label, k in keys:
            fo = e["off"]["ffn"][k] if e["off"]["ffn"] else None
            fn = e["on"]["ffn"][k] if e["on"]["ffn"] else None
            fc = e["ffn"][k] if e["ffn"] else None
            f = (f"{fo:>9.3f}{fn:>8.3f}{fc:>+9.3f}" if fc is not None else "")
            print(f"  {label:<12}{e['off'][k]:>8.3f}{e['on'][k]:>8.3f}{e[k]:>+8.3f}"
                  f"{e['steady'][k]:>+8.3f}{f}")
        for label, k in ((" host (doc)", "host_idle_doc_ms"),
                         (" dep. (doc)", "dependency_idle_doc_ms")):
            dd = p["doc_idle"]
            f = ""
            if "ffn_off" in dd:
                fo, fn = dd["ffn_off"][k], dd["ffn_on"][k]
                f = f"{fo:>9.3f}{fn:>8.3f}{fn - fo:>+9.3f}"
            print(f"  {label:<12}{dd['off'][k]:>8.3f}{dd['on'][k]:>8.3f}"
                  f"{dd['on'][k] - dd['off'][k]:>+8.3f}{'':>8}{f}")
        print(f"  sum of part changes {e['sum_of_parts_ms']:+.3f} = mean period change "
              f"{e['period_mean_change_ms']:+.3f}; median {e['period_median_change_ms']:+.3f}")
    print()
    print("5. Where DBO turns (loads in order of requests in flight)")
    for p in d["per_load"]:
        w = p["tpot"]
        noise = "beyond noise" if w["excludes_0"] else "interval holds 0"
        print(f"  {p['load']} ({p['in_flight']} in flight): TPOT {_pct(w['change'])} "
              f"{_side(w['change'])} ({noise}); period {_pct(p['period_change'])} "
              f"{_side(p['period_change'])}")
    for key, label in (("tpot", "TPOT"), ("period", "step period")):
        ts = d["turns"][key]
        if not ts:
            print(f"  by {label}: no sign change")
        for t in ts:
            print(f"  by {label}: turns between {t['before']} and {t['after']}, "
                  f"{t['from_side']} to {t['to_side']}")


def main(argv):
    if len(argv) != 2:
        print("usage: sweep_truth.py SWEEP_FOLDER", file=sys.stderr)
        return 2
    print_tables(sweep_truth(argv[1]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
