"""Test helpers for Nsight Systems exports, in plain Python and sqlite3 (nothing from dbo_trace).

- `kineto_to_nsys(trace, out)` writes a Kineto trace as an Nsight Systems SQLite export of the
  documented schema (StringIds, CUPTI_ACTIVITY_KIND_KERNEL / MEMCPY / MEMSET / RUNTIME, NVTX_EVENTS,
  ThreadNames, TARGET_INFO_SESSION_START_TIME; integer nanoseconds from the session start): what a
  `nsys profile` of the same run would hold where torch's ops are NVTX ranges (emit_nvtx).
- `events_from_nsys(path, pid)` reads an export back into Kineto-shaped event dicts for
  tests/references/headline_reference.py, the way the schema's documentation describes it.
"""

from __future__ import annotations

import re
import sqlite3

from headline_reference import load

PID_SHIFT, ID_MASK = 24, (1 << 24) - 1
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9}
API_VERSION = re.compile(r"(_v\d+)?(_ptsz|_ptds)?$")

SCHEMA = """
create table StringIds (id integer primary key, value text not null);
create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer, utcTime text, localTime text);
create table ThreadNames (nameId integer, priority integer, globalTid integer);
create table CUPTI_ACTIVITY_KIND_KERNEL (start integer not null, end integer not null, deviceId integer, contextId integer,
  streamId integer, correlationId integer, globalPid integer, demangledName integer, shortName integer,
  gridX integer, gridY integer, gridZ integer, blockX integer, blockY integer, blockZ integer, graphNodeId integer);
create table CUPTI_ACTIVITY_KIND_MEMCPY (start integer not null, end integer not null, deviceId integer, contextId integer,
  streamId integer, correlationId integer, globalPid integer, bytes integer, copyKind integer, graphNodeId integer);
create table CUPTI_ACTIVITY_KIND_MEMSET (start integer not null, end integer not null, deviceId integer, contextId integer,
  streamId integer, correlationId integer, globalPid integer, value integer, bytes integer, graphNodeId integer);
create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer not null, end integer not null, eventClass integer not null,
  globalTid integer, correlationId integer, nameId integer not null, returnValue integer not null, callchainId integer);
create table NVTX_EVENTS (start integer not null, end integer, eventType integer not null, rangeId integer, category integer,
  color integer, text text, globalTid integer, endGlobalTid integer, textId integer, domainId integer);
"""


