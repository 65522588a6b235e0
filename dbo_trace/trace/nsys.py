"""A reader for Nsight Systems exports (`nsys export --type=sqlite`), into the same timeline model as
Kineto traces, so that every analysis runs on them unchanged.

The export's schema (Nsight Systems' documentation of its SQLite export, docs/analysis.md
"Nsight Systems exports"): times are integer nanoseconds from the session start, whose wall-clock
time is `TARGET_INFO_SESSION_START_TIME.utcEpochNs`; names are ids into `StringIds(id, value)`;
threads and processes are serialized global ids, the process id in bits 24-47 and the thread id in
bits 0-23. GPU work is in `CUPTI_ACTIVITY_KIND_KERNEL` / `_MEMCPY` / `_MEMSET` (with
`--cuda-graph-trace=node` a replayed kernel has a `graphNodeId` and the `cudaGraphLaunch`'s
correlation id), CUDA API calls in `CUPTI_ACTIVITY_KIND_RUNTIME`, NVTX ranges in `NVTX_EVENTS`.

One export may hold several processes (an MPI job, vLLM's engine cores): each process that ran GPU
work is one timeline. Rows are read in pieces straight into arrays, so memory is the columns.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from dbo_trace.trace.errors import InputError
from dbo_trace.trace.kineto.blocks import SQLITE_MAGIC
from dbo_trace.trace.kineto.columns import MAX_NAME_CHARS
from dbo_trace.trace.timeline import MAX_BASE_TIME_NS, Intervals, LaunchArgs, Timeline

if TYPE_CHECKING:  # sqlite3 is imported where an export is read, not with every `report` (issue 55)
    import sqlite3

NSYS_REP_SUFFIX = ".nsys-rep"

_KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_NVTX = "NVTX_EVENTS"
# NVTX event types that are ranges (push/pop and start/end); marks and naming events are not.
NVTX_RANGE_TYPES = (59, 60)
_ROWS = 1 << 16  # rows fetched at a time
_PID_SHIFT, _ID_MASK = 24, (1 << 24) - 1
EXPORT_TIMEOUT_S = 3600.0  # for `nsys export` of a .nsys-rep (a large report takes minutes)
_LOG_TAIL = 4096  # bytes of nsys's output kept for the error line

# CUPTI's memcpy kinds, named as Kineto names its copies.
_COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
# nsys names API calls by their versioned entry point (cudaLaunchKernel_v7000) and per-thread
# default-stream variant (_ptsz, _ptds); the analyses know them by their plain names.
_API_SUFFIX = re.compile(r"(?:_v\d+)?(?:_pt(?:sz|ds))?$")


def is_nsys(path: Path) -> bool:
    """An Nsight Systems report or its SQLite export (by suffix or by the SQLite header)."""
    if path.name.endswith(NSYS_REP_SUFFIX):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def plain_api_name(name: str) -> str:
    return _API_SUFFIX.sub("", name, count=1) or name


def read_nsys(path: Path, first_rank: int = 0) -> list[Timeline]:
    """Every process of the export that ran GPU work, as timelines numbered from first_rank."""
    if path.name.endswith(NSYS_REP_SUFFIX):
        with tempfile.TemporaryDirectory(prefix="dbo-trace-nsys-") as tmp:
            return _read_export(_export_report(path, Path(tmp)), first_rank, shown_as=path)
    return _read_export(path, first_rank, shown_as=path)


def _export_report(path: Path, tmp: Path) -> Path:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(
            f"{path}: an Nsight Systems report; reading it needs `nsys` on PATH. "
            f"Export it where nsys is installed (nsys export --type=sqlite {path.name}) and give the .sqlite file"
        )
    out = tmp / (path.name[: -len(NSYS_REP_SUFFIX)] + ".sqlite")
    # nsys's output goes to a file, of which only the end is read, and it runs in its own process
    # group, killed whole on a timeout or an interrupt: a hung or chatty nsys (or a child of it that
    # keeps the pipes open) cannot hold the report or its memory.
    with open(tmp / "nsys-export.log", "w+b") as log:
        try:
            proc = subprocess.Popen(
                [nsys, "export", "--type=sqlite", "--force-overwrite=true", "-o", str(out), str(path.resolve())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        except OSError as exc:
            raise InputError(f"{path}: `nsys export` failed ({exc}); export it by hand and give the .sqlite file") from None
        try:
            code = proc.wait(timeout=EXPORT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InputError(
                f"{path}: `nsys export` ran past {EXPORT_TIMEOUT_S:.0f} s; export it by hand and give the .sqlite file"
            ) from None
        finally:  # nsys itself, or what it left running (which could still be writing the export)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL))
        said = log.read().decode("utf-8", "replace").strip().splitlines()
    if code != 0 or not out.is_file():
        raise InputError(f"{path}: `nsys export` failed ({said[-1] if said else f'exit {code}'})")
    return out


def _connect(path: Path, shown_as: Path) -> sqlite3.Connection:
    import sqlite3

    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        db.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise InputError(f"{shown_as}: not a readable SQLite file ({exc}); give `nsys export --type=sqlite` output") from None
    return db


def _tables(db: sqlite3.Connection) -> dict[str, set[str]]:
    # Tables only: an export's are tables, and a view (or a virtual table) is a query that may never
    # end, or make gigabytes from a small file; what is read is then bounded by the file's size.
    names = [
        r[0]
        for r in db.execute(
            "select name from sqlite_master where type = 'table' and upper(coalesce(sql, '')) not like 'CREATE VIRTUAL%'"
        )
    ]
    # The name as a bound parameter: a table named with a quote is any other table, not SQL.
    return {n: {r[0] for r in db.execute("select name from pragma_table_info(?)", (n,))} for n in names}


def _read_export(path: Path, first_rank: int, shown_as: Path) -> list[Timeline]:
    import sqlite3

    db = _connect(path, shown_as)
    try:
        tables = _tables(db)
        if "StringIds" not in tables or not any(t in tables for t in (_KERNELS, _MEMCPY, _MEMSET, _RUNTIME, _NVTX)):
            raise InputError(
                f"{shown_as}: an SQLite file without Nsight Systems' tables (StringIds, CUPTI_ACTIVITY_KIND_*); "
                "give the output of `nsys export --type=sqlite`"
            )
        return _timelines(db, tables, first_rank, shown_as)
    except sqlite3.Error as exc:
        raise InputError(f"{shown_as}: cannot read the Nsight Systems export ({exc})") from None
    except _BadValue as exc:
        raise InputError(f"{shown_as}: {exc}") from None
    finally:
        db.close()


def _int_columns(db: sqlite3.Connection, table: str, columns: list[str], where: str = "") -> list[np.ndarray]:
    """Integer columns of a table as arrays, read _ROWS rows at a time (NULL and absent columns -1)."""
    cursor = db.execute(f"select {', '.join(f'coalesce({c}, -1)' for c in columns)} from {table} {where}")
    pieces = []
    while rows := cursor.fetchmany(_ROWS):
        pieces.append(_int_block(rows, len(columns), table))
    block = np.concatenate(pieces) if pieces else np.empty((0, len(columns)), np.int64)
    return [block[:, i].copy() for i in range(len(columns))]


class _BadValue(Exception):
    """A column of the export holds what nsys never writes there (the message says which table)."""


def _int_block(rows: list[Any], width: int, table: str) -> np.ndarray:
    """Rows of integers as an array; a text, blob or out-of-range value (a corrupt or hand-made
    file) is bad input, not a crash."""
    try:
        return np.array(rows, dtype=np.int64).reshape(len(rows), width)
    except (ValueError, TypeError, OverflowError):
        raise _BadValue(
            f"{table} holds a value that is not a 64-bit integer where nsys writes one; "
            "re-export it with `nsys export --type=sqlite`"
        ) from None


def _strings(db: sqlite3.Connection, ids: Iterable[int]) -> dict[int, str]:
    wanted = sorted({int(i) for i in ids if i >= 0})
    found: dict[int, str] = {}
    for lo in range(0, len(wanted), 500):
        chunk = wanted[lo : lo + 500]
        marks = ",".join("?" * len(chunk))
        found.update(
            (i, _text(v))
            for i, v in db.execute(f"select id, substr(value, 1, {MAX_NAME_CHARS}) from StringIds where id in ({marks})", chunk)
        )
    return found


def _text(value: Any) -> str:
    """A string as nsys writes it; a blob or a number where text belongs (a hand-made file) is read as text."""
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Names:
    """The timeline's name table: each distinct string once."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def of(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            i = self._index[name] = len(self.names)
            self.names.append(name)
        return i

    def lookup(self, ids: np.ndarray, strings: dict[int, str], plain: bool = False, missing: str = "?") -> np.ndarray:
        """Our name index for each of the export's string ids."""
        distinct, inverse = np.unique(ids, return_inverse=True)
        table = np.fromiter(
            (self.of(plain_api_name(n) if plain else n) for n in (strings.get(int(i), missing) for i in distinct)),
            np.int64,
            len(distinct),
        )
        return table[inverse.reshape(-1)] if len(ids) else np.empty(0, np.int64)


