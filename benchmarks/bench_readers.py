"""The candidate JSON decoders for Kineto traces, side by side in one run (issue 55).

    python benchmarks/bench_readers.py TRACE.json.gz [...] [--rounds 3] [--only a,b] [--chunk-mb 8]

Every candidate runs in a fresh process per run, the candidates alternating round by round; each
takes the gzipped trace to what the analyses need of it: the complete (`X`) events' category, name,
pid, tid, ts, dur, args.correlation and args.stream as arrays (the "least" rows stop short of that:
they are floors). Printed per candidate: the best and median time inside the process (the read
alone, imports apart), its imports, the child's peak resident memory (ru_maxrss: the whole process,
interpreter and imports included, plus its largest child's) as a multiple of the uncompressed JSON, the load average after
its last run, and how many `X` events it kept (which must agree).

Candidates (those whose package is missing are skipped, and said):
  json.load          gzip + json.load of the whole document: the baseline the aims are set against
  current-1w, -2w    dbo_trace.trace.kineto.read_kineto with 1 and 2 processes
  inflate-isal, -zlib  inflating alone, 1 MB at a time: ISA-L against zlib
  msgspec-least      inflate (isal) + msgspec's least parse (a struct of one field): the floor
                     under any reader that builds Python objects per event
  msgspec-arraylike  msgspec with array_like structs: decodes JSON arrays, not objects; Kineto writes
                     objects, so it is tried on one chunk and said
  orjson             the whole JSON inflated, orjson.loads, columns pulled per event
  simdjson           pysimdjson: the whole JSON inflated and parsed, columns pulled per event
                     (each access a Python object)
  pyarrow            pyarrow.json per chunk of --chunk-mb, Kineto's `},{` turned into newline-
                     delimited JSON; a chunk that Arrow refuses (a pid that is a string in some
                     events and a number in others: "Spans", "Traces") is counted as failed
  pyarrow-no-ids     the same without pid and tid (never refused, but not enough to build the
                     timeline): how fast Arrow's reader is where the types agree
  polars             polars.read_json per chunk of --chunk-mb (the bytes of the array slice), pid and
                     tid as strings (Polars takes numbers into a string column)
  duckdb             DuckDB read_json (yyjson) per chunk of --chunk-mb, each chunk handed as an
                     in-memory file (memfd), pid and tid as VARCHAR, its threads one per core
  duckdb-whole       DuckDB read_json of the gzipped file itself, traceEvents unnested
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 1 << 20
BOUNDARY = b"\n  },\n  {"  # between two events as Kineto writes them (no JSON string holds a raw newline)
KEEP_CATS = (
    "kernel gpu_memcpy gpu_memset cuda_runtime cuda_driver cpu_op user_annotation python_function".split()
)


def _inflater(kind: str = "isal") -> Any:
    if kind == "isal":
        from isal import isal_zlib

        return isal_zlib.decompressobj(31)
    import zlib

    return zlib.decompressobj(31)


def inflated_blocks(path: str, kind: str = "isal", size: int = BLOCK) -> Iterator[bytes]:
    inflate = _inflater(kind)
    with open(path, "rb") as fh:
        while block := fh.read(size // 8):
            out = inflate.decompress(block)
            if out:
                yield out
        rest = inflate.flush()
        if rest:
            yield rest


def inflate_all(path: str) -> bytes:
    from isal import isal_zlib

    with open(path, "rb") as fh:
        return isal_zlib.decompress(fh.read(), 31)


def event_chunks(path: str, chunk: int) -> Iterator[bytes]:
    """The traceEvents array's elements, in pieces of about `chunk` bytes of whole events (the bytes
    between `[`/BOUNDARY and the last BOUNDARY), each without brackets. The array's end is found by
    msgspec's skip over the last piece (Raw), good enough for a benchmark of Kineto-written files."""
    import msgspec

    pending, started = b"", False
    for block in inflated_blocks(path, size=chunk):
        pending += block
        if not started:
            at = pending.find(b'"traceEvents"')
            if at < 0:
                continue
            pending, started = pending[pending.index(b"[", at) + 1 :].lstrip(), True
        cut = pending.rfind(BOUNDARY)
        if cut > 0:
            yield pending[: cut + 4]
            pending = pending[cut + len(BOUNDARY) - 1 :]
    # the last events: up to the array's `]`, found by decoding `[` + rest as one Raw array prefix
    raw = msgspec.json.Decoder(list[msgspec.Raw])
    end = pending.rfind(b"]")
    while end > 0:
        try:
            raw.decode(b"[" + pending[:end] + b"]")
            break
        except msgspec.DecodeError:
            end = pending.rfind(b"]", 0, end)
    yield pending[:end].rstrip()