def kineto_to_nsys(trace, out, pid=4242, versioned_api=True):
    """Write the Kineto trace's kernels, copies, API calls and CPU ranges as an nsys export. API calls
    get nsys's versioned names (cudaLaunchKernel_v7000) and each is recorded twice, the entry point
    around its implementation with one correlation id, as nsys does."""
    doc = load(trace)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    t0 = min(e["ts"] for e in events)
    base_ns = int(doc.get("baseTimeNanoseconds", 0)) + int(round(t0 * 1000))
    strings = {}

    def sid(text):
        return strings.setdefault(text, len(strings) + 1)

    tids = {}

    def gtid(tid):
        return (pid << PID_SHIFT) | tids.setdefault(str(tid), len(tids) + 1)

    def ns(us):
        return int(round((us - t0) * 1000))

    db = sqlite3.connect(out)
    db.executescript(SCHEMA)
    gpid = pid << PID_SHIFT
    for e in events:
        cat, args = e.get("cat"), e.get("args", {})
        start, end = ns(e["ts"]), ns(e["ts"] + e.get("dur", 0))
        corr = args.get("correlation")
        stream = args.get("stream", e.get("tid"))
        if cat == "kernel":
            db.execute(
                "insert into CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, globalPid, "
                "demangledName, shortName, graphNodeId) values (?,?,?,?,?,?,?,?,?)",
                (
                    start,
                    end,
                    args.get("device", 0),
                    stream,
                    corr,
                    gpid,
                    sid(e["name"]),
                    sid(e["name"][:40]),
                    args.get("graph node id"),
                ),
            )
        elif cat == "gpu_memcpy":
            kind = next((v for k, v in COPY_KINDS.items() if k in e["name"]), 8)
            db.execute(
                "insert into CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, globalPid, bytes, "
                "copyKind) values (?,?,?,?,?,?,?,?)",
                (start, end, args.get("device", 0), stream, corr, gpid, args.get("bytes", 0), kind),
            )
        elif cat == "gpu_memset":
            db.execute(
                "insert into CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, streamId, correlationId, globalPid, bytes) "
                "values (?,?,?,?,?,?,?)",
                (start, end, args.get("device", 0), stream, corr, gpid, args.get("bytes", 0)),
            )
        elif cat in ("cuda_runtime", "cuda_driver"):
            outer = (start, end, 0, gtid(e["tid"]), corr, sid(e["name"]), 0, None)
            db.execute("insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,?,?,?,?,?,?)", outer)
            if versioned_api:
                inner = (
                    start + min(100, (end - start) // 4),
                    end - min(100, (end - start) // 4),
                    0,
                    gtid(e["tid"]),
                    corr,
                    sid(e["name"] + "_v7000"),
                    0,
                    None,
                )
                db.execute("insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,?,?,?,?,?,?)", inner)
        elif cat in ("cpu_op", "user_annotation", "python_function"):
            db.execute(
                "insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) values (?,?,59,?,?,0)",
                (start, end, e["name"], gtid(e["tid"])),
            )
    db.execute("insert into TARGET_INFO_SESSION_START_TIME values (?, '', '')", (base_ns,))
    for tid, index in tids.items():
        db.execute("insert into ThreadNames values (?, 0, ?)", (sid(f"thread {tid}"), (pid << PID_SHIFT) | index))
    db.executemany("insert into StringIds values (?, ?)", [(i, s) for s, i in strings.items()])
    db.commit()
    db.close()
    return base_ns


def events_from_nsys(path, pid=None):
    """Kineto-shaped events (ts/end in microseconds from the session start) of one process of an
    export: kernels, copies, API calls under their plain names (one per call: of the records that
    share a thread, correlation id and plain name, the first), NVTX push/pop and start/end ranges."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    strings = dict(db.execute("select id, value from StringIds"))
    out = []

    def pid_of(global_id):
        return (global_id >> PID_SHIFT) & ID_MASK

    if pid is None:
        pid = pid_of(db.execute("select globalPid from CUPTI_ACTIVITY_KIND_KERNEL limit 1").fetchone()[0])
    for table, cat in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset"),
    ):
        if table not in tables:
            continue
        name = "demangledName" if cat == "kernel" else "0"
        for start, end, stream, corr, gp, nm in db.execute(
            f"select start, end, streamId, correlationId, globalPid, {name} from {table}"
        ):
            if pid_of(gp) != pid or end < start:
                continue
            args = {"stream": stream}
            if corr is not None:
                args["correlation"] = corr
            out.append(
                dict(
                    cat=cat, name=strings.get(nm, "copy") if cat == "kernel" else cat, ts=start / 1000, end=end / 1000, args=args
                )
            )
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        seen = set()
        rows = sorted(db.execute("select start, end, globalTid, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"))
        for start, end, tid, corr, nm in rows:
            if pid_of(tid) != pid or end < start:
                continue
            plain = API_VERSION.sub("", strings[nm], count=1)
            key = (tid, corr, plain)
            if corr is not None and key in seen:
                continue
            seen.add(key)
            args = {} if corr is None else {"correlation": corr}
            out.append(dict(cat="cuda_runtime", name=plain, ts=start / 1000, end=end / 1000, tid=tid & ID_MASK, args=args))
    if "NVTX_EVENTS" in tables:
        for start, end, text, text_id, tid in db.execute(
            "select start, end, text, textId, globalTid from NVTX_EVENTS where eventType in (59, 60) and end is not null"
        ):
            if pid_of(tid) != pid or end < start:
                continue
            out.append(
                dict(
                    cat="user_annotation",
                    name=text if text is not None else strings.get(text_id, ""),
                    ts=start / 1000,
                    end=end / 1000,
                    tid=tid & ID_MASK,
                    args={},
                )
            )
    db.close()
    return out