def _timelines(db: sqlite3.Connection, tables: dict[str, set[str]], first_rank: int, source: Path) -> list[Timeline]:
    gpu_parts = []  # (table, start, end, name ids, stream, correlation, pid, launch: (n, 9) int32)
    for table in (_KERNELS, _MEMCPY, _MEMSET):
        if table not in tables:
            continue
        cols = tables[table]
        label = "demangledName" if "demangledName" in cols else ("shortName" if "shortName" in cols else "-1")
        what = "copyKind" if table == _MEMCPY and "copyKind" in cols else ("-1" if table != _KERNELS else label)
        launch = _launch_columns(cols) if table == _KERNELS else []
        start, end, name, stream, corr, gpid, *launched = _int_columns(
            db, table, ["start", "end", what, "streamId", "correlationId", "globalPid", *launch], "where end >= start"
        )
        gpu_parts.append((table, start, end, name, stream, corr, gpid >> _PID_SHIFT & _ID_MASK, _launch_of(launched, len(start))))
    pids = np.unique(np.concatenate([p[6] for p in gpu_parts])) if gpu_parts else np.empty(0, np.int64)
    if not len(pids):  # no kernel, memcpy or memset table, or none with a row
        raise InputError(f"{source}: the export holds no CUDA kernels or copies (was it recorded with `nsys profile -t cuda`?)")
    kernel_names = _strings(db, np.concatenate([p[3] for p in gpu_parts if p[0] == _KERNELS] or [np.empty(0, np.int64)]))

    calls = None
    if _RUNTIME in tables:
        calls = _int_columns(db, _RUNTIME, ["start", "end", "nameId", "globalTid", "correlationId"], "where end >= start")
    call_names = _strings(db, calls[2]) if calls is not None else {}
    nvtx = _nvtx_ranges(db, tables)
    session = _session_start_ns(db, tables)
    thread_names = _thread_names(db, tables)

    out = []
    for k, pid in enumerate(pids):
        out.append(
            _timeline_of(
                int(pid),
                first_rank + k,
                source,
                gpu_parts,
                kernel_names,
                calls,
                call_names,
                nvtx,
                session,
                thread_names,
            )
        )
    return out


