"""Reading the hook event logs (format in dbo_trace.bundle and docs/bundle-format.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from dbo_trace import bundle as fmt
from dbo_trace.trace.errors import InputError


@dataclass
class EventLogData:
    path: Path
    header: dict[str, Any]
    records: list[list[Any]]  # [t_ns, kind, ident, native_tid, ubatch, step, detail], in time order

    @property
    def pid(self) -> int | None:
        return self.header.get("pid")


_MAX_INT = 1 << 63


def _well_formed(record: object) -> bool:
    """Seven fields, the five numbers plain int64s (time.time_ns, thread ids, ubatch, step), kind a string."""
    if not isinstance(record, list) or len(record) != 7 or not isinstance(record[1], str):
        return False
    return all(type(record[i]) is int and -_MAX_INT <= record[i] < _MAX_INT for i in (0, 2, 3, 4, 5))


def read_event_log(path: Path) -> EventLogData:
    decode = msgspec.json.decode
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the event log ({exc.strerror})") from None
    if not lines:
        raise InputError(f"{path}: the event log is empty; the recording may have been killed before its first flush")
    try:
        header = decode(lines[0])
    except msgspec.DecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != fmt.EVENTS_FORMAT:
        raise InputError(f"{path}: not a dbo-trace event log (its first line is not the header)")
    for key in ("version", "pid"):  # the header's numbers, compared and matched below: whole numbers or absent
        value = header.get(key)
        if value is not None and not (type(value) is int and 0 <= value < _MAX_INT):
            raise InputError(f"{path}: the event log header's {key} is {value!r}, not a whole number; the log is damaged")
    if header.get("version", 0) > fmt.EVENTS_VERSION:
        raise InputError(
            f"{path}: event log version {header.get('version')} is newer than this dbo-trace reads; upgrade dbo-trace"
        )
    records = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            record = decode(line)
        except (msgspec.DecodeError, RecursionError):
            if number == len(lines):  # a last line cut by a kill: keep the rest
                break
            raise InputError(f"{path}:{number}: invalid JSON in the event log") from None
        if not _well_formed(record):
            raise InputError(
                f"{path}:{number}: an event log record must be [t_ns, kind, ident, native_tid, ubatch, step, detail] "
                "with whole numbers in range and a string kind"
            )
        records.append(record)
    records.sort(key=lambda r: r[0])
    return EventLogData(path=path, header=header, records=records)