# ---- candidates: each returns the number of X events of the kept categories --------------------


def c_json_load(path: str) -> int:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KEEP_CATS)


def _current(path: str, workers: int) -> int:
    from dbo_trace.trace.kineto import read_kineto

    return len(read_kineto(Path(path), workers=workers).events.ts)


def c_current_1w(path: str) -> int:
    return _current(path, 1)


def c_current_2w(path: str) -> int:
    return _current(path, 2)


def c_inflate_isal(path: str) -> int:
    return sum(map(len, inflated_blocks(path, "isal"))) * 0


def c_inflate_zlib(path: str) -> int:
    return sum(map(len, inflated_blocks(path, "zlib"))) * 0


def c_msgspec_least(path: str) -> int:
    import msgspec

    class Phase(msgspec.Struct, gc=False):
        ph: str = ""

    decode = msgspec.json.Decoder(list[Phase]).decode
    return sum(sum(e.ph == "X" for e in decode(b"[" + c + b"]")) for c in event_chunks(path, BLOCK)) * 0


def c_msgspec_arraylike(path: str) -> int:
    import msgspec

    class Event(msgspec.Struct, array_like=True, gc=False):
        ph: str
        cat: str

    chunk = next(event_chunks(path, BLOCK))
    try:
        msgspec.json.Decoder(list[Event]).decode(b"[" + chunk + b"]")
    except msgspec.ValidationError as exc:
        print(f"msgspec-arraylike: Kineto's events are objects, not arrays: {exc}", file=sys.stderr)
        return -1
    return 0


def _columns_from_dicts(events: Any, get: Callable[[Any, str], Any]) -> int:
    """Columns pulled from parsed events one at a time (orjson's dicts, simdjson's proxies)."""
    import numpy as np

    cats, names, pids, tids, ts, dur, corr, stream = [], [], [], [], [], [], [], []
    keep = set(KEEP_CATS)
    for e in events:
        if get(e, "ph") != "X" or get(e, "cat") not in keep:
            continue
        cats.append(get(e, "cat"))
        names.append(get(e, "name"))
        pids.append(get(e, "pid"))
        tids.append(get(e, "tid"))
        ts.append(get(e, "ts"))
        dur.append(get(e, "dur"))
        args = get(e, "args")
        corr.append(-1 if args is None else args.get("correlation", -1))
        stream.append(-1 if args is None else args.get("stream", -1))
    np.array(ts, np.float64), np.array(dur, np.float64), np.array(corr, np.int64)
    return len(ts)


def c_orjson(path: str) -> int:
    import orjson

    doc = orjson.loads(inflate_all(path))
    return _columns_from_dicts(doc["traceEvents"], dict.get)


def c_simdjson(path: str) -> int:
    import simdjson

    parser = simdjson.Parser()
    doc = parser.parse(inflate_all(path))
    return _columns_from_dicts(doc["traceEvents"], lambda e, k: e.get(k))


def c_pyarrow(path: str, chunk: int, ids: bool = True) -> int:
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    args = pa.struct([("correlation", pa.int64()), ("stream", pa.int64())])
    schema = pa.schema(
        [("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()), ("dur", pa.float64()),
         ("args", args)] + ([("pid", pa.int64()), ("tid", pa.int64())] if ids else [])  # fmt: skip
    )
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True)
    kept = failed = 0
    for part in event_chunks(path, chunk):
        try:
            table = pj.read_json(io.BytesIO(part.replace(BOUNDARY, b"\n  }\n  {")), parse_options=options)
        except pa.ArrowInvalid:
            failed += 1
            continue
        table = table.filter(pc.and_(pc.equal(table["ph"], "X"), pc.is_in(table["cat"], pa.array(KEEP_CATS))))
        kept += table.num_rows
    print(f"pyarrow: {failed} chunks refused", file=sys.stderr)
    return kept if not failed else -failed