def _timeline_of(
    pid: int,
    rank: int,
    source: Path,
    gpu_parts: list[tuple[Any, ...]],
    kernel_names: dict[int, str],
    calls: list[np.ndarray] | None,
    call_names: dict[int, str],
    nvtx: tuple[list[np.ndarray], list[str]] | None,
    session_ns: int | None,
    thread_names: dict[int, str],
) -> Timeline:
    names = _Names()
    g_start: list[np.ndarray] = []
    g_end: list[np.ndarray] = []
    g_name: list[np.ndarray] = []
    g_lane: list[np.ndarray] = []
    g_corr: list[np.ndarray] = []
    g_copy: list[np.ndarray] = []
    g_launch: list[np.ndarray] = []
    for table, start, end, name, stream, corr, gpid, launch in gpu_parts:
        mine = gpid == pid
        g_launch.append(launch[mine])
        if table == _KERNELS:
            ids = names.lookup(name[mine], kernel_names, missing="(unnamed kernel)")
        elif table == _MEMCPY:
            copy_names = {int(c): f"Memcpy {_COPY_KIND.get(int(c), '?')}" for c in np.unique(name[mine])}
            ids = names.lookup(name[mine], copy_names)
        else:
            ids = np.full(int(mine.sum()), names.of("Memset"), np.int64)
        for column, values in zip(
            (g_start, g_end, g_name, g_lane, g_corr, g_copy),
            (start[mine], end[mine], ids, stream[mine], corr[mine], np.full(int(mine.sum()), table != _KERNELS)),
        ):
            column.append(values)
    gpu, gpu_is_copy = _intervals(g_start, g_end, g_name, g_lane, g_corr, g_copy)
    launch = np.concatenate(g_launch)[np.argsort(np.concatenate(g_start), kind="stable")]  # in _intervals' order

    if calls is not None:
        c_start, c_end, c_name, c_tid, c_corr = calls
        mine = (c_tid >> _PID_SHIFT & _ID_MASK) == pid
        c_start, c_end, c_tid, c_corr = c_start[mine], c_end[mine], c_tid[mine] & _ID_MASK, c_corr[mine]
        ids = names.lookup(c_name[mine], call_names, plain=True)
        keep = _outermost_of_twins(c_start, c_end, ids, c_tid, c_corr)
        call_iv, _ = _intervals([c_start[keep]], [c_end[keep]], [ids[keep]], [c_tid[keep]], [c_corr[keep]], None)
    else:
        call_iv = _empty()

    if nvtx is not None:
        (n_start, n_end, n_gtid, n_text), texts = nvtx
        mine = (n_gtid >> _PID_SHIFT & _ID_MASK) == pid
        n_name = names.lookup(n_text[mine], dict(enumerate(texts)), missing="")
        n_tid = n_gtid[mine] & _ID_MASK
        cpu, _ = _intervals([n_start[mine]], [n_end[mine]], [n_name], [n_tid], [np.full(len(n_tid), -1, np.int64)], None)
    else:
        cpu = _empty()

    metadata: dict[str, Any] = {"format": "nsys-sqlite"}
    threads = {tid & _ID_MASK: name for tid, name in thread_names.items() if (tid >> _PID_SHIFT & _ID_MASK) == pid}
    if threads:
        metadata["threadNames"] = threads
    return Timeline(
        source=source,
        claimed_rank=rank,
        pid=pid,
        names=names.names,
        gpu=gpu,
        gpu_is_copy=gpu_is_copy,
        calls=call_iv,
        cpu=cpu,
        cpu_is_annotation=np.ones(len(cpu), bool),  # NVTX ranges are the user's annotations
        base_time_ns=session_ns,
        metadata=metadata,
        launch=LaunchArgs(launch[:, 0:3], launch[:, 3:6], launch[:, 6], launch[:, 7], launch[:, 8]),
    )


