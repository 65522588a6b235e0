"""A trace file opened (gzipped or not), inflated (ISA-L, else zlib) and read in blocks through its
the categories a file holds."""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any, BinaryIO, cast

from dbo_trace.trace.errors import InputError


try:  # ISA-L inflates 2-3x as fast as zlib (docs/performance.md); zlib where isal is missing
    from isal import isal_zlib
except ImportError:  # pragma: no cover  (a dependency; an environment without it still reads)
    isal_zlib = None  # type: ignore[assignment]

# isal's stub declares its error an instance; it is the class IsalError (not a zlib.error).
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) + (() if isal_zlib is None else (cast(type, isal_zlib.error),))
_READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, *INFLATE_ERRORS)


def _inflater() -> Any:
    """A gzip inflater (the zlib interface): ISA-L's where isal is installed, else zlib's."""
    return (zlib if isal_zlib is None else isal_zlib).decompressobj(zlib.MAX_WBITS | 16)


GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"  # an SQLite file's first bytes: an Nsight Systems export (trace/nsys.py)


class SqliteFile(InputError):
    """The file opened as a Kineto trace is an SQLite file (an Nsight Systems export): told by the
    bytes the open reads anyway, so that a report opens each trace once (trace/load.py reads it
    as an export then)."""


class _Gunzip:
    """A gzip file's bytes, inflated (by ISA-L, else zlib: the same interface) straight into blocks
    (GzipFile's buffered layers cost a third as much again as the inflating itself). Members are
    read one after another and zero padding after one is skipped, as gzip does."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.inflate = _inflater()
        self.pending = b""  # compressed bytes not yet given to inflate
        self.in_member = False  # inflate has begun a member that has not ended

    def read(self, size: int) -> bytes:
        """`size` bytes, fewer only at the end: processes that share a trace take turns by block, so
        blocks must be alike in size (short ones went every second time to the same process)."""
        parts, got = [], 0
        while got < size and (out := self._inflate(size - got)):
            parts.append(out)
            got += len(out)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _inflate(self, size: int) -> bytes:
        while True:
            if not self.pending:
                self.pending = self.fh.read(max(1 << 16, size // 8))  # JSON deflates 4-20x: about one read per block
                if not self.in_member:
                    self.pending = self.pending.lstrip(b"\0")
                if not self.pending:
                    if self.in_member:
                        raise EOFError("the file ends inside a gzip member")
                    return b""
            if not self.in_member:
                self.inflate, self.in_member = _inflater(), True
            out: bytes = self.inflate.decompress(self.pending, size)
            if self.inflate.eof:
                self.pending, self.in_member = self.inflate.unused_data.lstrip(b"\0"), False
            else:
                self.pending = self.inflate.unconsumed_tail
            if out:
                return out

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        self.fh.close()


def _read_block(fh: BinaryIO | _Gunzip, path: Path, size: int) -> bytes:
    try:
        return fh.read(size)
    except _READ_ERRORS as exc:
        what = "truncated or corrupt gzip" if isinstance(fh, _Gunzip) else "unreadable"
        raise InputError(f"{path}: {what} ({exc}); re-copy or re-export the trace") from None


def _open(path: Path) -> BinaryIO | _Gunzip:
    """The file, inflated where gzipped; SqliteFile where it is an SQLite file."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        head = fh.read(len(SQLITE_MAGIC))
        fh.seek(0)
    except OSError as exc:
        fh.close()
        raise InputError(f"{path}: unreadable ({exc})") from None
    if head == SQLITE_MAGIC:
        fh.close()
        raise SqliteFile(f"{path}: an SQLite file (an Nsight Systems export?), not a torch profiler trace")
    return _Gunzip(fh) if head.startswith(GZIP_MAGIC) else fh


def _rewound(fh: BinaryIO | _Gunzip, path: Path) -> BinaryIO | _Gunzip:
    """The open file from its start again (inflated afresh where gzipped), without opening it again."""
    raw = fh.fh if isinstance(fh, _Gunzip) else fh
    try:
        raw.seek(0)
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc}); re-copy or re-export the trace") from None
    return _Gunzip(raw) if isinstance(fh, _Gunzip) else raw


_CATEGORY = re.compile(rb'"cat"\s*:\s*"((?:[^"\\]|\\.){1,64})"')


def categories_seen(path: Path, limit: int = 64 << 20) -> dict[str, int]:
    """Event categories in the first `limit` bytes of a trace and how often each appears: what a trace
    that gave no usable events does hold (a cheap look, for the error message only)."""
    counts: dict[str, int] = {}
    try:
        fh = _open(path)
        try:
            head = fh.read(limit)
        finally:
            fh.close()
    except _READ_ERRORS + (InputError,):
        return counts
    for m in _CATEGORY.finditer(head):
        name = m.group(1).decode("utf-8", "replace")
        counts[name] = counts.get(name, 0) + 1
    return counts