def c_pyarrow_no_ids(path: str, chunk: int) -> int:
    return c_pyarrow(path, chunk, ids=False)


def c_polars(path: str, chunk: int) -> int:
    import polars as pl

    schema = {
        "ph": pl.String, "cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String,
        "ts": pl.Float64, "dur": pl.Float64, "args": pl.Struct({"correlation": pl.Int64, "stream": pl.Int64}),
    }  # fmt: skip
    kept = 0
    for part in event_chunks(path, chunk):
        df = pl.read_json(b"[" + part + b"]", schema=schema)
        df = df.filter((pl.col("ph") == "X") & pl.col("cat").is_in(KEEP_CATS))
        cols = [df[c].to_numpy() for c in ("ts", "dur")] + [df["cat"].cast(pl.Categorical).to_physical().to_numpy()]
        kept += len(cols[0])
    return kept


_DUCK_COLUMNS = (
    "{ph:'VARCHAR',cat:'VARCHAR',name:'VARCHAR',pid:'VARCHAR',tid:'VARCHAR',ts:'DOUBLE',dur:'DOUBLE',"
    "args:'STRUCT(correlation BIGINT, stream VARCHAR)'}"
)


def c_duckdb(path: str, chunk: int) -> int:
    import duckdb

    con = duckdb.connect()  # its threads: one per core, as the current reader's processes
    cats = ",".join(f"'{c}'" for c in KEEP_CATS)
    kept = 0
    for part in event_chunks(path, chunk):
        fd = os.memfd_create("chunk")
        try:
            os.write(fd, b"[" + part + b"]")
            query = (
                f"SELECT cat, name, pid, tid, ts, dur, args.correlation AS corr, args.stream AS stream "
                f"FROM read_json('/proc/self/fd/{fd}', format='array', columns={_DUCK_COLUMNS}, "
                f"maximum_object_size={max(len(part) + 2, 1 << 24)}) WHERE ph = 'X' AND cat IN ({cats})"
            )
            cols = con.execute(query).fetchnumpy()
        finally:
            os.close(fd)
        kept += len(cols["ts"])
    return kept


def c_duckdb_whole(path: str) -> int:
    import duckdb

    con = duckdb.connect()
    cats = ",".join(f"'{c}'" for c in KEEP_CATS)
    events = _DUCK_COLUMNS[1:-1].replace(":", " ").replace("'", "")
    query = (
        f"WITH e AS (SELECT unnest(traceEvents) AS e FROM read_json('{path}', format='auto', records=true, "
        f"columns={{traceEvents: 'STRUCT({events})[]'}}, maximum_object_size={1 << 31})) "
        f"SELECT e.cat, e.name, e.pid, e.tid, e.ts, e.dur FROM e WHERE e.ph = 'X' AND e.cat IN ({cats})"
    )
    return len(con.execute(query).fetchnumpy()["ts"])


CANDIDATES: dict[str, tuple[Callable[..., int], str | None, bool]] = {
    # name: (function, the package it needs, whether it takes the chunk size)
    "json.load": (c_json_load, None, False),
    "current-1w": (c_current_1w, None, False),
    "current-2w": (c_current_2w, None, False),
    "inflate-isal": (c_inflate_isal, "isal", False),
    "inflate-zlib": (c_inflate_zlib, None, False),
    "msgspec-least": (c_msgspec_least, "msgspec", False),
    "msgspec-arraylike": (c_msgspec_arraylike, "msgspec", False),
    "orjson": (c_orjson, "orjson", False),
    "simdjson": (c_simdjson, "simdjson", False),
    "pyarrow": (c_pyarrow, "pyarrow", True),
    "pyarrow-no-ids": (c_pyarrow_no_ids, "pyarrow", True),
    "polars": (c_polars, "polars", True),
    "duckdb": (c_duckdb, "duckdb", True),
    "duckdb-whole": (c_duckdb_whole, "duckdb", False),
}
IMPORTS = {  # what each candidate imports before its read, timed apart
    "pyarrow": "pyarrow.json", "pyarrow-no-ids": "pyarrow.json", "polars": "polars", "duckdb": "duckdb",
    "duckdb-whole": "duckdb", "orjson": "orjson", "simdjson": "simdjson", "current-1w": "dbo_trace.trace.kineto",
    "current-2w": "dbo_trace.trace.kineto",
}  # fmt: skip