# A kernel's launch in the export (LaunchArgs' columns: grid, block, registers per thread, shared
# memory per CTA as static and dynamic together, as Kineto counts it, and the device), each -1 where
# the export lacks the column or a row holds no whole number there.
_LAUNCH = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "deviceId")


def _launch_columns(cols: set[str]) -> list[str]:
    """The SQL of the launch columns (_LAUNCH) this kernel table has; -1 for those it lacks."""

    def whole(c: str) -> str:
        return f"(case when typeof({c}) = 'integer' then {c} end)" if c in cols else "-1"

    shared = whole("staticSharedMemory")
    if "staticSharedMemory" in cols and "dynamicSharedMemory" in cols:
        shared = f"({shared} + {whole('dynamicSharedMemory')})"
    return [shared if c == "staticSharedMemory" else whole(c) for c in _LAUNCH]


def _launch_of(columns: list[np.ndarray], n: int) -> np.ndarray:
    """(n, 9) int32 of LaunchArgs' columns from the export's (none: a copy's table, all -1): a row of
    -1 where its grid or block is not whole numbers in (0, 2**31), -1 for any other value out of [0, 2**31)."""
    if not columns:
        return np.full((n, len(_LAUNCH)), -1, np.int32)
    out = np.stack(columns, axis=1)
    end = 1 << 31
    out[(out < 0) | (out >= end)] = -1
    out[((out[:, :6] <= 0) | (out[:, :6] >= end)).any(axis=1)] = -1
    return out.astype(np.int32)


