"""`dbo-trace archive`: one file a reviewer can open, under a size cap, with secrets out.

Holds the Markdown summary, the timeline picture of the median step, the JSON
report, a Perfetto trace of a window of steps around the median step (not the
whole run), and the recording's manifest, redacted again on packing. (A
*recording*, the folder `record` writes, is what docs and code call a bundle.)
`report` reads an archive back: its JSON report, rendered as text.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
import zlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from dbo_trace import bundle as fmt
from dbo_trace.analysis.afd.gpu_sharing import GpuSharing
from dbo_trace.analysis.afd.roles import RolesInfo
from dbo_trace.analysis.model import Report
from dbo_trace.render.pictures.step_view import steps_around_median, window_steps
from dbo_trace.errors import shown
from dbo_trace.files import create_file, replace_file

if TYPE_CHECKING:
    from dbo_trace.render.document import ReportDocument
    from dbo_trace.render.sweep import SweepDocument

MEMBER_ROOT = "dbo-trace"
REPORT_MEMBER = f"{MEMBER_ROOT}/report.json"
SWEEP_MEMBER = f"{MEMBER_ROOT}/sweep-summary.json"  # a load sweep's archive holds its summary instead (app/sweep_archive.py)


# Reading an archive somebody attached is reading untrusted input: bounded in time and memory
# (docs/outputs.md). `pack` writes the report third, after the summary and the picture, so it is
# found among the first members, early in the (inflated) tar stream; a member larger than the cap
# is refused from its header, before a byte of it is inflated.
MAX_MEMBERS_BEFORE_REPORT = 16  # members read (headers only) before the report must have appeared
MAX_BYTES_BEFORE_REPORT = 256 << 20  # of the inflated tar stream, headers and members skipped
MAX_REPORT_BYTES = 128 << 20  # the report's JSON (a run of tens of thousands of steps is ~50 MB)
# After the report, the listing goes on to its end, so that a member held twice is found (tar -x
# gives its last copy, this reader the first): bounded like the rest.
MAX_MEMBERS = 64  # members in all (`pack` writes five)
MAX_LISTING_BYTES = 1 << 30  # of the inflated tar stream in all (a 25 MB archive inflates to ~100 MB)


MAX_HEADER_BYTES = 64 << 10  # a pax or GNU long-name header's own data (`pack` writes none)
# The headers whose data tarfile reads into memory whole, as part of the next member's header.
_EXTENDED_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class HeaderTooLarge(Exception):
    """A member's extended header is over MAX_HEADER_BYTES, or is a sparse file's (never `pack`'s)."""


class _BoundedTarInfo(tarfile.TarInfo):
    """A header read as tarfile reads it, but whose extended data (pax, GNU long names) is refused
    from its size before tarfile reads it whole into memory: 300 MB of a pax header gzip to 0.4 MB,
    and come before any member. A sparse file's header (its map read block after block) likewise."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED_HEADERS and self.size > MAX_HEADER_BYTES:
            size = f"{self.size / 1e6:.1f} MB"
            raise HeaderTooLarge(f"a member's extended header is {size}, over the {MAX_HEADER_BYTES >> 10} KiB one may be")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise HeaderTooLarge(f"its member {self.name!r} is a sparse file; an archive holds only plain files")
        return super()._proc_member(tar)  # type: ignore[misc,no-any-return]  # tarfile's own, not in its stubs

    # A pax header may make its member a GNU sparse file, whose map tarfile reads from the member's
    # data, as many numbers as the map says (a trillion, from a header of a few bytes), before the
    # listing goes on; `pack` writes no sparse file.
    def _proc_gnusparse_00(self, *_: object) -> None:
        raise HeaderTooLarge("a member is a sparse file (its pax header says so); an archive holds only plain files")

    _proc_gnusparse_01 = _proc_gnusparse_10 = _proc_gnusparse_00


def _open(path: Path) -> tarfile.TarFile:
    return tarfile.open(path, tarinfo=_BoundedTarInfo)


def is_archive(path: Path) -> bool:
    """A review archive: a tar file (gzipped or not) whose first member is one of `pack`'s
    (`dbo-trace/...`). Only its first header is read; read_report_document checks the rest. A tar
    whose first header is too large to read counts as one, so that reading it names the problem."""
    try:
        if not path.is_file():
            return False
        with _open(path) as tar:
            first = tar.next()
            return first is not None and first.name.startswith(f"{MEMBER_ROOT}/")
    except HeaderTooLarge:
        return True
    except (OSError, tarfile.TarError, EOFError, zlib.error):
        return False


def _member_name(name: str) -> str:
    """The file tar -x writes a member to, as a path inside the folder: `./a//b` and `/a/b` are `a/b`."""
    return posixpath.normpath("/" + name).lstrip("/")


def _checked(member: tarfile.TarInfo, seen: set[str], path: Path, fix: str) -> tarfile.TarInfo:
    """A member that is a file or a folder, and the first of its name (tar -x would give the last)."""
    from dbo_trace.errors import UsageError

    if not (member.isfile() or member.isdir()):
        kind = "a symbolic link" if member.issym() else "a hard link" if member.islnk() else "a device or FIFO"
        raise UsageError(f"{path}: its member {shown(member.name, 80)} is {kind}; an archive holds only files{fix}")
    name = _member_name(member.name)
    if name in seen:
        raise UsageError(
            f"{path}: it holds {shown(name, 80)} twice (tar -x gives the last copy, this reader the "
            f"first); an archive holds each member once{fix}"
        )
    seen.add(name)
    return member


def _report_member(tar: tarfile.TarFile, path: Path, fix: str, seen: set[str]) -> tarfile.TarInfo:
    """The report's header, reading the listing only as far as it: a bounded number of members, a
    bounded number of bytes skipped, no link, device or FIFO among them, and no name twice."""
    from dbo_trace.errors import UsageError

    for _ in range(MAX_MEMBERS_BEFORE_REPORT):
        member = tar.next()
        if member is None:
            break
        _checked(member, seen, path, fix)
        if member.name in (REPORT_MEMBER, SWEEP_MEMBER):
            if not member.isfile():
                raise UsageError(f"{path}: {member.name} is not a file{fix}")
            if member.size > MAX_REPORT_BYTES:
                raise UsageError(
                    f"{path}: {member.name} is {member.size / 1e6:.0f} MB, over the "
                    f"{MAX_REPORT_BYTES >> 20} MiB a report may be{fix}"
                )
            return member
        if member.offset_data + member.size > MAX_BYTES_BEFORE_REPORT:
            break
    raise UsageError(
        f"{path}: no {REPORT_MEMBER} among its first {MAX_MEMBERS_BEFORE_REPORT} members and "
        f"{MAX_BYTES_BEFORE_REPORT >> 20} MiB, where dbo-trace archive puts it{fix}"
    )


def _rest_of_listing(tar: tarfile.TarFile, path: Path, fix: str, seen: set[str]) -> None:
    """The members after the report, headers only, to the end: each checked as those before it (a
    second report.json after the first is refused, not hidden), within MAX_MEMBERS and MAX_LISTING_BYTES."""
    from dbo_trace.errors import UsageError

    while (member := tar.next()) is not None:
        if len(seen) >= MAX_MEMBERS:
            raise UsageError(f"{path}: it holds more than {MAX_MEMBERS} members (dbo-trace archive writes five){fix}")
        if member.offset_data + member.size > MAX_LISTING_BYTES:
            raise UsageError(
                f"{path}: its members run past {MAX_LISTING_BYTES >> 20} MiB inflated, where this reader stops "
                f"checking that each is held once{fix}"
            )
        _checked(member, seen, path, fix)


def _validation_problem(exc: Exception) -> str:
    """msgspec's ValidationError as `report.ranks[0].verdict.label: expected ...`: the place first."""
    text = str(exc)
    what, _, where = text.rpartition(" - at `")
    if not what:  # the document itself (msgspec names no place)
        what, where = text, "$`"
    place = "report" + where.removesuffix("`").removeprefix("$")
    what = _cut(what, 120)  # it quotes the value: an unknown key or enum value may be a megabyte
    return f"{place}: {what[:1].lower()}{what[1:]}"


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else f"{text[: most - 3]}..."


class _Head(msgspec.Struct):
    """What is read of a report before its types are known: its schema and version, as a string and
    a scalar (any of them, to be named in the error): an array or object there is refused as met,
    not built (a million {} in the version's place would be 64 MB of dicts)."""

    schema: str | None = None
    schema_version: bool | int | float | str | None = None


def read_report_document(path: Path) -> ReportDocument:
    """The report the archive holds (read_archive_document), where it holds a report, not a sweep's summary."""
    from dbo_trace.errors import UsageError
    from dbo_trace.render.document import ReportDocument

    document = read_archive_document(path)
    if not isinstance(document, ReportDocument):
        raise UsageError(f"{path}: it holds a load sweep's summary, not one recording's report")
    return document


def read_archive_document(path: Path) -> ReportDocument | SweepDocument:
    """The document the archive holds, decoded with every type checked: a recording's ReportDocument,
    or a load sweep's SweepDocument; UsageError (one line, naming the archive and the place) where it
    cannot be read."""
    return read_archive_stored(path)[0]


def read_archive_stored(path: Path) -> tuple[ReportDocument | SweepDocument, bytes]:
    """read_archive_document's document and the member's bytes it was decoded from, as stored: what
    --json of an archive shows (checked: every key and value the document's types allow, its
    version's keys alone), not a re-encoding of the decoded document (which would write a later
    version's defaults as nulls the stored document never had)."""
    from dbo_trace.errors import UsageError

    fix = "; re-create it with dbo-trace archive"
    try:
        with _open(path) as tar:
            seen: set[str] = set()
            member = _report_member(tar, path, fix, seen)
            stream = tar.extractfile(member)
            # As long as its header says (checked under the cap): a read of the cap itself would
            # allocate the whole cap, 128 MiB, for every archive shown.
            data = stream.read(member.size) if stream is not None else b""
            _rest_of_listing(tar, path, fix, seen)
    except HeaderTooLarge as exc:
        raise UsageError(f"{path}: {exc}{fix}") from None
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise UsageError(f"{path}: the archive's report cannot be read ({exc}){fix}") from None
    if member.name == SWEEP_MEMBER:
        return _sweep_document(path, data, fix), data
    return _report_document(path, data, fix), data


def _sweep_document(path: Path, data: bytes, fix: str) -> SweepDocument:
    """A sweep's summary decoded straight into its types (as a report is, below): its schema and
    version first, then the document, refused at the first value its types do not allow."""
    from dbo_trace.errors import UsageError
    from dbo_trace.render.sweep import SWEEP_SCHEMA, SWEEP_SCHEMA_VERSION, SweepDocument

    where = f"{path}: {SWEEP_MEMBER}"
    try:
        head = msgspec.json.decode(data, type=_Head)
        if head.schema != SWEEP_SCHEMA:
            raise UsageError(f"{where} is not a dbo-trace sweep summary{fix}")
        if type(head.schema_version) is not int or head.schema_version != SWEEP_SCHEMA_VERSION:
            raise UsageError(f"{where} has schema version {shown(head.schema_version)}, this dbo-trace reads {SWEEP_SCHEMA_VERSION}{fix}")
        return msgspec.json.decode(data, type=SweepDocument)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{where} is damaged: {_validation_problem(exc)}{fix}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise UsageError(f"{where} is not valid JSON ({why}){fix}") from None


def _report_document(path: Path, data: bytes, fix: str) -> ReportDocument:
    from dbo_trace.errors import UsageError
    from dbo_trace.render.document import READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, ReportDocument
    from dbo_trace.render.document.held import strict_type

    def not_json(exc: Exception) -> UsageError:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        return UsageError(f"{path}: {REPORT_MEMBER} is not valid JSON ({why}){fix}")

    # Decoded straight into types, twice: the schema and its version first (every other key skipped,
    # nothing built), then the document, which stops at the first value its types do not allow. No
    # untyped tree is built: a key the types do not have is refused as it is met, so a few kB of
    # gzip cannot inflate into gigabytes of Python objects, and nesting is bounded by the types
    # (msgspec's own recursion limit bounds what it skips).
    try:
        head = msgspec.json.decode(data, type=_Head)
    except msgspec.ValidationError as exc:  # not an object, or a number past what Python holds
        raise UsageError(f"{path}: {REPORT_MEMBER} is not a dbo-trace report ({_validation_problem(exc)}){fix}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise not_json(exc) from None
    if head.schema != SCHEMA:
        raise UsageError(f"{path}: {REPORT_MEMBER} is not a dbo-trace report{fix}")
    version = head.schema_version
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise UsageError(
            f"{path}: its report has schema version {shown(version)}, this dbo-trace reads "
            f"{', '.join(map(str, READABLE_VERSIONS[:-1]))} and {READABLE_VERSIONS[-1]} (writes {SCHEMA_VERSION}); re-create the archive from the recording"
        )
    try:
        # First into the strict form (render/document/held.py): a key a held analysis dataclass does
        # not have is refused there, as every block's is, and a key it lacks reads as UNSET (apart
        # from null) for the version checks; then into the document itself, where an absent key is
        # the dataclass's default (not measured).
        strict = msgspec.json.decode(data, type=strict_type(ReportDocument))
        document = msgspec.json.decode(data, type=ReportDocument)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{path}: {REPORT_MEMBER} is damaged: {_validation_problem(exc)}{fix}") from None
    except (msgspec.DecodeError, RecursionError) as exc:  # a lone surrogate in a string the first pass skipped
        raise not_json(exc) from None
    problem = _version_keys_problem(strict, version)
    if problem is not None:
        raise UsageError(f"{path}: {REPORT_MEMBER} is damaged: {problem}{fix}")
    return document


# The keys version 3 had that 4 dropped (render/document/host.py, Attribution): each version's own.
VERSION_3_ATTRIBUTION = ("ubatch_source", "step_source")
# The keys version 5 added to a rank (render/document/build.py, RankBlock): the DBO ledger.
VERSION_5_RANK = ("dbo_ledger", "comm_layers", "sm_evidence")
# The words version 7 added to the verdict's (a reason's kind, a next step's kind).
VERSION_7_WORDS = {"profiler_overhead", "ffn_server"}
# The words version 8 added (a label, a finding, a next step's kind), and the one it dropped.
VERSION_8_WORDS = {"single-batch", "exposed_comm", "measure_pays"}
BEFORE_8_WORDS = {"dbo_cannot_pay"}
VERSION_8_PROFILER = ("basis", "unprofiled_itl_ms", "below", "tpot_prefills")  # the profiler block's keys version 8 added
# The keys version 10 added to a rank's blocks (the analysis's figures, held as they are: issue 60).
VERSION_10_RANK = (("clocks", "lag_median_us"), ("incomplete", "activities"), ("launch_delay", "host_idle_us"),
                   ("launch_delay", "last_us"), ("launch_delay", "window_us"))  # fmt: skip
VERSION_OPERATION = (("layer", 5), ("role", 5), ("exposed_fraction", 8))  # a comm operation's keys, each from its version
VERSION_9_REPORT = ("overlap", "pipeline", "dbo_what_if", "dbo_what_if_not")  # an AFD arm's pipeline and its prediction (version 9)
# The roles block (render/document/afd.py, RolesBlock): version 11 holds the analysis's RolesInfo, its
# missing roles and GpuSharing (`sharing`) added, GpuSharing's two words no longer flat beside them.
VERSION_11_ROLES, BEFORE_11_ROLES = ("missing", "sharing"), ("shared_from", "mps_daemon")
ROLES_KEYS = tuple(f.name for f in fields(RolesInfo))
SHARING_KEYS = tuple(f.name for f in fields(GpuSharing))


def _verdict_problem(verdict: Any, where: str, version: int, phase: bool) -> str | None:
    """Version 6 gives every verdict its next step and its reasons as {kind, borderline, text};
    versions before it, the reasons' text alone and no next step. Only a phase's verdict may lack a
    label (each rank's in per_rank), and only a run's, a rank's or a step's has pays (one type holds them)."""
    from dbo_trace.render.document import ReasonBlock

    if not phase and verdict.label is None:
        return f"{where}.verdict: label is null, as only a phase's may be"
    if not phase and verdict.per_rank is not msgspec.UNSET:
        return f"{where}.verdict: per_rank is a key of a phase's verdict only"
    if phase and verdict.pays is not msgspec.UNSET:
        return f"{where}.verdict: pays is a key of a run's or a rank's verdict, not of a phase's"
    if (verdict.next_step is not msgspec.UNSET) != (version >= 6):
        return f"{where}.verdict: next_step is a key of version 6, {'not of' if version < 6 else 'missing in'} version {version}"
    step = verdict.next_step
    words: set[str] = {r.kind for r in verdict.reasons if isinstance(r, ReasonBlock)} | ({step.kind} if step else set())
    if version < 7 and words & VERSION_7_WORDS:
        return f"{where}.verdict: {sorted(words & VERSION_7_WORDS)[0]} is a word of version 7, not of version {version}"
    words |= {w for w in (verdict.label, verdict.qualifier, *verdict.findings) if w is not None}
    if version < 8 and words & VERSION_8_WORDS:
        return f"{where}.verdict: {sorted(words & VERSION_8_WORDS)[0]} is a word of version 8, not of version {version}"
    if version >= 8 and words & BEFORE_8_WORDS:
        return f"{where}.verdict: {sorted(words & BEFORE_8_WORDS)[0]} is a word before version 8, not of version {version}"
    if version < 8 and verdict.pays is not msgspec.UNSET:
        return f"{where}.verdict: pays is a key of version 8, not of version {version}"
    typed = [isinstance(r, ReasonBlock) for r in verdict.reasons]
    if (version >= 6 and not all(typed)) or (version < 6 and any(typed)):
        how = "as" if version >= 6 else "as its text, not"
        return f"{where}.verdict.reasons: version {version} gives a reason {how} {{kind, borderline, text}}"
    return None


def _verdicts_problem(document: Any, version: int) -> str | None:
    """The first verdict whose shape is not its version's: the run's, a phase's, a rank's, a step's."""
    blocks: list[tuple[str, Any, bool]] = [("report", document.verdict, False)]  # bool: a phase's
    blocks += [(f"report.phases[{name!r}]", p.verdict, True) for name, p in document.phases.items()]
    blocks += [(f"report.steps[{i}]", s.verdict, False) for i, s in enumerate(document.steps)]
    for k, rank in enumerate(document.ranks):
        blocks.append((f"report.ranks[{k}]", rank.verdict, False))
        blocks += [(f"report.ranks[{k}].phases[{name!r}]", p.verdict, True) for name, p in rank.phases.items()]
        blocks += [(f"report.ranks[{k}].steps[{i}]", s.verdict, False) for i, s in enumerate(rank.steps)]
    return next((p for where, v, phase in blocks if (p := _verdict_problem(v, where, version, phase)) is not None), None)


def _roles_problem(roles: Any, version: int) -> str | None:
    """The roles block's keys against its version (a held dataclass's absent key is UNSET in the strict decoding)."""
    if roles is None:
        return None
    if roles.ffn_window_restricted is msgspec.UNSET:  # every version writes it
        return f"report.roles: ffn_window_restricted is missing (version {version} has it)"
    for key in VERSION_11_ROLES:
        if (getattr(roles, key) is not msgspec.UNSET) != (version >= 11):
            return f"report.roles: {key} is a key of version 11, {'not of' if version < 11 else 'missing in'} version {version}"
    if version >= 11:  # the held RolesInfo and GpuSharing: every key written
        absent = [f"roles.{k}" for k in ROLES_KEYS if getattr(roles, k) is msgspec.UNSET]
        if roles.sharing is not None:
            absent += [f"roles.sharing.{k}" for k in SHARING_KEYS if getattr(roles.sharing, k) is msgspec.UNSET]
        if absent:
            return f"report.{absent[0]} is missing (version {version} has it)"
    for key in BEFORE_11_ROLES:
        if version >= 11 and getattr(roles, key) is not msgspec.UNSET:
            return f"report.roles: {key} is a key before version 11, which version {version} holds in sharing"
    return None


def _version_keys_problem(document: Any, version: int) -> str | None:
    """Where a document holds the keys of the other version than its number says (a rank's
    attribution block: version 3 has two keys that 4 dropped): written by neither. `document` is the
    archive's strict decoding (strict_type(ReportDocument)): a held dataclass's absent key is UNSET there."""
    if (document.what_if is not msgspec.UNSET) != (version >= 5):
        return f"report: what_if is a key of version 5, {'not of' if version < 5 else 'missing in'} version {version}"
    problem = _verdicts_problem(document, version)
    if problem is not None:
        return problem
    p = document.profiler
    if version < 8 and p is not msgspec.UNSET and any(getattr(p, k) is not msgspec.UNSET for k in VERSION_8_PROFILER):
        return f"report.profiler: {next(k for k in VERSION_8_PROFILER if getattr(p, k) is not msgspec.UNSET)} is a key of version 8, not of version {version}"
    since_9 = [k for k in VERSION_9_REPORT if getattr(document, k) is not msgspec.UNSET]
    if version < 9 and since_9:
        return f"report: {since_9[0]} is a key of version 9, not of version {version}"
    problem = _roles_problem(document.roles, version)
    if problem is not None:
        return problem
    blocks = [("report", document.disaggregated)] + [(f"report.ranks[{i}]", r.disaggregated) for i, r in enumerate(document.ranks)]
    for where, block in blocks:
        if block is not None and block.parts is not None and (block.parts.late_us is not msgspec.UNSET) != (version >= 7):
            told = "not of" if version < 7 else "missing in"
            return f"{where}.disaggregated.parts: late_us is a key of version 7, {told} version {version}"
        if block is not None and (block.host_lag_median_us is not msgspec.UNSET) != (version >= 8):
            told = "not of" if version < 8 else "missing in"
            return f"{where}.disaggregated: host_lag_median_us is a key of version 8, {told} version {version}"
        if block is not None and (block.overlapped_share is not msgspec.UNSET) != (version >= 9):
            told = "not of" if version < 9 else "missing in"
            return f"{where}.disaggregated: overlapped_share is a key of version 9, {told} version {version}"
    for i, rank in enumerate(document.ranks):
        rows = [(f"comm_operations[{k}]", op, since) for k, op in enumerate(rank.comm_operations) for since in VERSION_OPERATION]
        if rank.comm_layers is not msgspec.UNSET:
            rows += [(f"comm_layers[{k}]", row, ("exposed_fraction", 8)) for k, row in enumerate(rank.comm_layers)]
        for where, row, (key, since) in rows:
            if (getattr(row, key) is not msgspec.UNSET) != (version >= since):
                told = "not of" if version < since else "missing in"
                return f"report.ranks[{i}].{where}: {key} is a key of version {since}, {told} version {version}"
        if rank.contention is not None and (rank.contention.kernels_us is not msgspec.UNSET) != (version >= 9):
            told = "not of" if version < 9 else "missing in"
            return f"report.ranks[{i}].contention: kernels_us is a key of version 9, {told} version {version}"
        for name, key in VERSION_10_RANK:
            block = getattr(rank, name)
            if block is not None and block is not msgspec.UNSET and (getattr(block, key) is not msgspec.UNSET) != (version >= 10):
                told = "not of" if version < 10 else "missing in"
                return f"report.ranks[{i}].{name}: {key} is a key of version 10, {told} version {version}"
        if version < 5 and rank.host_stacks is not msgspec.UNSET:
            return f"report.ranks[{i}]: host_stacks is a key of version 5, not of version {version}"
        for key in VERSION_3_ATTRIBUTION:
            held = getattr(rank.attribution, key) is not msgspec.UNSET
            if held and version >= 4:
                return f"report.ranks[{i}].attribution: {key} is a key of version 3, which version {version} dropped"
            if not held and version == 3:
                return f"report.ranks[{i}].attribution: {key} is missing (version 3 has it)"
        for key in VERSION_5_RANK:
            held = getattr(rank, key) is not msgspec.UNSET
            if held and version < 5:
                return f"report.ranks[{i}]: {key} is a key of version 5, not of version {version}"
            if not held and version >= 5:
                return f"report.ranks[{i}]: {key} is missing (version {version} has it)"
    return None


@dataclass
class Packed:
    archive: Path
    size: int
    members: list[str]
    trimmed: list[str] = field(default_factory=list)


def step_window(report: Report, steps: int) -> tuple[dict[int, tuple[float, float]], list[str]]:
    """Per rank, the time window of `steps` consecutive steps centred on the median step."""
    windows, described = {}, []
    for rank in report.ranks:
        if not rank.steps:
            continue
        positions = steps_around_median(rank, steps)
        first, last = rank.steps[positions[0]], rank.steps[positions[-1]]
        windows[rank.rank] = (first.start_us, last.end_us)
        described.append(f"rank {rank.rank}: {window_steps(rank, positions)} of {len(rank.steps)} steps")
    return windows, described


def archive_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{MEMBER_ROOT}/{name}")
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pack(report: Report, source: Path, out: Path, max_bytes: int, steps: int, force: bool = False) -> Packed:
    """Every member rendered through the one registry: the Markdown linking the median step's
    picture, the picture, the JSON document, and a Perfetto window trimmed to fit max_bytes."""
    from dbo_trace.redact import redact_text
    from dbo_trace.render import RENDERERS, RenderOptions, as_bytes

    def text(name: str, options: RenderOptions = RenderOptions()) -> bytes:
        return redact_text(str(RENDERERS[name].render(report, options))).encode()

    members: dict[str, bytes] = {
        "summary.md": text("markdown", RenderOptions(image="timeline.png")),
        "timeline.png": as_bytes(RENDERERS["png"].render(report, RenderOptions())),
        "report.json": text("json"),
    }
    if fmt.is_bundle(source):
        members["manifest.json"] = fmt.archived_manifest(source)
    trimmed: list[str] = []
    for n in sorted({steps, 1}, reverse=True):
        windows, described = step_window(report, n)
        members["window.pftrace"] = as_bytes(RENDERERS["perfetto"].render(report, RenderOptions(windows=windows)))
        data = archive_bytes(members)
        if len(data) <= max_bytes:
            trimmed.append("Perfetto window: " + "; ".join(described))
            break
    else:
        del members["window.pftrace"]
        data = archive_bytes(members)
        trimmed.append(f"the Perfetto window was left out: one step alone exceeds the {max_bytes / 1e6:g} MB cap")
        if len(data) > max_bytes:
            raise ValueError(
                f"the summary alone is {len(data) / 1e6:.1f} MB, over the {max_bytes / 1e6:g} MB cap; raise --max-mb"
            )
    # Without --force, an archive that appeared during the work is kept (FileExistsError): the
    # earlier check was only a check.
    (replace_file if force else create_file)(out, data)
    return Packed(out, len(data), sorted(members), trimmed)