def run_one(name: str, path: str, chunk: int) -> None:
    """In the child: import, then read, each timed; one JSON line."""
    import importlib

    t0 = time.perf_counter()
    if name in IMPORTS:
        importlib.import_module(IMPORTS[name])
    t1 = time.perf_counter()
    fn, _, takes_chunk = CANDIDATES[name]
    kept = fn(path, chunk) if takes_chunk else fn(path)
    t2 = time.perf_counter()
    # This process's peak since its exec (VmHWM: ru_maxrss would count the parent's pages before the
    # exec), plus its children's largest (the current reader's worker).
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "kept": kept, "peak_kb": hwm + children}))


def _available(package: str | None) -> bool:
    if package is None:
        return True
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _child(cmd: list[str]) -> tuple[dict[str, Any] | None, float, str]:
    """Run cmd; (its JSON line, its peak resident MB, stderr's last line)."""
    proc = subprocess.run(cmd, capture_output=True)
    note = proc.stderr.decode(errors="replace").strip()
    if proc.returncode:
        return None, 0.0, note[-300:]
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return result, result["peak_kb"] * 1024 / 1e6, note


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", help="candidates, comma-separated (default: all whose package is installed)")
    p.add_argument("--chunk-mb", type=int, default=8)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    chunk = args.chunk_mb << 20
    if args.one:
        run_one(args.one, args.traces[0], chunk)
        return 0
    names = args.only.split(",") if args.only else list(CANDIDATES)
    missing = [n for n in names if not _available(CANDIDATES[n][1])]
    names = [n for n in names if n not in missing]
    import compileall

    compileall.compile_dir(ROOT / "dbo_trace", quiet=1)  # as an installed package has it
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"load {loadavg()}; chunks of {args.chunk_mb} MB; skipped (not installed): {', '.join(missing) or 'none'}")  # fmt: skip
    for path in args.traces:
        with gzip.open(path, "rb") as fh:
            mb = sum(len(b) for b in iter(lambda: fh.read(BLOCK << 4), b"")) / 1e6
        print(f"\n{path}: {mb:.1f} MB of JSON, {os.path.getsize(path) / 1e6:.1f} MB gzipped")
        runs: dict[str, list[tuple[dict[str, Any], float]]] = {n: [] for n in names}
        notes: dict[str, str] = {}
        loads: dict[str, str] = {}
        for _ in range(args.rounds):
            for name in names:  # alternating: each round runs every candidate once
                cmd = [sys.executable, __file__, "--one", name, "--chunk-mb", str(args.chunk_mb), path]
                result, peak, note = _child(cmd)
                loads[name] = loadavg()
                if result is None:
                    notes[name] = f"failed: {note.splitlines()[-1] if note else '?'}"
                    continue
                if note:
                    notes[name] = note.splitlines()[-1][:100]
                runs[name].append((result, peak))
        base = statistics.median(r["read_s"] for r, _ in runs["json.load"]) if runs.get("json.load") else None
        print(f"{'candidate':18s} {'best':>7s} {'median':>7s} {'MB/s':>6s} {'x json':>6s} {'import':>7s} "
              f"{'peak':>7s} {'x JSON':>6s} {'X events':>9s}  load after")  # fmt: skip
        for name in names:
            if not runs[name]:
                print(f"{name:18s} {notes.get(name, '')}")
                continue
            reads = [r["read_s"] for r, _ in runs[name]]
            best, med = min(reads), statistics.median(reads)
            peak = max(pk for _, pk in runs[name])
            imp = statistics.median(r["import_s"] for r, _ in runs[name])
            kept = runs[name][0][0]["kept"]
            ratio = f"{base / med:6.1f}" if base else "     -"
            print(f"{name:18s} {best:6.2f}s {med:6.2f}s {mb / med:6.0f} {ratio} {imp:6.2f}s {peak:6.0f}M "
                  f"{peak / mb:6.2f} {kept if kept > 0 else '-':>9}  {loads[name]}")  # fmt: skip
            if name in notes:
                print(f"{'':18s} ({notes[name]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