def _outermost_of_twins(start: np.ndarray, end: np.ndarray, name: np.ndarray, tid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """nsys may record one API call twice, the entry point and its versioned implementation nested in
    it, with one correlation id (`cudaMalloc` around `cudaMalloc_v3020`): keep the outer one, so that
    a call is counted once, as Kineto records it."""
    n = len(start)
    if not n:
        return np.ones(0, bool)
    # Twins share (thread, correlation, plain name); the outer one starts first, or lasts longest.
    order = np.lexsort((-(end - start), start, name, corr, tid))
    t, c, m = tid[order], corr[order], name[order]
    first = np.ones(n, bool)
    first[1:] = (t[1:] != t[:-1]) | (c[1:] != c[:-1]) | (m[1:] != m[:-1]) | (c[1:] < 0)
    keep = np.zeros(n, bool)
    keep[order[first]] = True
    return keep


def _nvtx_ranges(db: sqlite3.Connection, tables: dict[str, set[str]]) -> tuple[list[np.ndarray], list[str]] | None:
    """NVTX push/pop and start/end ranges as (start, end, global thread id, text key) columns and
    the distinct texts the keys index: a range's text is inline (`text`) or registered (`textId`).
    Read in pieces, so that a trace of millions of ranges (torch's emit_nvtx) is held as arrays."""
    if _NVTX not in tables or not {"text", "textId"} <= tables[_NVTX]:
        return None
    types = ",".join(map(str, NVTX_RANGE_TYPES))
    cursor = db.execute(
        f"select start, end, coalesce(globalTid, -1), coalesce(textId, -1), substr(text, 1, {MAX_NAME_CHARS}) from {_NVTX} "
        f"where eventType in ({types}) and end is not null and end >= start"
    )
    keys: dict[str | int, int] = {}  # an inline text, or a textId
    parts: list[np.ndarray] = []
    while rows := cursor.fetchmany(_ROWS):
        keyed = []
        for start, end, tid, text_id, text in rows:
            key: str | int = _text(text) if text is not None else text_id if isinstance(text_id, int) else -1
            keyed.append((start, end, tid, keys.setdefault(key, len(keys))))
        parts.append(_int_block(keyed, 4, _NVTX))
    columns = np.concatenate(parts) if parts else np.empty((0, 4), np.int64)
    registered = _strings(db, [k for k in keys if isinstance(k, int)])
    texts = [k if isinstance(k, str) else registered.get(k, "") for k in keys]
    return [columns[:, i].copy() for i in range(4)], texts


def _intervals(
    starts: list[np.ndarray],
    ends: list[np.ndarray],
    names: list[np.ndarray],
    lanes: list[np.ndarray],
    corrs: list[np.ndarray],
    copies: list[np.ndarray] | None,
) -> tuple[Intervals, np.ndarray]:
    start = np.concatenate(starts) if starts else np.empty(0, np.int64)
    order = np.argsort(start, kind="stable")

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return (np.concatenate(parts) if parts else np.empty(0, dtype))[order]

    iv = Intervals(
        start=start[order] / 1000.0,  # ns -> the timeline's microseconds
        end=cat(ends, np.int64) / 1000.0,
        name=cat(names, np.int64),
        lane=cat(lanes, np.int64),
        correlation=cat(corrs, np.int64),
    )
    return iv, (cat(copies, bool) if copies is not None else np.zeros(len(start), bool))


def _empty() -> Intervals:
    return _intervals([], [], [], [], [], None)[0]


def _session_start_ns(db: sqlite3.Connection, tables: dict[str, set[str]]) -> int | None:
    if "utcEpochNs" not in tables.get("TARGET_INFO_SESSION_START_TIME", set()):
        return None
    row = db.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) and 0 < row[0] < MAX_BASE_TIME_NS else None


def _thread_names(db: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[int, str]:
    if not {"nameId", "globalTid"} <= tables.get("ThreadNames", set()):
        return {}
    rows = db.execute(
        f"select t.globalTid, substr(s.value, 1, {MAX_NAME_CHARS}) from ThreadNames t join StringIds s on s.id = t.nameId"
    ).fetchall()
    return {int(tid): str(name) for tid, name in rows if isinstance(tid, int)}
